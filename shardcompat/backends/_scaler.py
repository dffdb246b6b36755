"""torch's ``ShardedGradScaler`` with the shape of its inf flag fixed for fused optimizers.

``ShardedGradScaler.unscale_`` records the "found inf" flag as a ``(1,)`` tensor where
``GradScaler`` uses a 0-d one.  Fused optimizers (AdamW with ``fused=True``, the Transformers
Trainer's default on torch 2.8 and later) subtract that flag from their 0-d step counters,
and the ``(1,)`` shape fails there: every fp16 step after ``unscale_`` (clipping) crashed.

A fused optimizer is also trusted by ``GradScaler.step`` to skip an overflowed step itself
(``_step_supports_amp_scaling``), and on FSDP2's DTensor parameters the fused kernel does not:
the inf reached AdamW's moments and every later step overflowed too.  This scaler skips such
a step itself, as it does for any other optimizer (the step is not called at all).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as _TorchShardedGradScaler

__all__ = ["ShardedGradScaler"]


class ShardedGradScaler(_TorchShardedGradScaler):
    """torch's scaler (``found_inf`` all-reduced over the process group), 0-d inf flags."""

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        fused = getattr(optimizer, "_step_supports_amp_scaling", False)
        if not fused:
            return super().step(optimizer, *args, **kwargs)
        optimizer._step_supports_amp_scaling = False  # type: ignore[attr-defined]
        try:
            return super().step(optimizer, *args, **kwargs)
        finally:
            optimizer._step_supports_amp_scaling = fused  # type: ignore[attr-defined]

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        super().unscale_(optimizer)
        state: dict[str, Any] = self._per_optimizer_states[id(optimizer)]
        state["found_inf_per_device"] = {
            device: flag.reshape(()) for device, flag in state["found_inf_per_device"].items()
        }
