"""``fairscale-fsdp``: fairscale ``FullyShardedDataParallel`` (0.3+) for zero_dp_2/3, offload, auto_wrap.

Release differences are probed from the constructor's signature: offload is
``move_params_to_cpu`` (0.3.7+) or ``cpu_offload``; ``compute_device`` exists from 0.3.7;
``fairscale.nn.wrap`` from 0.3.1.  fairscale FSDP needs CUDA as shipped; on CPU every call
into it goes through :func:`~shardcompat.backends._fairscale_cpu.cpu_compat`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

import torch

from ..options import Precision, ShardingOptions, Stage
from ..prepared import Prepared
from . import _fairscale_cpu
from ._base import OptimizerFactory, Placement, Plan, Probe, UnsupportedOptions
from ._fairscale_common import accepts, grad_scaler, probe_fairscale, shard_clip_grad_norm_
from ._wrap_policy import describe_rule, modules_to_wrap, wrap_rule

__all__ = ["BACKEND", "FairscaleFsdp", "FairscaleFsdpPrepared"]

_FSDP = _fairscale_cpu.FSDP_MODULE
_MODULES = (_FSDP,)
_NOT_HERE = ("backward_prefetch", "forward_prefetch", "limit_all_gathers")
T = TypeVar("T")


def _features(mods: dict[str, Any]) -> dict[str, bool]:
    init = mods[_FSDP].FullyShardedDataParallel.__init__
    try:
        import fairscale.nn.wrap  # noqa: F401

        wrap = True
    except ImportError:
        wrap = False
    return {
        "move_params_to_cpu": accepts(init, "move_params_to_cpu"),
        "cpu_offload": accepts(init, "cpu_offload"),
        "compute_device": accepts(init, "compute_device"),
        "compute_dtype": accepts(init, "compute_dtype"),
        "bucket_cap_mb": accepts(init, "bucket_cap_mb"),
        "auto_wrap": wrap,
        "cpu_compat": _fairscale_cpu.supported(mods[_FSDP]),
    }


class FairscaleFsdp:
    name = "fairscale-fsdp"
    serves = frozenset({Stage.ZERO_DP_2, Stage.ZERO_DP_3})

    def probe(self) -> Probe:
        return probe_fairscale(self.name, _MODULES, _features)

    def plan(self, options: ShardingOptions, placement: Placement) -> Plan:
        probe = self.probe()
        if not probe:
            raise UnsupportedOptions(self.name, options, probe.reason)
        have = probe.features
        version = probe.versions.get("fairscale")
        if options.stage not in self.serves:
            raise UnsupportedOptions(self.name, options, f"it does not serve {options.stage or 'plain DDP'}",
                                     "use fairscale-sdp for simple/zero_dp_1, torch-fsdp1 for no_shard")
        if options.hybrid:
            raise UnsupportedOptions(self.name, options, "fairscale FSDP has no hybrid sharding",
                                     "use torch-fsdp1 or torch-fsdp2")
        given = [k for k in _NOT_HERE if getattr(options, k) is not None]
        if given:
            raise UnsupportedOptions(self.name, options, f"fairscale FSDP has no {', '.join(given)}",
                                     "drop them or use torch-fsdp1")
        if not placement.cuda and not have["cpu_compat"]:
            raise UnsupportedOptions(self.name, options, f"fairscale {version} FSDP needs CUDA",
                                     "run on a GPU, or use torch-fsdp1/torch-fsdp2 on CPU")
        kwargs: dict[str, Any] = {"reshard_after_forward": options.stage is Stage.ZERO_DP_3}
        notes: list[str] = []
        if options.offload:
            kwargs["move_params_to_cpu" if have["move_params_to_cpu"] else "cpu_offload"] = True
            notes.append("fairscale < 0.4 refuses offload without mixed_precision=fp16")
        if options.mixed_precision in (Precision.FP16, Precision.BF16):
            kwargs["mixed_precision"] = True
            if options.mixed_precision is Precision.BF16:
                if not have["compute_dtype"]:
                    raise UnsupportedOptions(self.name, options, f"fairscale {version} has no compute_dtype",
                                             "use mixed_precision=fp16 or a newer fairscale")
                kwargs["compute_dtype"] = "torch.bfloat16"
        if options.bucket_cap_mb is not None and have["bucket_cap_mb"]:
            kwargs["bucket_cap_mb"] = max(1, round(options.bucket_cap_mb))  # fairscale takes whole MB
        if have["compute_device"]:
            kwargs["compute_device"] = f"torch.device({placement.device!r})"
        if options.auto_wrap:
            if not have["auto_wrap"]:
                raise UnsupportedOptions(self.name, options, f"fairscale {version} has no fairscale.nn.wrap",
                                         "upgrade to fairscale>=0.3.1")
            notes.append(f"auto_wrap: wrap {describe_rule(options)} via fairscale.nn.wrap.auto_wrap")
        if not placement.cuda:
            notes.append("CPU: runs through shardcompat's fairscale CPU compatibility layer (no-op streams)")
        call = "FullyShardedDataParallel(model, " + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
        return Plan(self.name, options, call, {"kwargs": kwargs}, tuple(notes), effective_stage=options.zero_stage)

    def wrap(
        self, model: torch.nn.Module, optimizer: OptimizerFactory, plan: Plan, placement: Placement
    ) -> Prepared:
        import importlib

        module = importlib.import_module(_FSDP)
        kwargs = dict(plan.settings["kwargs"])
        if "compute_dtype" in kwargs:
            kwargs["compute_dtype"] = torch.bfloat16
        if "compute_device" in kwargs:
            kwargs["compute_device"] = torch.device(placement.device)
        kwargs["process_group"] = placement.process_group
        compat = _compat(module, placement)
        model.to(placement.device)
        with compat():
            try:
                wrapped = _build(module.FullyShardedDataParallel, model, plan.options, kwargs)
            except ValueError as error:
                raise UnsupportedOptions(self.name, plan.options, str(error)) from error
        return FairscaleFsdpPrepared(
            model=wrapped, module=model, optimizer=optimizer(wrapped.parameters()), plan=plan,
            placement=placement, scaler=grad_scaler(plan.options, placement.process_group), compat=compat,
        )


def _compat(module: ModuleType, placement: Placement) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    if placement.cuda:
        return contextlib.nullcontext
    return functools.partial(_fairscale_cpu.cpu_compat, module)


def _build(fsdp: Any, model: torch.nn.Module, options: ShardingOptions, kwargs: dict[str, Any]) -> Any:
    if not options.auto_wrap:
        return fsdp(model, **kwargs)
    from fairscale.nn.wrap import auto_wrap, enable_wrap

    chosen = {id(m) for m in modules_to_wrap(model, wrap_rule(model, options))}

    def policy(module: torch.nn.Module, recurse: bool, *args: Any, **more: Any) -> bool:
        return True if recurse else id(module) in chosen

    with enable_wrap(wrapper_cls=fsdp, **kwargs):
        inner = auto_wrap(model, auto_wrap_policy=policy)
    return fsdp(inner, **kwargs)


class FairscaleFsdpPrepared(Prepared):
    """``Prepared`` over fairscale FSDP; on CPU each call enters the compatibility layer."""

    def __init__(self, *, compat: Callable[[], contextlib.AbstractContextManager[Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._compat = compat

    def _in(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with self._compat():
            return fn(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._in(self.model, *args, **kwargs)

    def backward(self, loss: torch.Tensor) -> None:
        self._in(super().backward, loss)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        # FSDP.no_sync() runs its lazy init (stream creation): the whole block is FSDP calls.
        with self._compat(), self.model.no_sync():  # type: ignore[operator]
            yield

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        # Not FSDP.clip_grad_norm_: it moves the norm to CUDA.  Gradients are disjoint shards.
        return shard_clip_grad_norm_(self.model.parameters(), max_norm, norm_type, self.placement.process_group)

    def full_state_dict(self, *, rank0_only: bool = True) -> dict[str, torch.Tensor]:
        state = self._in(self.model.state_dict)
        if rank0_only and self.placement.rank != 0:
            return {}
        return {k: v.detach().cpu().clone() for k, v in state.items()}

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self._in(self.model.load_state_dict, state)

    def optimizer_state_dict(self, *, rank0_only: bool = True) -> dict[str, Any]:
        raise NotImplementedError(
            "fairscale-fsdp: name-keyed optimizer consolidation is not implemented yet; "
            "use model.gather_full_optim_state_dict(optimizer) for fairscale's own format"
        )

    def load_optimizer_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError("fairscale-fsdp: loading a name-keyed optimizer state is not implemented yet")


BACKEND = FairscaleFsdp()
