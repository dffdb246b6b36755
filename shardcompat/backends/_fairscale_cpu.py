"""Let fairscale's FullyShardedDataParallel run on CPU/gloo, and nothing more.

fairscale FSDP was written for CUDA only: it creates ``torch.cuda.Stream`` objects to
overlap communication (``KeyError: 'all_gather'`` on 0.3.7+ when there are none,
``torch.cuda.Stream requires CUDA`` before), pins host memory for offload, and calls
``record_stream``.  On one CPU host thread all work is already ordered, so each of these is
a no-op there.  :func:`cpu_compat` makes them so, and only:

- while it is entered (``FairscaleFsdpPrepared`` enters it around construction, forward,
  backward and state-dict calls on CPU; never on CUDA);
- for fairscale's FSDP module: its global name ``torch`` is swapped for a view of torch whose
  ``torch.cuda`` has no-op streams (``Stream``, ``stream``, ``current_stream``,
  ``synchronize``) and says CUDA is available so that FSDP builds those streams.  torch
  itself, and every other module, still see the real ``torch.cuda``;
- for two tensor methods: ``pin_memory()`` returns the tensor when no accelerator exists
  (pinning only speeds up host-to-device copies, and there is no device), and
  ``record_stream(s)`` ignores the no-op streams above (it is a caching-allocator hint; CPU
  memory is freed by reference counting).  Any other call goes to torch unchanged.

- for the ``dist`` global of the FSDP and reduce-scatter-bucketer modules: a view of
  ``torch.distributed`` without ``_all_gather_base``/``_reduce_scatter_base``, so fairscale
  takes its list-based fallback (what ``ENABLE_NCCL_BASE_COLLECTIVES=0`` selects on releases
  that have the switch; 0.3.x have none).  gloo's ``_reduce_scatter_base`` checks the input's
  first dimension, and fairscale passes a ``(world_size, shard)`` stack, so it aborts.
Anything else CUDA-specific still fails loudly; the parity tests show the result equals DDP.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

__all__ = ["FSDP_MODULE", "cpu_compat", "supported"]

FSDP_MODULE = "fairscale.nn.data_parallel.fully_sharded_data_parallel"


class _NoStream:
    """Stands in for ``torch.cuda.Stream``: CPU work on one thread is already in order."""

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class _NoCuda:
    """``torch.cuda`` as fairscale FSDP sees it inside :func:`cpu_compat`."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self._current: list[_NoStream] = [_NoStream()]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def is_available(self) -> bool:
        return True  # so FSDP creates its streams (the no-op ones below)

    def Stream(self, *args: Any, **kwargs: Any) -> _NoStream:
        return _NoStream()

    def current_stream(self, device: Any = None) -> _NoStream:
        return self._current[-1]

    @contextlib.contextmanager
    def stream(self, stream: _NoStream | None) -> Iterator[None]:
        # FSDP asserts current_stream() is the stream it entered, so keep that true.
        self._current.append(stream if stream is not None else self._current[-1])
        try:
            yield
        finally:
            self._current.pop()

    def synchronize(self, device: Any = None) -> None:
        return None


class _TorchView:
    """The ``torch`` module with ``cuda`` replaced; everything else is the real torch."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real
        self.cuda = _NoCuda(real.cuda)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _DistView:
    """``torch.distributed`` without the flat "base" collectives fairscale would pick."""

    _HIDDEN = frozenset({"_all_gather_base", "_reduce_scatter_base"})

    def __init__(self, real: ModuleType) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        if name in self._HIDDEN:
            raise AttributeError(name)
        return getattr(self._real, name)


_lock = threading.RLock()
_depth = 0
_saved: dict[str, Any] = {}


def supported(module: ModuleType) -> bool:
    """Whether ``module`` (fairscale's FSDP module) is what this layer knows how to adapt.

    It must reach CUDA only through its global ``torch`` and build its streams in
    ``_setup_streams`` (fairscale 0.3.x-0.4.x); anything else is left alone.
    """
    fsdp = getattr(module, "FullyShardedDataParallel", None)
    return getattr(module, "torch", None) is torch and hasattr(fsdp, "_setup_streams")


def _dist_users(module: ModuleType) -> list[ModuleType]:
    """The FSDP module and the module of its reduce-scatter bucketer (moved in 0.4)."""
    import sys

    bucketer = getattr(module, "ReduceScatterBucketer", None)
    found = [module, sys.modules.get(getattr(bucketer, "__module__", ""))]
    return [m for m in found if isinstance(m, ModuleType) and hasattr(m, "dist")]


def _pin_memory(original: Any) -> Any:
    def pin_memory(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not torch.cuda.is_available() and self.device.type == "cpu":
            return self
        pinned: torch.Tensor = original(self, *args, **kwargs)
        return pinned

    return pin_memory


def _record_stream(original: Any) -> Any:
    def record_stream(self: torch.Tensor, stream: Any) -> None:
        if isinstance(stream, _NoStream):
            return None
        return original(self, stream)  # type: ignore[no-any-return]

    return record_stream


@contextlib.contextmanager
def cpu_compat(module: ModuleType) -> Iterator[None]:
    """Apply the patches above while inside; re-entrant, undone on the outermost exit."""
    global _depth
    with _lock:
        if _depth == 0:
            _saved.update(
                torch=module.torch,
                dist={m: m.dist for m in _dist_users(module)},
                pin_memory=torch.Tensor.pin_memory,
                record_stream=torch.Tensor.record_stream,
            )
            setattr(module, "torch", _TorchView(torch))  # noqa: B010 (a module global)
            for user, real in _saved["dist"].items():
                user.dist = _DistView(real)
            torch.Tensor.pin_memory = _pin_memory(_saved["pin_memory"])  # type: ignore[method-assign]
            torch.Tensor.record_stream = _record_stream(_saved["record_stream"])  # type: ignore[method-assign]
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                setattr(module, "torch", _saved.pop("torch"))  # noqa: B010
                for user, real in _saved.pop("dist").items():
                    user.dist = real
                torch.Tensor.pin_memory = _saved.pop("pin_memory")  # type: ignore[method-assign]
                torch.Tensor.record_stream = _saved.pop("record_stream")  # type: ignore[method-assign]
