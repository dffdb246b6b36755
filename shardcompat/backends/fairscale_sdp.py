"""``fairscale-sdp``: fairscale ``ShardedDataParallel`` + ``OSS`` (``simple``), OSS + DDP (``zero_dp_1``).

The trap this backend exists to absorb: fairscale >= 0.3.1 defaults ShardedDDP's
``reduce_buffer_size`` to 2**23 *elements*, which makes every small ``param.grad`` a view
into a bucket buffer.  torch >= 2.0's ``Optimizer.zero_grad()`` sets grads to ``None``,
cutting the views: the next backward writes fresh tensors while the bucket (holding the
last step's values) is what gets reduced, so ranks silently step on stale gradients.
So buckets are off (``reduce_buffer_size=0``: every gradient is reduced as its own tensor,
whatever zeroes it) unless ``bucket_cap_mb=`` asks for them; then the bucket is kept and all
zeroing goes through ShardedDDP's own ``zero_grad``, which zeroes bucket views in place
(the optimizer's ``zero_grad`` is redirected there too, for loops that call it directly).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist

from ..options import Precision, ShardingOptions, Stage
from ..prepared import Prepared
from ._base import OptimizerFactory, Placement, Plan, Probe, UnsupportedOptions
from ._fairscale_common import (
    accepts,
    grad_scaler,
    indexed_optimizer_state,
    named_optimizer_state,
    owner_clip_grad_norm_,
    probe_fairscale,
)
from ._optim import GROUPS_TEXT, optimizer_groups
from ._unused import SETTING, find_unused

__all__ = ["BACKEND", "FairscaleSdp", "FairscaleSdpPrepared"]

_MODULES = ("fairscale.optim.oss", "fairscale.nn.data_parallel.sharded_ddp")
_FP32_BYTES = 4


def _features(mods: dict[str, Any]) -> dict[str, bool]:
    sdp = mods["fairscale.nn.data_parallel.sharded_ddp"].ShardedDataParallel
    oss = mods["fairscale.optim.oss"].OSS
    return {
        "reduce_buffer_size": accepts(sdp.__init__, "reduce_buffer_size"),
        "clip_grad_norm": hasattr(oss, "clip_grad_norm"),
        "consolidate_state_dict": hasattr(oss, "consolidate_state_dict"),
    }


def _bucket_elements(options: ShardingOptions) -> int:
    """ShardedDDP counts its buffer in elements (``min(reduce_buffer_size, model numel)``)."""
    if options.bucket_cap_mb is None:
        return 0
    return int(options.bucket_cap_mb * 2**20 / _FP32_BYTES)


class FairscaleSdp:
    name = "fairscale-sdp"
    serves = frozenset({Stage.SIMPLE, Stage.ZERO_DP_1})

    def probe(self) -> Probe:
        return probe_fairscale(self.name, _MODULES, _features)

    def plan(self, options: ShardingOptions, placement: Placement) -> Plan:
        probe = self.probe()
        if not probe:
            raise UnsupportedOptions(self.name, options, probe.reason)
        if options.stage not in self.serves:
            raise UnsupportedOptions(
                self.name, options, f"it does not serve {options.stage or 'plain DDP'}",
                "use fairscale-fsdp for zero_dp_2/zero_dp_3",
            )
        notes: list[str] = []
        if options.mixed_precision is Precision.FP16:
            notes.append("fp16: forward runs under torch.autocast(dtype=torch.float16); Prepared.scaler is a ShardedGradScaler")
        elif options.mixed_precision is Precision.BF16:
            notes.append("bf16: forward runs under torch.autocast(dtype=torch.bfloat16); no scaler needed")
        oss = f"OSS({GROUPS_TEXT}, optim=<their class>, group=process_group, **<its defaults>)"
        if options.stage is Stage.ZERO_DP_1:
            bucket = "" if options.bucket_cap_mb is None else f", bucket_cap_mb={options.bucket_cap_mb:g}"
            call = f"DistributedDataParallel(model{bucket}) + {oss}"
            return Plan(self.name, options, call, {"ddp": True}, tuple(notes), effective_stage=1)
        settings: dict[str, Any] = {"ddp": False}
        if probe.features.get("reduce_buffer_size"):
            settings["reduce_buffer_size"] = _bucket_elements(options)
            if settings["reduce_buffer_size"]:
                notes.append("buckets on: zero_grad goes through ShardedDataParallel.zero_grad (keeps grad views)")
            else:
                notes.append("reduce_buffer_size=0: bucket views break under torch>=2 zero_grad (fairscale #354)")
        elif options.bucket_cap_mb is not None:
            notes.append(f"fairscale {probe.versions.get('fairscale')} has no reduce buffer: bucket_cap_mb ignored")
        extra = "".join(f", {k}={v}" for k, v in settings.items() if k != "ddp")
        call = f"ShardedDataParallel(model, {oss}{extra})"
        # ShardedDDP reduces each gradient to the rank owning its OSS shard: ZeRO-2.
        return Plan(self.name, options, call, settings, tuple(notes), effective_stage=2)

    def wrap(
        self, model: torch.nn.Module, optimizer: OptimizerFactory, plan: Plan, placement: Placement
    ) -> Prepared:
        from fairscale.optim.oss import OSS

        model.to(placement.device)
        # Every release from 0.1.7 on takes parameter-group dicts like torch's optimizers and
        # builds each rank's optimizer from copies of the groups holding its shard.
        built = optimizer_groups(optimizer, [p for _, p in model.named_parameters()])
        oss = OSS(built.groups, optim=built.cls, group=placement.process_group, **built.defaults)
        buckets = bool(plan.settings.get("reduce_buffer_size"))
        wrapped: torch.nn.Module
        if plan.settings.get("ddp"):
            ddp_kwargs: dict[str, Any] = {
                "process_group": placement.process_group,
                "find_unused_parameters": find_unused(model, plan.settings.get(SETTING)),
            }
            if plan.options.bucket_cap_mb is not None:
                ddp_kwargs["bucket_cap_mb"] = plan.options.bucket_cap_mb
            if placement.cuda:
                ddp_kwargs["device_ids"] = [torch.device(placement.device)]
            wrapped = torch.nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
        else:
            from fairscale.nn.data_parallel.sharded_ddp import ShardedDataParallel

            sdp_kwargs = {k: plan.settings[k] for k in ("reduce_buffer_size",) if k in plan.settings}
            wrapped = ShardedDataParallel(model, oss, process_group=placement.process_group, **sdp_kwargs)
            if buckets:
                _zero_through_model(oss, wrapped)
        if plan.options.mixed_precision in (Precision.FP16, Precision.BF16):
            from ._torch_common import autocast_forward

            dtype = torch.float16 if plan.options.mixed_precision is Precision.FP16 else torch.bfloat16
            autocast_forward(wrapped, placement, dtype)
        return FairscaleSdpPrepared(
            model=wrapped, module=model, optimizer=oss, plan=plan, placement=placement,
            scaler=grad_scaler(plan.options, placement.process_group), zero_through_model=buckets,
        )


def _zero_through_model(oss: torch.optim.Optimizer, model: torch.nn.Module) -> None:
    """Make ``oss.zero_grad()`` zero ShardedDDP's bucket views in place instead of cutting them."""

    def zero_grad(set_to_none: bool = True) -> None:
        model.zero_grad(set_to_none=set_to_none)

    oss.zero_grad = zero_grad  # type: ignore[method-assign]


