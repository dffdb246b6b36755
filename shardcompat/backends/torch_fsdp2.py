"""``torch-fsdp2``: per-parameter sharding with ``fully_shard`` (DTensor shards).

The import path is probed (``torch.distributed.fsdp`` from torch 2.6, before that
``torch.distributed._composable.fsdp``).  ``zero_dp_3``/``zero_dp_2`` are
``reshard_after_forward=True/False``; ``offload`` is ``CPUOffloadPolicy`` (which, unlike
FSDP1's, runs on CPU); ``auto_wrap`` applies ``fully_shard`` to each chosen submodule and
then the root, which stays gathered after forward only if the rule chose any (the plan names
both cases until ``wrap`` knows the model, then the one it took); hybrid passes a 2-D
``(replicate, shard)`` mesh.

Refused here so that ``resolve`` falls back to torch-fsdp1: ``no_shard`` (FSDP2 has no
such mode), ``limit_all_gathers=`` (FSDP2 bounds memory by design and has no knob) and
``backward_prefetch=post|none`` (FSDP2 always prefetches one unit ahead, the ``pre`` order).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ..options import Precision, Prefetch, ShardingOptions, Stage
from . import _dtensor_adafactor
from ._base import OptimizerFactory, Placement, Plan, Probe, UnsupportedOptions
from ._optim import check_optimizer
from ._torch_common import (
    TorchPrepared,
    call_text,
    compute_dtype,
    device_mesh,
    device_type,
    mesh_shape,
    mesh_text,
    move_to_device,
    sharded_grad_scaler,
    torch_probe,
)
from ._wrap_policy import describe_rule, modules_to_wrap, wrap_rule

__all__ = ["BACKEND", "FSDP2Prepared", "TorchFSDP2Backend", "fsdp2_api"]

_PATHS = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")


def fsdp2_api() -> tuple[str, Any] | None:
    """``(module path, module)`` where ``fully_shard`` and its policies live, or ``None``."""
    for path in _PATHS:
        try:
            module = importlib.import_module(path)
        except ImportError:
            continue
        if all(hasattr(module, n) for n in ("fully_shard", "MixedPrecisionPolicy", "CPUOffloadPolicy")):
            return path, module
    return None


class FSDP2Prepared(TorchPrepared):
    """``no_sync`` switches off FSDP2's reduce-scatter on every sharded module."""

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        return _gradient_sync_off(self.model)

    def _load_optimizer_state_dict(self, state: dict[str, Any]) -> None:
        if _dtensor_adafactor.serves(self.optimizer):
            _dtensor_adafactor.build_state(self.optimizer, every=True)  # placed, before torch's own init
        super()._load_optimizer_state_dict(state)

    def local_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Every parameter's shard and any unsharded buffer FSDP2 has allocated.

        With ``reshard_after_forward=False`` the modules hold the all-gathered parameters
        between forward and backward while the DTensor shards stay allocated: both are
        held.  Freed all-gather outputs have size 0 and count nothing.
        """
        fsdp_params = _fsdp_params(self.model)
        if fsdp_params is not None:
            for fsdp_param in fsdp_params:
                yield "param", fsdp_param._sharded_param_data
                for name in ("all_gather_outputs", "_unsharded_inner_tensors"):
                    for tensor in getattr(fsdp_param, name, ()):
                        yield "param", tensor
                post_forward = getattr(fsdp_param, "_sharded_post_forward_param_data", None)
                if isinstance(post_forward, torch.Tensor):
                    yield "param", post_forward
            for fsdp_param in fsdp_params:
                grads = [fsdp_param.sharded_param.grad, getattr(fsdp_param, "unsharded_accumulated_grad", None)]
                unsharded = getattr(fsdp_param, "_unsharded_param", None)
                if isinstance(unsharded, torch.Tensor):
                    grads.append(unsharded.grad)
                for grad in grads:
                    if isinstance(grad, torch.Tensor):
                        yield "grad", grad.to_local() if hasattr(grad, "to_local") else grad
        # Parameters FSDP2 does not manage, and the optimizer state (storages already seen
        # above are counted once).
        yield from super().local_tensors()


def _fsdp_params(model: nn.Module) -> list[Any] | None:
    """Every ``FSDPParam`` under ``model`` (FSDP2's private layout), or ``None`` if it changed."""
    found: list[Any] = []
    for module in model.modules():
        get_state = getattr(module, "_get_fsdp_state", None)
        if get_state is None:
            continue
        state = get_state()
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:
            group = getattr(state, "_fsdp_param_group", None)
            groups = [] if group is None else [group]
        for group in groups:
            for fsdp_param in getattr(group, "fsdp_params", None) or ():
                if not isinstance(getattr(fsdp_param, "_sharded_param_data", None), torch.Tensor):
                    return None
                found.append(fsdp_param)
    return found or None


def _set_gradient_sync(model: nn.Module, enabled: bool) -> None:
    # The root is always fully_shard-ed; its setter recurses into every sharded submodule by
    # an isinstance check (probing every module with getattr cost 100 µs per no_sync).
    model.set_requires_gradient_sync(enabled)  # type: ignore[operator]


@contextlib.contextmanager
def _gradient_sync_off(model: nn.Module) -> Iterator[None]:
    _set_gradient_sync(model, False)
    try:
        yield
    finally:
        _set_gradient_sync(model, True)


class TorchFSDP2Backend:
    name = "torch-fsdp2"
    serves: frozenset[Stage | None] = frozenset({Stage.ZERO_DP_2, Stage.ZERO_DP_3})

    def probe(self) -> Probe:
        found = fsdp2_api()
        if found is None:
            return torch_probe(self.name, {}, f"fully_shard is in none of {', '.join(_PATHS)} (torch < 2.4)")
        path, module = found
        features = {
            "forward_prefetch": hasattr(module.FSDPModule, "set_modules_to_forward_prefetch"),
            "gradient_sync": hasattr(module.FSDPModule, "set_requires_gradient_sync"),
            f"import:{path}": True,
        }
        missing = "" if features["gradient_sync"] else "FSDPModule has no set_requires_gradient_sync"
        return torch_probe(self.name, features, missing)

    def _refuse(self, options: ShardingOptions, reason: str) -> UnsupportedOptions:
        return UnsupportedOptions(self.name, options, reason, "torch-fsdp1 serves it (backend=torch-fsdp1)")

    def plan(self, options: ShardingOptions, placement: Placement) -> Plan:
        if options.stage not in self.serves:
            raise self._refuse(options, f"FSDP2 has no {options.stage} mode")
        if options.limit_all_gathers is not None:
            raise self._refuse(options, "FSDP2 has no limit_all_gathers= (it bounds memory by design)")
        if options.backward_prefetch not in (None, Prefetch.PRE):
            raise self._refuse(
                options, f"FSDP2 always prefetches in the 'pre' order, backward_prefetch={options.backward_prefetch} is not available"
            )
        if options.forward_prefetch and not self.probe().features.get("forward_prefetch"):
            raise self._refuse(options, "this FSDP2 has no set_modules_to_forward_prefetch")
        shape = mesh_shape(self.name, options, placement)
        call, root_notes = _calls_text(options, placement, shape, describe_rule(options), None)
        notes = list(root_notes)
        if options.forward_prefetch:
            call += "; unit[i].set_modules_to_forward_prefetch([unit[i + 1]])"
        if options.mixed_precision is Precision.FP16:
            call += f"; ShardedGradScaler(device={device_type(placement)!r})"
        if options.bucket_cap_mb is not None:
            notes.append("bucket_cap_mb= is ignored: FSDP2 reduce-scatters each unit's gradients at once")
        settings = {"mesh": shape, "scaler": options.mixed_precision is Precision.FP16}
        return Plan(self.name, options, call, settings, tuple(notes), effective_stage=options.zero_stage)

    def wrap(
        self, model: nn.Module, optimizer: OptimizerFactory, plan: Plan, placement: Placement
    ) -> FSDP2Prepared:
        found = fsdp2_api()
        assert found is not None, "wrap() called without a successful probe()"
        api = found[1]
        options, settings = plan.options, plan.settings
        kwargs = {k: make() for k, (_, make) in _fully_shard_args(options, placement, settings["mesh"]).items()}
        model = move_to_device(model, placement)
        rule = wrap_rule(model, options) if options.auto_wrap else None
        units = modules_to_wrap(model, rule) if rule is not None else []
        for unit in units:
            api.fully_shard(unit, **kwargs)
        api.fully_shard(model, **{**kwargs, "reshard_after_forward": _root_reshards(options, len(units))})
        if rule is not None:  # the model is known now: the plan says what was done, not what may be
            guessed, guessed_notes = _calls_text(options, placement, settings["mesh"], describe_rule(options), None)
            done, notes = _calls_text(options, placement, settings["mesh"], rule.describe(), len(units))
            kept = tuple(n for n in plan.notes if n not in guessed_notes)
            plan = replace(plan, call=plan.call.replace(guessed, done, 1), notes=notes + kept)
        if options.forward_prefetch:
            for unit, after in zip(units, units[1:]):
                unit.set_modules_to_forward_prefetch([after])  # type: ignore[operator]
        scaler = sharded_grad_scaler(settings["scaler"], placement)
        optim = optimizer(model.parameters())
        check_optimizer(self.name, options, optim)  # before the first step
        if _dtensor_adafactor.serves(optim):
            _dtensor_adafactor.install(optim)
        return FSDP2Prepared(
            model=model, module=model, optimizer=optim,
            plan=plan, placement=placement, scaler=scaler,
        )


_Arg = tuple[str, Callable[[], Any]]  # (text in the plan, builds the value)

_ROOT_NOTES = ("the root unit keeps its parameters from forward to backward, as torch's default does: "
               "backward needs them at once, so resharding would cost an all-gather per step",)


def _root_reshards(options: ShardingOptions, units: int) -> bool:
    """``reshard_after_forward`` of the root's ``fully_shard``: torch's default for a root
    (keep it gathered after forward, since backward all-gathers it again at once) when
    submodules are units of their own; without units the root is the whole model, and
    zero_dp_3 must reshard it."""
    return options.stage is Stage.ZERO_DP_3 and units == 0


def _calls_text(options: ShardingOptions, placement: Placement, shape: tuple[int, ...], rule: str,
                units: int | None) -> tuple[str, tuple[str, ...]]:
    """The ``fully_shard`` calls ``wrap`` makes, as plan text, and their notes.

    ``units`` is how many submodules the ``auto_wrap`` rule chose; ``None`` before the model
    is known (``explain``), where the root's call depends on it and both are shown.
    """
    texts = {k: t for k, (t, _) in _fully_shard_args(options, placement, shape).items()}

    def root(units: int) -> str:
        return call_text("fully_shard", "module", **{**texts, "reshard_after_forward": repr(_root_reshards(options, units))})

    call = call_text("fully_shard", "module", **texts)
    if not options.auto_wrap:
        return call, ()
    if units == 0:
        return f"no submodule matches {rule}, so the root only: {root(0)}", ()
    notes = _ROOT_NOTES if root(1) != root(0) else ()
    if units is None:
        whole = "" if root(1) == root(0) else (
            f", or with reshard_after_forward={_root_reshards(options, 0)!r} if the rule wraps no submodule "
            "(the root is then the whole model)")
        return f"for each submodule by {rule}: {call}; then the root: {root(1)}{whole}", notes
    return f"for each of the {units} submodule(s) by {rule}: {call}; then the root: {root(units)}", notes


def _fully_shard_args(options: ShardingOptions, placement: Placement, shape: tuple[int, ...]) -> dict[str, _Arg]:
    """Every keyword of the ``fully_shard`` call, as its plan text and the code that builds
    it: one table, so ``explain`` cannot drift from what ``wrap`` does."""

    def api() -> Any:
        found = fsdp2_api()
        assert found is not None, "wrap() called without a successful probe()"
        return found[1]

    reshard = options.stage is Stage.ZERO_DP_3
    args: dict[str, _Arg] = {
        "mesh": (mesh_text(shape, placement), lambda: device_mesh(shape, placement)),
        "reshard_after_forward": (repr(reshard), lambda: reshard),
    }
    dtype = compute_dtype(options)
    if dtype is not None:
        args["mp_policy"] = (
            f"MixedPrecisionPolicy(param_dtype={dtype}, reduce_dtype={dtype})",
            lambda: api().MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype),
        )
    if options.offload:
        pin = placement.cuda
        args["offload_policy"] = (f"CPUOffloadPolicy(pin_memory={pin})", lambda: api().CPUOffloadPolicy(pin_memory=pin))
    return args


BACKEND = TorchFSDP2Backend()
