"""``torch-zero``: ``DistributedDataParallel``, with ``ZeroRedundancyOptimizer`` for ZeRO-1.

Serves plain DDP (options off), ``zero_dp_1`` and ``simple``.  ``simple`` (fairscale's
ShardedDDP+OSS also shards gradients) is served as ZeRO-1: the trained numbers are the
same, only the gradient memory is not sharded, and the plan says so.

Mixed precision: DDP has no public mixed-precision argument, so ``bf16``/``fp16`` run the
wrapper's forward under ``torch.autocast`` (parameters, gradients and the all-reduce stay
fp32); ``fp16`` adds ``torch.amp.GradScaler``.  DDP all-reduces full gradients on every
rank, so clipping and the fp16 inf check are plain and already global.
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
    torch_probe,
)

__all__ = ["BACKEND", "TorchZeroBackend", "ZeroPrepared"]


class ZeroPrepared(TorchPrepared):
    """DDP + ZeroRedundancyOptimizer: the optimizer state is gathered with ZeRO's own API
    (DCP does not know ZeRO) and keyed by parameter name instead of ZeRO's global index
    (which numbers the parameters group after group)."""

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
        if options.mixed_precision is Precision.FP16:
            calls.append(f"torch.amp.GradScaler({device_type(placement)!r})")
        if zero:
            calls.append(
                f"ZeroRedundancyOptimizer({GROUPS_TEXT}, optimizer_class=<their class>, "
                "parameters_as_bucket_view=True, **<its defaults>)"
            )
        else:
            calls.append("optimizer(ddp.parameters())")
        if options.stage is Stage.SIMPLE:
            notes.append(
                "simple is served as ZeRO-1 (optimizer state sharded; gradients are all-reduced "
                "in full, not sharded): same training, more gradient memory than fairscale's OSS"
            )
        settings = {
            "zero": zero,
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
        else:
            optim = optimizer(ddp.parameters())
        scaler = torch.amp.GradScaler(device_type(placement)) if settings["scaler"] else None
        prepared_cls = ZeroPrepared if settings["zero"] else TorchPrepared
        return prepared_cls(
            model=ddp, module=model, optimizer=optim, plan=plan, placement=placement, scaler=scaler
        )


BACKEND = TorchZeroBackend()
