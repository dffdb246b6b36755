"""``ShardedGradScaler``: fairscale's on CUDA, else torch's (fairscale's is CUDA-only).

Either way ``found_inf`` is all-reduced over the process group, which a plain ``GradScaler``
would not do: with sharded optimizers each rank sees only its shard's infs.
"""

from __future__ import annotations

from typing import Any

import torch

from ..backends._scaler import ShardedGradScaler as _TorchScaler

__all__ = ["NativeShardedGradScaler", "fairscale_sharded_grad_scaler"]


class NativeShardedGradScaler(_TorchScaler):
    """fairscale's signature on torch's scaler; the device is CUDA when there is one, else CPU.

    Unscaling is the caller's, once a step (``scaler.unscale_(optimizer)`` before clipping, or
    ``scaler.step`` alone): a second ``unscale_`` raises, as fairscale's and torch's do.
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
        process_group: Any = None,
    ) -> None:
        kwargs: dict[str, Any] = {} if process_group is None else {"process_group": process_group}
        super().__init__(
            device="cuda" if torch.cuda.is_available() else "cpu",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
            **kwargs,
        )


def fairscale_sharded_grad_scaler() -> type[Any]:
    from fairscale.optim.grad_scaler import ShardedGradScaler

    scaler: type[Any] = ShardedGradScaler
    return scaler
