"""fairscale's ``checkpoint_wrapper`` on torch's activation checkpointing.

Like fairscale's, the wrapper changes the module in place (same object, type and state-dict
keys): its ``forward`` runs under ``torch.utils.checkpoint`` (non-reentrant: keyword
arguments and non-tensor outputs work), ``offload_to_cpu`` keeps the saved inputs on CPU
(``torch.autograd.graph.save_on_cpu``), and batch-norm layers inside update their running
statistics once per step, not again when the forward is recomputed in backward.
:func:`is_checkpointing` and :func:`is_recomputing` say which of the two forwards is running;
within :func:`disable_checkpointing` wrapped modules run a plain forward (activations kept).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.checkpoint import checkpoint

__all__ = ["checkpoint_wrapper", "disable_checkpointing", "is_checkpointing", "is_recomputing"]


class _Phase(threading.local):
    checkpointing = False
    recomputing = False
    disabled = False


_phase = _Phase()


def is_checkpointing() -> bool:
    """True while a checkpointed module's forward runs (the first time)."""
    return _phase.checkpointing


def is_recomputing() -> bool:
    """True while a checkpointed module's forward is recomputed during backward."""
    return _phase.recomputing


@contextlib.contextmanager
def _set(flag: str) -> Iterator[None]:
    before = getattr(_phase, flag)
    setattr(_phase, flag, True)
    try:
        yield
    finally:
        setattr(_phase, flag, before)


def disable_checkpointing() -> contextlib.AbstractContextManager[None]:
    """Within this context checkpointed modules keep their activations, as unwrapped ones do
    (for a forward whose backward must not recompute, e.g. one run twice on the same graph)."""
    return _set("disabled")


def _contexts() -> tuple[contextlib.AbstractContextManager[None], contextlib.AbstractContextManager[None]]:
    return _set("checkpointing"), _set("recomputing")


_HELD = "_shardcompat_held_stats"


def _hold_stats(bn: _BatchNorm, inputs: Any) -> None:
    """Before a recomputation, keep the running statistics the first forward left."""
    if _phase.recomputing and bn.training:
        bn.__dict__[_HELD] = [b.clone() for b in bn.buffers(recurse=False)]


@torch.no_grad()
def _release_stats(bn: _BatchNorm, inputs: Any, output: Any) -> None:
    """...and put them back after it (the computation itself must not change: torch checks
    that the recomputation saves the same tensors)."""
    held = bn.__dict__.pop(_HELD, None)
    if held is not None:
        for buffer, kept in zip(bn.buffers(recurse=False), held, strict=True):
            buffer.copy_(kept)


def checkpoint_wrapper(module: nn.Module, offload_to_cpu: bool = False) -> nn.Module:
    """Recompute ``module``'s activations in backward instead of keeping them; returns ``module``."""
    for child in module.modules():
        if isinstance(child, _BatchNorm):
            child.register_forward_pre_hook(_hold_stats)
            child.register_forward_hook(_release_stats)
    # A weak reference: module -> forward -> module would keep the module alive forever.
    module.forward = functools.partial(  # type: ignore[method-assign]
        _checkpointed_forward, type(module).forward, weakref.ref(module), offload_to_cpu
    )
    return module


def _checkpointed_forward(forward: Callable[..., Any], ref: weakref.ref[nn.Module], offload_to_cpu: bool,
                          *args: Any, **kwargs: Any) -> Any:
    module = ref()
    if not torch.is_grad_enabled() or _phase.disabled:  # nothing to save, or told not to
        return forward(module, *args, **kwargs)
    offload = (torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()) if offload_to_cpu
               else contextlib.nullcontext())
    with offload:
        # The whole forward is recomputed (no early stop), as fairscale does: the batch-norm
        # hooks that put the statistics back must run.
        return checkpoint(forward, module, *args, use_reentrant=False, context_fn=_contexts, early_stop=False,
                          **kwargs)
