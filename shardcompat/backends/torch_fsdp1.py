"""``torch-fsdp1``: ``torch.distributed.fsdp.FullyShardedDataParallel`` (the flat-parameter FSDP).

Serves ``zero_dp_2``/``zero_dp_3``/``no_shard``, hybrid (with an explicit 2-D device mesh,
which CPU runs need), mixed precision, the prefetch and rate-limit knobs, and auto-wrap.
``use_orig_params=True`` always, so ``named_parameters()`` and the optimizer see the
original names.  ``offload`` (``CPUOffload(offload_params=True)``) needs an accelerator;
on CPU the plan refuses it and points to torch-fsdp2, whose offload works there.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ..options import Precision, Prefetch, ShardingOptions, Stage
from ._base import OptimizerFactory, Placement, Plan, Probe, UnsupportedOptions
from ._torch_common import (
    TorchPrepared,
    call_text,
    compute_dtype,
    device_mesh,
    device_type,
    mesh_shape,
    mesh_text,
    torch_probe,
)
from ._wrap_policy import DEFAULT_MIN_NUM_PARAMS, describe_rule, wrap_rule

__all__ = ["BACKEND", "FSDP1Prepared", "TorchFSDP1Backend"]

_STRATEGY = {
    (Stage.ZERO_DP_3, False): "FULL_SHARD",
    (Stage.ZERO_DP_2, False): "SHARD_GRAD_OP",
    (Stage.NO_SHARD, False): "NO_SHARD",
    (Stage.ZERO_DP_3, True): "HYBRID_SHARD",
    (Stage.ZERO_DP_2, True): "_HYBRID_SHARD_ZERO2",
}
_PREFETCH = {Prefetch.PRE: "BACKWARD_PRE", Prefetch.POST: "BACKWARD_POST", Prefetch.NONE: None}


class FSDP1Prepared(TorchPrepared):
    """FSDP1 clips with its own collective norm, and exposes the flat shards it really holds."""

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        norm: torch.Tensor = self.model.clip_grad_norm_(max_norm, norm_type)  # type: ignore[operator]
        return norm

    def local_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        from torch.distributed.fsdp import FullyShardedDataParallel

        flat = [getattr(m, "_flat_param", None) for m in FullyShardedDataParallel.fsdp_modules(self.model)]
        if not all(isinstance(p, torch.Tensor) for p in flat if p is not None):
            yield from super().local_tensors()  # private layout changed: count the views
            return
        for param in flat:
            if param is not None:
                yield "param", param
                if param.grad is not None:
                    yield "grad", param.grad
        for kind, tensor in super().local_tensors():
            if kind == "optim":
                yield kind, tensor


class TorchFSDP1Backend:
    name = "torch-fsdp1"
    serves: frozenset[Stage | None] = frozenset({Stage.ZERO_DP_2, Stage.ZERO_DP_3, Stage.NO_SHARD})

    def probe(self) -> Probe:
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        except ImportError as error:
            return torch_probe(self.name, {}, f"torch.distributed.fsdp: {error}")
        params = inspect.signature(FullyShardedDataParallel.__init__).parameters
        features = {
            "device_mesh": "device_mesh" in params,
            "use_orig_params": "use_orig_params" in params,
            "limit_all_gathers": "limit_all_gathers" in params,
            "hybrid_shard": hasattr(ShardingStrategy, "HYBRID_SHARD"),
            "hybrid_shard_zero2": hasattr(ShardingStrategy, "_HYBRID_SHARD_ZERO2"),
        }
        missing = "" if features["use_orig_params"] else "FSDP has no use_orig_params (torch < 2.0)"
        return torch_probe(self.name, features, missing)

    def plan(self, options: ShardingOptions, placement: Placement) -> Plan:
        assert options.stage is not None
        strategy = _STRATEGY[(options.stage, options.hybrid)]
        features = self.probe().features
        if options.hybrid and not (features.get("device_mesh") and features.get(strategy.lower().lstrip("_"))):
            raise UnsupportedOptions(
                self.name, options, f"this torch has no ShardingStrategy.{strategy} with device_mesh=",
                "use backend=torch-fsdp2 or upgrade torch",
            )
        if options.offload and not placement.cuda:
            raise UnsupportedOptions(
                self.name, options,
                "FSDP1 CPUOffload(offload_params=True) needs an accelerator (it computes on the "
                "device and keeps the shards on CPU)",
                "use backend=torch-fsdp2 (CPUOffloadPolicy works on CPU) or run on CUDA",
            )
        notes: list[str] = []
        text: dict[str, str] = {"sharding_strategy": f"ShardingStrategy.{strategy}"}
        if options.offload:
            text["cpu_offload"] = "CPUOffload(offload_params=True)"
        if options.auto_wrap:
            text["auto_wrap_policy"] = _policy_text(options)
            if not options.wrap and options.min_num_params is None:
                notes.append(
                    f"auto_wrap uses the model's _no_split_modules, else min_num_params="
                    f"{DEFAULT_MIN_NUM_PARAMS} (torch's default); set wrap= or min_num_params= to choose"
                )
        dtype = compute_dtype(options)
        if dtype is not None:
            text["mixed_precision"] = f"MixedPrecision(param_dtype={dtype}, reduce_dtype={dtype}, buffer_dtype={dtype})"
        if options.backward_prefetch is not None:
            value = _PREFETCH[options.backward_prefetch]
            text["backward_prefetch"] = f"BackwardPrefetch.{value}" if value else "None"
        for knob in ("forward_prefetch", "limit_all_gathers"):
            if getattr(options, knob) is not None:
                text[knob] = repr(getattr(options, knob))
        text["device_id"] = f"torch.device({placement.device!r})"
        text["use_orig_params"] = "True"
        shape = mesh_shape(self.name, options, placement)
        if options.hybrid:
            text["device_mesh"] = mesh_text(shape, placement)
        elif placement.process_group is not None:
            text["process_group"] = "process_group"
        if options.bucket_cap_mb is not None:
            notes.append("bucket_cap_mb= is ignored: FSDP1 reduces each unit's gradients in one collective")
        call = call_text("FullyShardedDataParallel", "module", **text)
        if options.mixed_precision is Precision.FP16:
            call += f"; ShardedGradScaler(device={device_type(placement)!r})"
        settings = {
            "strategy": strategy,
            "mesh": shape if options.hybrid else None,
            "dtype": dtype,
            "scaler": options.mixed_precision is Precision.FP16,
        }
        return Plan(self.name, options, call, settings, tuple(notes))

    def wrap(
        self, model: nn.Module, optimizer: OptimizerFactory, plan: Plan, placement: Placement
    ) -> FSDP1Prepared:
        from torch.distributed.fsdp import FullyShardedDataParallel

        wrapped = FullyShardedDataParallel(model, **_fsdp_kwargs(model, plan, placement))
        scaler = None
        if plan.settings["scaler"]:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            scaler = ShardedGradScaler(device=device_type(placement), process_group=placement.process_group)
        return FSDP1Prepared(
            model=wrapped, module=model, optimizer=optimizer(wrapped.parameters()),
            plan=plan, placement=placement, scaler=scaler,
        )


def _fsdp_kwargs(model: nn.Module, plan: Plan, placement: Placement) -> dict[str, Any]:
    """The real keyword arguments behind the plan's call text."""
    from torch.distributed import fsdp

    options, settings = plan.options, plan.settings
    kwargs: dict[str, Any] = {
        "sharding_strategy": getattr(fsdp.ShardingStrategy, settings["strategy"]),
        "device_id": torch.device(placement.device),
        "use_orig_params": True,
    }
    if settings["mesh"] is not None:
        kwargs["device_mesh"] = device_mesh(settings["mesh"], placement)
    elif placement.process_group is not None:
        kwargs["process_group"] = placement.process_group
    if options.offload:
        kwargs["cpu_offload"] = fsdp.CPUOffload(offload_params=True)
    if options.auto_wrap:
        kwargs["auto_wrap_policy"] = _policy(model, options)
    if settings["dtype"] is not None:
        dtype = settings["dtype"]
        kwargs["mixed_precision"] = fsdp.MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype)
    if options.backward_prefetch is not None:
        value = _PREFETCH[options.backward_prefetch]
        kwargs["backward_prefetch"] = getattr(fsdp.BackwardPrefetch, value) if value else None
    for knob in ("forward_prefetch", "limit_all_gathers"):
        if getattr(options, knob) is not None:
            kwargs[knob] = getattr(options, knob)
    return kwargs


def _policy_text(options: ShardingOptions) -> str:
    if options.wrap:
        return "ModuleWrapPolicy({" + ", ".join(options.wrap) + "})"
    if options.min_num_params is not None:
        return f"functools.partial(size_based_auto_wrap_policy, min_num_params={options.min_num_params})"
    return f"ModuleWrapPolicy(<{describe_rule(options)}>)"


def _policy(model: nn.Module, options: ShardingOptions) -> Any:
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy

    rule = wrap_rule(model, options)
    if rule.min_num_params is not None:
        return functools.partial(size_based_auto_wrap_policy, min_num_params=rule.min_num_params)
    return ModuleWrapPolicy(rule.classes)


BACKEND = TorchFSDP1Backend()
