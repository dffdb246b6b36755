"""``torch-zero``: ``DistributedDataParallel``, with ``ZeroRedundancyOptimizer`` for ZeRO-1.

Serves plain DDP (options off), ``zero_dp_1`` and ``simple``.  ``simple`` (fairscale's
ShardedDDP+OSS also shards gradients) is served as ZeRO-1: the trained numbers are the
same, only the gradient memory is not sharded, and the plan says so.

ZeRO-1 moves the ZeRO model's 2Ψ a step: a DDP communication hook reduce-scatters each
gradient bucket to the parameters' owners in ZeRO's partition (Ψ; :mod:`._zero_hook`) instead
of DDP's all-reduce (2Ψ), and ZeRO broadcasts each owner's updated parameters from one flat
bucket per rank (Ψ).  Only owners then hold their reduced gradients (the others' are zero), so
clipping all-reduces the norm and fp16's scaler agrees on infs across the ranks
(``ShardedGradScaler``).  Where the hook cannot run (gloo with CUDA tensors), DDP all-reduces
as before (3Ψ) and the plan says why.

Mixed precision: DDP has no public mixed-precision argument, so ``bf16``/``fp16`` run the
wrapper's forward under ``torch.autocast`` (parameters, gradients and the reductions stay
fp32); ``fp16`` adds a grad scaler.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..options import Precision, ShardingOptions, Stage
from ._base import OptimizerFactory, Placement, Plan, Probe
from ._optim import GROUPS_TEXT, optimizer_groups
from ._torch_common import (
    TorchPrepared,
    autocast_forward,
    call_text,
    compute_dtype,
    device_type,
    move_to_device,
    sharded_grad_scaler,
    torch_probe,
)
from ._unused import SETTING, find_unused
from ._zero_hook import Owners, clip_sharded_grad_norm_, hook_unavailable, reduce_scatter_to_owners

__all__ = ["BACKEND", "TorchZeroBackend", "ZeroPrepared"]


class ZeroPrepared(TorchPrepared):
    """DDP + ZeroRedundancyOptimizer: the optimizer state is gathered with ZeRO's own API
    (DCP does not know ZeRO) and keyed by parameter name instead of ZeRO's global index
    (which numbers the parameters group after group)."""

    def _clip_grad_norm(self, max_norm: float, norm_type: float) -> torch.Tensor:
        """With the owner hook each rank holds only its own reduced gradients: the norm is
        all-reduced; without it every rank holds them all (a plain clip)."""
        if not self.plan.settings.get("hook"):
            return super()._clip_grad_norm(max_norm, norm_type)
        return clip_sharded_grad_norm_(list(self.model.parameters()), max_norm, norm_type,
                                       self.placement.process_group)

    def _index_names(self) -> list[str]:
        return [name for group in self.optimizer_group_names() for name in group]

    def optimizer_state_dict(self, *, rank0_only: bool = True) -> dict[str, Any]:
        self.optimizer.consolidate_state_dict(to=0)  # type: ignore[attr-defined]
        state: dict[str, Any] = {}
        if dist.get_rank(self.placement.process_group) == 0:
            state = _by_name(self.optimizer.state_dict(), self._index_names())
        if not rank0_only:
            box = [state]
            dist.broadcast_object_list(box, src=0, group=self.placement.process_group)
            state = box[0]
        return state

    def _load_optimizer_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(_by_index(state, self._index_names()))


def _by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {names[i]: v for i, v in state["state"].items()}, "param_groups": groups}


def _by_index(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    index = {n: i for i, n in enumerate(names)}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]]
    # ZeRO's load_state_dict writes into the dict it is given: hand it fresh containers.
    values = {index[n]: dict(v) for n, v in state["state"].items()}
    return {"state": values, "param_groups": groups}


class TorchZeroBackend:
    name = "torch-zero"
    serves: frozenset[Stage | None] = frozenset({None, Stage.SIMPLE, Stage.ZERO_DP_1})

    def probe(self) -> Probe:
        try:
            from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401
        except ImportError as error:
            return torch_probe(self.name, {"zero": False}, f"ZeroRedundancyOptimizer: {error}")
        return torch_probe(self.name, {"zero": True})

    def plan(self, options: ShardingOptions, placement: Placement) -> Plan:
        zero = options.stage in (Stage.ZERO_DP_1, Stage.SIMPLE)
        ddp_kwargs = {}
        if placement.cuda:
            ddp_kwargs["device_ids"] = f"[{torch.device(placement.device).index or 0}]"
        if options.bucket_cap_mb is not None:
            ddp_kwargs["bucket_cap_mb"] = repr(options.bucket_cap_mb)
        calls = [call_text("DistributedDataParallel", "module", **ddp_kwargs)]
        dtype = compute_dtype(options)
        notes: list[str] = []
        if dtype is not None:
            calls.insert(0, f"forward under torch.autocast({device_type(placement)!r}, dtype={dtype})")
        unavailable = hook_unavailable(_pg_backend(placement), placement.cuda) if zero else ""
        hook = zero and not unavailable
        if zero:
            calls.append(
                f"ZeroRedundancyOptimizer({GROUPS_TEXT}, optimizer_class=<their class>, "
                "parameters_as_bucket_view=True, **<its defaults>)"
            )
        else:
            calls.append("optimizer(ddp.parameters())")
        if hook:
            calls.append("ddp.register_comm_hook(Owners(<the ZeroRedundancyOptimizer>), "
                         "reduce_scatter_to_owners)")
        if options.mixed_precision is Precision.FP16:
            scaler = "ShardedGradScaler" if hook else "torch.amp.GradScaler"
            calls.append(f"{scaler}({device_type(placement)!r})")
        if unavailable:
            notes.append(f"gradients are all-reduced in full, not reduce-scattered to their owners "
                         f"({unavailable}): 3Ψ a step instead of ZeRO-1's 2Ψ")
        if options.stage is Stage.SIMPLE:
            notes.append(
                "simple is served as ZeRO-1 (optimizer state sharded; gradients are reduced to their "
                "owners but kept full-size on every rank): same training, more gradient memory than "
                "fairscale's OSS"
            )
        settings = {
            "zero": zero,
            "hook": hook,
            "bucket_cap_mb": options.bucket_cap_mb,
            "autocast": dtype,
            "scaler": options.mixed_precision is Precision.FP16,
        }
        stage = 1 if options.stage is Stage.SIMPLE else options.zero_stage
        return Plan(self.name, options, "; ".join(calls), settings, tuple(notes), effective_stage=stage)

    def wrap(
        self, model: nn.Module, optimizer: OptimizerFactory, plan: Plan, placement: Placement
    ) -> TorchPrepared:
        from torch.nn.parallel import DistributedDataParallel

        settings = plan.settings
        kwargs: dict[str, Any] = {"process_group": placement.process_group}
        if placement.cuda:
            kwargs["device_ids"] = [torch.device(placement.device).index or 0]
        if settings["bucket_cap_mb"] is not None:
            kwargs["bucket_cap_mb"] = settings["bucket_cap_mb"]
        kwargs["find_unused_parameters"] = find_unused(model, settings.get(SETTING))
        ddp = DistributedDataParallel(move_to_device(model, placement), **kwargs)
        if settings["autocast"] is not None:
            autocast_forward(ddp, placement, settings["autocast"])
        if settings["zero"]:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            built = optimizer_groups(optimizer, list(ddp.parameters()))
            # parameters_as_bucket_view: each rank's parameters are views of one flat buffer,
            # so the step broadcasts one bucket per rank, not one tensor per parameter.
            optim: torch.optim.Optimizer = ZeroRedundancyOptimizer(
                built.groups, optimizer_class=built.cls, parameters_as_bucket_view=True,
                process_group=placement.process_group, **built.defaults,
            )
            if settings["hook"]:
                ddp.register_comm_hook(Owners(optim, placement.process_group), reduce_scatter_to_owners)
        else:
            optim = optimizer(ddp.parameters())
        if settings["hook"]:  # each rank checks its own gradients for infs: the flag is all-reduced
            scaler = sharded_grad_scaler(settings["scaler"], placement)
        else:
            scaler = torch.amp.GradScaler(device_type(placement)) if settings["scaler"] else None
        prepared_cls = ZeroPrepared if settings["zero"] else TorchPrepared
        return prepared_cls(
            model=ddp, module=model, optimizer=optim, plan=plan, placement=placement, scaler=scaler
        )


def _pg_backend(placement: Placement) -> str:
    """The process group's backend; before one exists (``explain``), what ``spawn`` and
    torchrun would start on this device."""
    if dist.is_available() and dist.is_initialized():
        return str(dist.get_backend(placement.process_group))
    return "nccl" if placement.cuda else "gloo"


BACKEND = TorchZeroBackend()