class FairscaleSdpPrepared(Prepared):
    """``Prepared`` over ShardedDDP (or DDP) + OSS: parameters are whole on every rank."""

    def __init__(self, *, zero_through_model: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._zero_through_model = zero_through_model

    @property
    def _names(self) -> list[str]:
        """OSS's global index order: the parameters group after group."""
        return [name for group in self.optimizer_group_names() for name in group]

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._zero_through_model:
            self.model.zero_grad(set_to_none=set_to_none)
        else:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        return self.model.no_sync()  # type: ignore[no-any-return, operator]

    def _clip_grad_norm(self, max_norm: float, norm_type: float) -> torch.Tensor:
        """The global norm, exactly as DDP computes it (see ``owner_clip_grad_norm_``).

        Not ``OSS.clip_grad_norm``: its sum of per-rank partial norms rounds differently.
        """
        oss: Any = self.optimizer
        to_rank = getattr(oss, "_param_to_rank", None) or oss.param_to_rank  # 0.1.x: no underscore
        params = list(self.module.parameters())
        owned = [to_rank.get(p, 0) == oss.rank for p in params]  # one the factory left out: rank 0
        return owner_clip_grad_norm_(params, owned, max_norm, norm_type, self.placement.process_group)

    def _full_state_dict(self, *, rank0_only: bool = True) -> dict[str, torch.Tensor]:
        if rank0_only and self.placement.rank != 0:
            return {}
        return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}

    def optimizer_state_dict(self, *, rank0_only: bool = True) -> dict[str, Any]:
        oss: Any = self.optimizer
        rank = dist.get_rank(self.placement.process_group)
        recipients = [0] if rank0_only else range(dist.get_world_size(self.placement.process_group))
        mine: dict[str, Any] = {}
        for recipient in recipients:
            # ``recipient_rank=-1`` is missing before 0.3.x; one pass per recipient works on all.
            oss.consolidate_state_dict(recipient_rank=recipient)  # a rank in OSS's group
            if recipient == rank:
                mine = named_optimizer_state(oss.state_dict(), self._names)
        return mine

    def _load_optimizer_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(indexed_optimizer_state(state, self._names))

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.module.load_state_dict(state)


BACKEND = FairscaleSdp()
