"""``FullyShardedDataParallel`` both ways: real fairscale (CUDA, or CPU through the layer), or torch's FSDP1.

torch FSDP1 is the closest native match: flat parameters, ``summon_full_params``,
``no_sync``, ``clip_grad_norm_`` and full state dicts by default.  The fairscale arguments are
translated by :func:`torch_kwargs` following the table in ``_arguments``; the rest of
fairscale's public FSDP API is bridged on :class:`NativeFullyShardedDataParallel`: methods
spelled differently (``summon_full_params(volatile=)``, ``gather_full_optim_state_dict``),
fairscale's sharded checkpoints (``local_state_dict``, ``local_metadata_dict``,
``consolidate_shard_weights``, in ``_fsdp_shards``), its attributes (``flatten_parameters``,
``mixed_precision``...) and its divide factors.  What torch FSDP cannot do raises, saying why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.distributed import fsdp
from torch.distributed.fsdp import _common_utils

from ..backends._fairscale_common import accepts, shard_clip_grad_norm_
from . import _fsdp_shards
from ._arguments import NATIVE, How, UnsupportedArgument, check

__all__ = ["NativeFullyShardedDataParallel", "TrainingState", "fairscale_fully_sharded_data_parallel", "torch_kwargs"]

TrainingState = _common_utils.TrainingState  # what ``training_state`` holds (IDLE, FORWARD_BACKWARD, ...)

_OFFLOAD_NAMES = ("move_params_to_cpu", "cpu_offload")


def torch_kwargs(fairscale_kwargs: dict[str, Any], cuda: bool) -> dict[str, Any]:
    """torch FSDP1 keyword arguments for fairscale FSDP ones (raises/warns per the table)."""
    kw = fairscale_kwargs
    offload = bool(kw["move_params_to_cpu"] or kw["cpu_offload"])
    on_cpu = (How.WARN, "this is a CPU run: parameters already live on CPU")
    override = {} if cuda else {name: on_cpu for name in _OFFLOAD_NAMES}
    if kw["state_dict_device"] is not None and torch.device(kw["state_dict_device"]).type != "cpu":
        override["state_dict_device"] = (How.WARN, "only state_dict_device='cpu' is supported")
    check("FullyShardedDataParallel", NATIVE, kw, override=override)
    out: dict[str, Any] = {
        "process_group": kw["process_group"],
        "sharding_strategy": fsdp.ShardingStrategy.FULL_SHARD if kw["reshard_after_forward"]
        else fsdp.ShardingStrategy.SHARD_GRAD_OP,
        "use_orig_params": not kw["flatten_parameters"],
        "device_id": kw["compute_device"] or (torch.device("cuda", torch.cuda.current_device()) if cuda
                                              else torch.device("cpu")),
    }
    if offload and cuda:
        out["cpu_offload"] = fsdp.CPUOffload(offload_params=True)
    compute = kw["compute_dtype"] or (torch.float16 if kw["mixed_precision"] else None)
    if compute is not None or kw["buffer_dtype"] is not None:
        reduce = torch.float32 if kw["fp32_reduce_scatter"] else compute
        out["mixed_precision"] = fsdp.MixedPrecision(
            param_dtype=compute, reduce_dtype=reduce, buffer_dtype=kw["buffer_dtype"] or compute
        )
    return out


def _check_same_flattening(module: nn.Module, flatten_parameters: bool) -> None:
    """torch FSDP1 refuses, at the first forward, nested units that differ in ``use_orig_params``."""
    for path, unit in module.named_modules():
        if isinstance(unit, fsdp.FullyShardedDataParallel) and unit._use_orig_params == flatten_parameters:
            raise UnsupportedArgument(
                f"FullyShardedDataParallel(flatten_parameters={flatten_parameters}) around a unit built with "
                f"flatten_parameters={not flatten_parameters} ({_common_utils.clean_tensor_name(path)}): torch "
                "FSDP needs the same setting for all nested units; pass the same flatten_parameters to every "
                "FullyShardedDataParallel (and to enable_wrap / wrapper_config)"
            )


class _MixedPrecision(fsdp.MixedPrecision):
    """torch's config that is also fairscale's flag: true when parameters compute in low precision."""

    def __bool__(self) -> bool:
        return self.param_dtype is not None


class _CPUOffload(fsdp.CPUOffload):
    """torch's config that is also fairscale's ``cpu_offload`` flag."""

    def __bool__(self) -> bool:
        return self.offload_params


def _as(cls: type[Any], config: Any) -> Any:
    return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)})


def _state_dict_settings(kwargs: dict[str, Any], cuda: bool) -> fsdp.FullStateDictConfig | None:
    rank0 = bool(kwargs["state_dict_on_rank_0_only"])
    # offload_to_cpu crashes on a CPU run (pytorch#188989) and would change nothing there.
    offload = cuda and kwargs["state_dict_device"] is not None and torch.device(kwargs["state_dict_device"]).type == "cpu"
    return fsdp.FullStateDictConfig(offload_to_cpu=offload, rank0_only=rank0) if rank0 or offload else None


class NativeFullyShardedDataParallel(fsdp.FullyShardedDataParallel):
    """``fairscale.nn.FullyShardedDataParallel(module, ...)`` on torch FSDP1."""

    def __init__(
        self,
        module: nn.Module,
        process_group: Any = None,
        process_group_reduce_scatter: Any = None,
        reshard_after_forward: bool = True,
        disable_reshard_on_root: bool = True,
        mixed_precision: bool = False,
        fp32_reduce_scatter: bool = False,
        flatten_parameters: bool = True,
        move_params_to_cpu: bool = False,
        compute_dtype: torch.dtype | None = None,
        buffer_dtype: torch.dtype | None = None,
        move_grads_to_cpu: bool | None = None,
        bucket_cap_mb: int = 25,
        compute_device: torch.device | None = None,
        no_broadcast_optim_state: bool | None = False,
        state_dict_device: torch.device | None = None,
        clear_autocast_cache: bool = False,
        force_input_to_fp32: bool = False,
        verbose: bool = False,
        cpu_offload: bool = False,
        state_dict_on_rank_0_only: bool = False,
        gradient_predivide_factor: float | None = None,
        allow_reset_parameters: bool = False,
    ) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "module", "__class__")}
        _check_same_flattening(module, flatten_parameters)
        cuda = torch.cuda.is_available()
        super().__init__(module, **torch_kwargs(given, cuda))
        settings = _state_dict_settings(given, cuda)
        if settings is not None:
            fsdp.FullyShardedDataParallel.set_state_dict_type(self, fsdp.StateDictType.FULL_STATE_DICT, settings)
        # fairscale's attributes, with its derived defaults; torch's configs answer its flags.
        self.mixed_precision = _as(_MixedPrecision, self.mixed_precision)  # type: ignore[has-type]
        self.cpu_offload = _as(_CPUOffload, self.cpu_offload)  # type: ignore[has-type]
        self.flatten_parameters = flatten_parameters
        self.reshard_after_forward = reshard_after_forward
        self.disable_reshard_on_root = disable_reshard_on_root
        self.fp32_reduce_scatter = fp32_reduce_scatter
        self.move_params_to_cpu = bool(move_params_to_cpu or cpu_offload)
        self.move_grads_to_cpu = self.move_params_to_cpu if move_grads_to_cpu is None else move_grads_to_cpu
        self.compute_dtype = compute_dtype or (torch.float16 if mixed_precision else torch.float32)
        self.buffer_dtype = buffer_dtype or self.compute_dtype
        self.bucket_cap_mb = bucket_cap_mb
        self.no_broadcast_optim_state = no_broadcast_optim_state
        self.state_dict_device = state_dict_device or self.compute_device
        self.state_dict_on_rank_0_only = state_dict_on_rank_0_only
        self.clear_autocast_cache = clear_autocast_cache
        self.force_input_to_fp32 = force_input_to_fp32
        self.verbose = verbose
        self.allow_reset_parameters = allow_reset_parameters
        self.process_group_reduce_scatter = self.process_group
        if gradient_predivide_factor:
            self.set_gradient_divide_factors(gradient_predivide_factor, self.world_size / gradient_predivide_factor,
                                             recursive=False)

    # -- fairscale's gradient division: torch FSDP1 keeps the same two factors
    @property
    def gradient_predivide_factor(self) -> float:
        return float(self._gradient_predivide_factor)

    @property
    def gradient_postdivide_factor(self) -> float:
        return float(self._gradient_postdivide_factor)

    def set_gradient_divide_factors(self, pre: float, post: float, recursive: bool) -> None:
        """Divide gradients by ``pre`` before the reduce-scatter and by ``post`` after it."""
        self.assert_state(TrainingState.IDLE)
        units = [m for m in self.modules() if isinstance(m, fsdp.FullyShardedDataParallel)] if recursive else [self]
        for unit in units:
            unit._gradient_predivide_factor = pre  # type: ignore[assignment]  # torch divides by any number
            unit._gradient_postdivide_factor = post  # type: ignore[assignment]

    def assert_state(self, state: Any) -> None:
        """Raise ``ValueError`` unless ``training_state`` is ``state`` (or one of a list of them)."""
        states = state if isinstance(state, (list, tuple)) else [state]
        if self.training_state not in states:
            raise ValueError(f"expected to be in states {states} but current state is {self.training_state}")

    # -- this unit's own parameters: torch's ``params`` holds its flat parameter, as fairscale's does
    def non_shared_params(self) -> list[nn.Parameter]:
        """This unit's flat parameter(s), as :attr:`params`: torch FSDP keeps one copy of shared ones."""
        return list(self.params)

    @property
    def params_with_grad(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.grad is not None]

    @property
    def numel_padded_per_param(self) -> list[int]:
        handle = self._handle
        return [] if handle is None else [handle.flat_param._shard_numel_padded]

    def append_shared_param(self, p: nn.Parameter) -> None:
        """Refused: fairscale's experimental sharing across units has no torch FSDP counterpart."""
        raise NotImplementedError(
            "FullyShardedDataParallel.append_shared_param (experimental in fairscale) has no torch FSDP "
            "counterpart: wrap the modules that share the parameter in one FullyShardedDataParallel unit "
            "(torch FSDP keeps a single copy of parameters shared inside a unit)"
        )

    def reset_parameters(self) -> None:
        """The wrapped module's ``reset_parameters()`` on the full parameters (needs ``allow_reset_parameters``)."""
        if not self.allow_reset_parameters:
            raise RuntimeError("reset parameters after FSDP wrapping is not allowed: pass "
                               "allow_reset_parameters=True to FullyShardedDataParallel")
        with fsdp.FullyShardedDataParallel.summon_full_params(self, recurse=False, writeback=True):
            module: Any = self.module
            module.reset_parameters()

    # -- fairscale's sharded checkpoints (one file per rank), see _fsdp_shards
    def local_state_dict(self, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> dict[str, Any]:
        """This rank's shards in fairscale's layout, plus the buffers; loads back with
        :meth:`load_local_state_dict` into the same wrapping and world size."""
        self.assert_state(TrainingState.IDLE)
        shards = _fsdp_shards.local_state_dict(self, prefix, keep_vars)
        if destination is None:
            return shards
        destination.update(shards)
        return dict(destination)

    def load_local_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        self.assert_state(TrainingState.IDLE)
        return _fsdp_shards.load_local_state_dict(self, state_dict, strict)

    def local_metadata_dict(self) -> dict[str, Any]:
        """How to cut the concatenated shards back into parameters (for :meth:`consolidate_shard_weights`)."""
        return _fsdp_shards.local_metadata_dict(self)

    consolidate_shard_weights = staticmethod(_fsdp_shards.consolidate_shard_weights)

    @contextlib.contextmanager
    def summon_full_params(self, recurse: bool = True, volatile: bool = False) -> Iterator[None]:  # type: ignore[override]
        """fairscale's spelling: ``volatile=True`` means changes need not be written back."""
        with fsdp.FullyShardedDataParallel.summon_full_params(self, recurse=recurse, writeback=not volatile):
            yield

    def gather_full_optim_state_dict(self, optim: torch.optim.Optimizer, **ignored: Any) -> dict[str, Any] | None:
        """The full optimizer state on rank 0 (``None`` elsewhere); a collective.

        Keys are torch's (parameter names), not fairscale's indices; feed it back through
        :meth:`get_shard_from_optim_state_dict`.
        """
        full = fsdp.FullyShardedDataParallel.full_optim_state_dict(self, optim, rank0_only=True)
        return full or None

    def get_shard_from_optim_state_dict(self, full_optim_state_dict: dict[str, Any]) -> dict[str, Any]:
        """This rank's optimizer state from the full one (every rank must hold the full state)."""
        shard: dict[str, Any] = fsdp.FullyShardedDataParallel.shard_full_optim_state_dict(full_optim_state_dict, self)
        return shard


@functools.cache
def fairscale_fully_sharded_data_parallel() -> type[nn.Module]:
    """fairscale's FSDP, taking either offload spelling whichever one this version has.

    Without CUDA each instance holds shardcompat's CPU compatibility layer for as long as it
    lives (as ``prepare``'s fairscale-fsdp backend does), and ``clip_grad_norm_`` computes the
    same global norm without fairscale's ``.cuda()``.
    """
    import importlib

    from fairscale.nn.data_parallel import FullyShardedDataParallel as Base

    from ..backends import _fairscale_cpu

    patched = importlib.import_module(_fairscale_cpu.FSDP_MODULE)
    has = {name: accepts(Base.__init__, name) for name in (*_OFFLOAD_NAMES, "compute_device")}

    class FullyShardedDataParallel(Base):  # type: ignore[misc, valid-type]
        __doc__ = Base.__doc__

        def __init__(self, module: nn.Module, *args: Any, **kwargs: Any) -> None:  # fairscale's name: module=
            for name, other in (_OFFLOAD_NAMES, _OFFLOAD_NAMES[::-1]):
                if name in kwargs and not has[name] and has[other]:
                    kwargs[other] = kwargs.pop(name)
            self._shardcompat_cpu = not torch.cuda.is_available()
            if not self._shardcompat_cpu:
                super().__init__(module, *args, **kwargs)
                return
            if has["compute_device"] and kwargs.get("compute_device") is None:
                kwargs["compute_device"] = torch.device("cpu")  # fairscale's default is CUDA
            with _fairscale_cpu.cpu_compat(patched):
                super().__init__(module, *args, **kwargs)
                _fairscale_cpu.hold(patched, self)

        def gather_full_optim_state_dict(self, optim: torch.optim.Optimizer, **kwargs: Any) -> dict[str, Any] | None:
            # fairscale turns each tensor ``step`` into a float in ``optim.state_dict()``, whose
            # per-parameter dicts are the live ones on torch 2: the next Adam step would fail.
            steps = {p: st["step"] for p, st in optim.state.items() if isinstance(st.get("step"), torch.Tensor)}
            try:
                return super().gather_full_optim_state_dict(optim, **kwargs)  # type: ignore[no-any-return]
            finally:
                for param, step in steps.items():
                    optim.state[param]["step"] = step

        def _gather_optim_state(self, sd_state: dict[int, dict[str, Any]]) -> Any:
            if not self._shardcompat_cpu:
                return super()._gather_optim_state(sd_state)
            return _fairscale_cpu.gather_optim_state(super()._gather_optim_state, sd_state)

        def get_shard_from_optim_state_dict(self, full_optim_state_dict: dict[str, Any]) -> dict[str, Any]:
            return _steps_as_tensors(super().get_shard_from_optim_state_dict(full_optim_state_dict))

        def load_local_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
            # fairscale then frees full parameters that exist only after its lazy init: into a
            # model that has not run yet it fails (no ``_full_param_padded``).  Initialise and
            # reset as fairscale's own state_dict() does.
            fresh = self._is_root is None
            units = [unit for unit in self.modules() if isinstance(unit, Base)]
            for unit in units:  # the root first: it tells the others they are not roots
                unit._lazy_init()
            try:
                return super().load_local_state_dict(state_dict, strict)
            finally:
                if fresh and self._is_root:
                    for unit in units:
                        unit._reset_lazy_init()

        def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
            if not self._shardcompat_cpu:
                return super().clip_grad_norm_(max_norm, norm_type)  # type: ignore[no-any-return]
            # Each rank holds a disjoint shard of every gradient, as fairscale assumes too.
            return shard_clip_grad_norm_(self.parameters(), float(max_norm), float(norm_type), self.process_group)

    return FullyShardedDataParallel


def _steps_as_tensors(optim_state: dict[str, Any]) -> dict[str, Any]:
    """fairscale hands ``step`` back as a Python number; torch >= 1.12's Adam/AdamW refuse it
    ("``state_steps`` argument must contain a list of singleton tensors")."""
    for state in optim_state.get("state", {}).values():
        step = state.get("step")
        if step is not None and not isinstance(step, torch.Tensor):
            state["step"] = torch.tensor(float(step))
    return optim_state
