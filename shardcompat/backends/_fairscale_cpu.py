"""Let fairscale's FullyShardedDataParallel run on CPU/gloo, and nothing more.

fairscale FSDP was written for CUDA only: it creates ``torch.cuda.Stream`` objects to
overlap communication (``KeyError: 'all_gather'`` on 0.3.7+ when there are none,
``torch.cuda.Stream requires CUDA`` before), pins host memory for offload, and calls
``record_stream``.  On one CPU host thread all work is already ordered, so each of these is
a no-op there.  :func:`cpu_compat` makes them so, and only:

- while it is entered: :func:`hold` enters it for as long as a CPU fairscale FSDP instance
  lives (its autograd hooks run inside the user's ``loss.backward()``, outside any call of
  ours, so nothing narrower works); never on CUDA;
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
  first dimension, and fairscale passes a ``(world_size, shard)`` stack, so it aborts.  Its
  ``all_gather`` reshapes a 0-d input to the outputs' equal-sized shape: gloo checks shapes
  where NCCL checks sizes, and fairscale gathers Adam's 0-d ``step`` into ``(1,)`` chunks.
Anything else CUDA-specific still fails loudly; the parity tests show the result equals DDP.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

__all__ = ["FSDP_MODULE", "cpu_compat", "gather_optim_state", "hold", "supported"]

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

    def all_gather(self, tensor_list: list[torch.Tensor], tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        # NCCL needs equal sizes, gloo equal shapes: fairscale gathers a 0-d ``step`` into (1,) chunks.
        if tensor_list and tensor.shape != tensor_list[0].shape and tensor.numel() == tensor_list[0].numel():
            tensor = tensor.reshape(tensor_list[0].shape)
        return self._real.all_gather(tensor_list, tensor, *args, **kwargs)


_lock = threading.RLock()
_depth = 0
_saved: dict[str, Any] = {}


def supported(module: ModuleType) -> bool:
    """Whether ``module`` (fairscale's FSDP module) is what this layer knows how to adapt.

    It must reach CUDA only through its global ``torch`` and build its streams in
    ``_setup_streams`` (fairscale 0.3.x-0.4.x); anything else is left alone.
    """
    fsdp = getattr(module, "FullyShardedDataParallel", None)
    seen = getattr(module, "torch", None)  # our view while the layer is held
    return (seen is torch or isinstance(seen, _TorchView)) and hasattr(fsdp, "_setup_streams")


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


def hold(module: ModuleType, owner: object) -> None:
    """Stay inside :func:`cpu_compat` until ``owner`` (a fairscale FSDP instance) is collected."""
    layer = cpu_compat(module)
    layer.__enter__()
    weakref.finalize(owner, layer.__exit__, None, None, None)


_States = dict[int, dict[str, Any]]


def gather_optim_state(gather: Callable[[_States], tuple[_States, _States]], sd_state: _States) -> tuple[_States, _States]:
    """fairscale's ``FSDP._gather_optim_state`` (``gather``), one state key at a time.

    It all-gathers every tensor state of a parameter into one reused buffer and keeps
    ``x.cpu()`` of the chunks: a copy off a GPU, but on CPU the buffer itself, so each key
    overwrote the one before (``exp_avg`` came back equal to ``exp_avg_sq``).  One key per
    call gets a fresh buffer each time; every rank iterates the same keys in the same order.
    """
    gathered: _States = {k: {} for k in sd_state}
    singletons: _States = {k: {} for k in sd_state}
    for key in dict.fromkeys(name for state in sd_state.values() for name in state):
        some, single = gather({k: {key: v[key]} if key in v else {} for k, v in sd_state.items()})
        for k in sd_state:
            gathered[k].update(some.get(k, {}))
            singletons[k].update(single.get(k, {}))
    return gathered, singletons
