"""Make fairscale wait for every async collective it starts, not only for the last one.

fairscale before 0.3.7 starts one async broadcast (or all-reduce) per bucket and waits on
the last handle only, "since they're all inlined on the same CUDA stream":
``OSS._broadcast_params`` after each step, ``ShardedDataParallel.sync_buffers`` and
``_sync_params_and_buffers``; ``ShardedGradScaler.unscale_`` does it in every release (one
all-reduce per device).  On NCCL that holds.  gloo runs
collectives on a pool of threads, so an earlier broadcast may still be writing a bucket while
the next forward reads it: ranks drift apart at random (seen with fairscale 0.3.0 on torch
2.13: 2e-2 on a small MLP after 4 steps, in about one run of three).  fairscale 0.3.7
itself switched OSS and ShardedDDP to waiting on every handle.

:func:`wait_for_every_collective` finds the functions that keep only a last handle (by the
variable names in their code, so nothing depends on a version number) and gives their
module a ``dist`` whose ``broadcast``/``all_reduce`` return an already completed work when
``async_op=True``: the order fairscale 0.3.7+ gets by waiting on all of them.  Every other
name of ``torch.distributed`` is passed through.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from types import ModuleType
from typing import Any

__all__ = ["SITES", "last_handle_only", "wait_for_every_collective"]

# (module, class, method) where fairscale releases collect async work and may wait on the last.
SITES = (
    ("fairscale.optim.oss", "OSS", "_broadcast_params"),
    ("fairscale.nn.data_parallel.sharded_ddp", "ShardedDataParallel", "sync_buffers"),
    ("fairscale.nn.data_parallel.sharded_ddp", "ShardedDataParallel", "_sync_params_and_buffers"),
    ("fairscale.optim.grad_scaler", "ShardedGradScaler", "unscale_"),
)
_LAST_HANDLE = frozenset({"last_work_handle", "last_handle"})


class _WaitingDist:
    """``torch.distributed`` whose async broadcasts and all-reduces are complete on return."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def broadcast(self, *args: Any, **kwargs: Any) -> Any:
        return _completed(self._real.broadcast(*args, **kwargs))

    def all_reduce(self, *args: Any, **kwargs: Any) -> Any:
        return _completed(self._real.all_reduce(*args, **kwargs))


def _completed(work: Any) -> Any:
    if work is not None:  # None: a blocking call, already done
        work.wait()
    return work


def last_handle_only(module: ModuleType, cls: str, method: str) -> bool:
    """Whether ``module.cls.method`` keeps only the last of its async work handles."""
    fn = getattr(getattr(module, cls, None), method, None)
    code = getattr(inspect.unwrap(fn), "__code__", None) if fn is not None else None  # @torch.no_grad
    return code is not None and bool(_LAST_HANDLE & set(code.co_varnames))


@functools.cache
def wait_for_every_collective() -> tuple[str, ...]:
    """Fix the modules of this fairscale release that need it; the ``class.method`` names fixed.

    Once per process (every probe asks); modules that do not exist in this release, or do
    not need it, are left alone.
    """
    fixed = []
    for module_name, cls, method in SITES:
        try:
            module = importlib.import_module(module_name)
        except (ImportError, SystemExit):  # 0.4.7+ may exit importing fairscale.nn
            continue
        if not last_handle_only(module, cls, method):
            continue
        real = module.dist
        if not isinstance(real, _WaitingDist):
            module.dist = _WaitingDist(real)  # type: ignore[attr-defined]
        fixed.append(f"{cls}.{method}")
    return tuple(fixed)
