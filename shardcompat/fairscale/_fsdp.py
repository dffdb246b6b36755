"""``FullyShardedDataParallel`` both ways: real fairscale (CUDA, or CPU through the layer), or torch's FSDP1.

torch FSDP1 is the closest native match: flat parameters, ``summon_full_params``,
``no_sync``, ``clip_grad_norm_`` and full state dicts by default.  The fairscale arguments are
translated by :func:`torch_kwargs` following the table in ``_arguments``; the methods whose
spelling differs (``summon_full_params(volatile=)``, ``gather_full_optim_state_dict``) are
bridged on :class:`NativeFullyShardedDataParallel`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed import fsdp

from ..backends._fairscale_common import accepts, shard_clip_grad_norm_
from ._arguments import NATIVE, How, check

__all__ = ["NativeFullyShardedDataParallel", "fairscale_fully_sharded_data_parallel", "torch_kwargs"]

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
        cuda = torch.cuda.is_available()
        super().__init__(module, **torch_kwargs(given, cuda))
        settings = _state_dict_settings(given, cuda)
        if settings is not None:
            fsdp.FullyShardedDataParallel.set_state_dict_type(self, fsdp.StateDictType.FULL_STATE_DICT, settings)

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

    module = importlib.import_module(_fairscale_cpu.FSDP_MODULE)
    has = {name: accepts(Base.__init__, name) for name in (*_OFFLOAD_NAMES, "compute_device")}

    class FullyShardedDataParallel(Base):  # type: ignore[misc, valid-type]
        __doc__ = Base.__doc__

        def __init__(self, module_: nn.Module, *args: Any, **kwargs: Any) -> None:
            for name, other in (_OFFLOAD_NAMES, _OFFLOAD_NAMES[::-1]):
                if name in kwargs and not has[name] and has[other]:
                    kwargs[other] = kwargs.pop(name)
            self._shardcompat_cpu = not torch.cuda.is_available()
            if not self._shardcompat_cpu:
                super().__init__(module_, *args, **kwargs)
                return
            if has["compute_device"] and kwargs.get("compute_device") is None:
                kwargs["compute_device"] = torch.device("cpu")  # fairscale's default is CUDA
            with _fairscale_cpu.cpu_compat(module):
                super().__init__(module_, *args, **kwargs)
                _fairscale_cpu.hold(module, self)

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
