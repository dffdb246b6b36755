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
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..options import Precision, Prefetch, ShardingOptions, Stage
from ._base import OptimizerFactory, Placement, Plan, Probe, UnsupportedOptions
from ._optim import check_groups, check_same_groups
from ._torch_common import (
    TorchPrepared,
    call_text,
    compute_dtype,
    device_mesh,
    device_type,
    mesh_shape,
    mesh_text,
    sharded_grad_scaler,
    torch_probe,
)
from ._wrap_policy import DEFAULT_MIN_NUM_PARAMS, describe_rule, modules_to_wrap, wrap_rule

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

    def _clip_grad_norm(self, max_norm: float, norm_type: float) -> torch.Tensor:
        norm: torch.Tensor = self.model.clip_grad_norm_(max_norm, norm_type)  # type: ignore[operator]
        return norm

    def local_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Each unit's flat shard and every full or low-precision buffer FSDP has allocated.

        ``SHARD_GRAD_OP`` (and the root unit under ``FULL_SHARD``) keeps the all-gathered
        ``_full_param_padded`` between forward and backward while ``flat_param`` points back
        at the shard: both are held.  Freed buffers have size 0 and count nothing.
        """
        from torch.distributed.fsdp import FullyShardedDataParallel

        flat = [getattr(m, "_flat_param", None) for m in FullyShardedDataParallel.fsdp_modules(self.model)]
        if not all(isinstance(p, torch.Tensor) for p in flat if p is not None):
            yield from super().local_tensors()  # private layout changed: count the views
            return
        for param in flat:
            if param is not None:
                yield "param", param
                for name in _FLAT_PARAM_BUFFERS:
                    buffer = getattr(param, name, None)
                    if isinstance(buffer, torch.Tensor):
                        yield "param", buffer
        for param in flat:
            if param is not None:
                for grad in (param.grad, *(getattr(param, n, None) for n in _FLAT_GRAD_BUFFERS)):
                    if isinstance(grad, torch.Tensor):
                        yield "grad", grad
        for kind, tensor in super().local_tensors():
            if kind == "optim":
                yield kind, tensor


# FlatParameter's private buffers (torch/distributed/fsdp/_flat_param.py), each allocated or
# resized to 0 as the unit shards and unshards.
_FLAT_PARAM_BUFFERS = ("_local_shard", "_full_param_padded", "_full_prec_full_param_padded", "_mp_shard")
_FLAT_GRAD_BUFFERS = ("_saved_grad_shard", "_cpu_grad")


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
        if options.auto_wrap and not options.wrap and options.min_num_params is None:
            notes.append(
                f"auto_wrap uses the model's _no_split_modules, else min_num_params="
                f"{DEFAULT_MIN_NUM_PARAMS} (torch's default); set wrap= or min_num_params= to choose"
            )
        if options.stage is Stage.ZERO_DP_3 and not options.auto_wrap:
            notes.append(
                "without auto_wrap the whole model is FSDP1's root unit, whose full parameters "
                "stay gathered from forward until backward (FSDP1 never reshards the root after "
                "forward); add auto_wrap to gather one block at a time"
            )
        shape = mesh_shape(self.name, options, placement)
        args = _fsdp_args(options, placement, strategy, shape)
        if options.bucket_cap_mb is not None:
            notes.append("bucket_cap_mb= is ignored: FSDP1 reduces each unit's gradients in one collective")
        call = call_text("FullyShardedDataParallel", "module", **{k: t for k, (t, _) in args.items()})
        if options.mixed_precision is Precision.FP16:
            call += f"; ShardedGradScaler(device={device_type(placement)!r})"
        settings = {"strategy": strategy, "mesh": shape, "scaler": options.mixed_precision is Precision.FP16}
        return Plan(self.name, options, call, settings, tuple(notes), effective_stage=options.zero_stage)

    def wrap(
        self, model: nn.Module, optimizer: OptimizerFactory, plan: Plan, placement: Placement
    ) -> FSDP1Prepared:
        from torch.distributed.fsdp import FullyShardedDataParallel

        settings = plan.settings
        groups = check_groups(self.name, plan.options, model, optimizer)  # before FSDP1 flattens them
        args = _fsdp_args(plan.options, placement, settings["strategy"], settings["mesh"])
        wrapped = FullyShardedDataParallel(model, **{k: make(model) for k, (_, make) in args.items()})
        scaler = sharded_grad_scaler(settings["scaler"], placement)
        optim = optimizer(wrapped.parameters())
        check_same_groups(self.name, plan.options, groups, optim)
        return FSDP1Prepared(
            model=wrapped, module=model, optimizer=optim,
            plan=plan, placement=placement, scaler=scaler,
        )


_Arg = tuple[str, Callable[[nn.Module], Any]]  # (text in the plan, builds the value for a model)


def _const(text: str, value: Callable[[], Any]) -> _Arg:
    return text, lambda _model: value()


def _returns(value: Any) -> Callable[[nn.Module], Any]:
    return lambda _model: value


def _fsdp_args(
    options: ShardingOptions, placement: Placement, strategy: str, shape: tuple[int, ...]
) -> dict[str, _Arg]:
    """Every keyword of the FSDP call, as its plan text and the code that builds it: one
    table, so ``explain`` cannot drift from what ``wrap`` does."""
    from torch.distributed import fsdp

    args: dict[str, _Arg] = {
        "sharding_strategy": _const(f"ShardingStrategy.{strategy}", lambda: getattr(fsdp.ShardingStrategy, strategy)),
    }
    if options.offload:
        args["cpu_offload"] = _const("CPUOffload(offload_params=True)", lambda: fsdp.CPUOffload(offload_params=True))
    if options.auto_wrap:
        args["auto_wrap_policy"] = (_policy_text(options), lambda model: _policy(model, options))
    dtype = compute_dtype(options)
    if dtype is not None:
        args["mixed_precision"] = _const(
            f"MixedPrecision(param_dtype={dtype}, reduce_dtype={dtype}, buffer_dtype={dtype})",
            lambda: fsdp.MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype),
        )
    if options.backward_prefetch is not None:
        prefetch = _PREFETCH[options.backward_prefetch]
        args["backward_prefetch"] = _const(
            f"BackwardPrefetch.{prefetch}" if prefetch else "None",
            lambda: getattr(fsdp.BackwardPrefetch, prefetch) if prefetch else None,
        )
    for knob in ("forward_prefetch", "limit_all_gathers"):
        value = getattr(options, knob)
        if value is not None:
            args[knob] = (repr(value), _returns(value))
    args["device_id"] = _const(f"torch.device({placement.device!r})", lambda: torch.device(placement.device))
    args["use_orig_params"] = _const("True", lambda: True)
    if options.hybrid:
        args["device_mesh"] = _const(mesh_text(shape, placement), lambda: device_mesh(shape, placement))
    elif placement.process_group is not None:
        args["process_group"] = _const("process_group", lambda: placement.process_group)
    return args


def _policy_text(options: ShardingOptions) -> str:
    if options.wrap:
        return "ModuleWrapPolicy({" + ", ".join(options.wrap) + "})"
    if options.min_num_params is not None:
        return f"functools.partial(size_based_auto_wrap_policy, min_num_params={options.min_num_params})"
    return f"ModuleWrapPolicy(<{describe_rule(options)}>)"


def _policy(model: nn.Module, options: ShardingOptions) -> Any:
    """The units :func:`modules_to_wrap` chooses (the size rule follows torch's own
    ``size_based_auto_wrap_policy``), so tied parameters stay in one unit as on every backend."""
    from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

    chosen = {id(m) for m in modules_to_wrap(model, wrap_rule(model, options))}
    return functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda module: id(module) in chosen)


BACKEND = TorchFSDP1Backend()
