"""Transformers' ``Adafactor`` on FSDP2's DTensor shards, as exactly as on whole parameters.

Adafactor builds its state at a parameter's first step from plain tensors
(``torch.zeros(shape[:-1]).to(grad)``), which cannot meet a DTensor gradient (``aten.add_``
got mixed ``Tensor`` and ``DTensor``).  Every state tensor is built here instead, before that
step, as a zero DTensor placed as Adafactor's own reduction of the parameter lands: the row
statistics (the mean over the last dimension) keep the parameter's sharding; the column
statistics of a matrix sharded by rows (a mean over the sharded dimension) are replicated;
the first and unfactored second moments are sharded as the parameter is.  Adafactor then
finds its state and steps unchanged, and DTensor's own reductions do the cross-shard work:
the parameter's and the update's RMS (``norm`` over the shards), and the means over the
sharded dimension, uneven shards included (measured equal to whole-parameter Adafactor under
DDP: ``tests/backends/test_adafactor_fsdp2.py``).

The state is what Adafactor would have made itself (zeros, ``step`` 0, ``RMS`` 0), so a
parameter's first step is the same with or without it; it is built for the parameters a step
updates (those with a gradient), and for all of them before a state is loaded, so torch's
``set_optimizer_state_dict`` finds it and does not take its zero-gradient step (which would
apply Adafactor's weight decay with its relative step size to the loaded weights).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["build_state", "install", "serves"]

_CLASS = "transformers.optimization.Adafactor"
_HALF = (torch.float16, torch.bfloat16)  # Adafactor steps these in float32


def serves(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` is Transformers' Adafactor (or a subclass of it)."""
    return any(f"{c.__module__}.{c.__qualname__}" == _CLASS for c in type(optimizer).__mro__)


def install(optimizer: torch.optim.Optimizer) -> None:
    """Build the DTensor state of each parameter before the step that first updates it."""
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: build_state(opt))


def build_state(optimizer: torch.optim.Optimizer, *, every: bool = False) -> None:
    """Zero state for each DTensor parameter without one: those with a gradient, or ``every``."""
    from torch.distributed.tensor import DTensor

    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state[param]
            if state or not isinstance(param, DTensor) or not (every or param.grad is not None):
                continue
            factored, first_moment = type(optimizer)._get_options(group, param.shape)  # type: ignore[attr-defined]
            dtype = torch.float32 if param.dtype in _HALF else param.dtype
            state["step"] = 0
            if first_moment:
                state["exp_avg"] = torch.zeros_like(param.detach(), dtype=dtype)
            if factored:
                state["exp_avg_sq_row"] = _zeros_placed_as(param.detach().mean(dim=-1), dtype)
                state["exp_avg_sq_col"] = _zeros_placed_as(param.detach().mean(dim=-2), dtype)
            else:
                state["exp_avg_sq"] = torch.zeros_like(param.detach(), dtype=dtype)
            state["RMS"] = 0


def _zeros_placed_as(reduced: Any, dtype: torch.dtype) -> Any:
    """Zeros shaped and sharded as ``reduced``, a reduction's pending sum made replicated.

    A mean over a sharded dimension is a ``Partial`` DTensor, whose local tensor already has
    the whole reduced shape; zeros of that shape are a valid replica on every rank, so no
    collective is needed to place them.
    """
    from torch.distributed.tensor import DTensor, Replicate

    placements = [Replicate() if p.is_partial() else p for p in reduced.placements]
    local = torch.zeros_like(reduced.to_local(), dtype=dtype)
    return DTensor.from_local(local, reduced.device_mesh, placements, run_check=False,
                              shape=reduced.shape, stride=reduced.stride())
