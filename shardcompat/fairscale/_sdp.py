"""``ShardedDataParallel`` both ways: real fairscale with its torch-2 trap fixed, or DDP + ZeRO.

The trap (fairscale #354, see ``backends/fairscale_sdp.py``): with a reduce bucket, grads are
views into the bucket and torch 2's ``Optimizer.zero_grad()`` cuts them.  The facade keeps the
user's ``reduce_buffer_size`` and reuses that backend's fix (every ``OSS.zero_grad`` goes
through ShardedDDP's, which zeroes the views in place).  Natively, DDP all-reduces full
gradients and the ZeRO optimizer steps its shard: the same result as ShardedDDP + OSS.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import nn

from ._arguments import NATIVE, check
from ._oss import NativeOSS

__all__ = ["NativeShardedDataParallel", "fairscale_sharded_data_parallel"]

_FP32_BYTES = 4


def _optimizers(sharded_optimizer: Any) -> list[Any]:
    return list(sharded_optimizer) if isinstance(sharded_optimizer, (list, tuple)) else [sharded_optimizer]


@functools.cache
def fairscale_sharded_data_parallel() -> type[nn.Module]:
    """fairscale's ``ShardedDataParallel``, subclassed to apply the bucket/zero_grad fix."""
    from fairscale.nn.data_parallel.sharded_ddp import ShardedDataParallel as Base

    from ..backends.fairscale_sdp import _zero_through_model

    signature = inspect.signature(Base.__init__)

    class ShardedDataParallel(Base):  # type: ignore[misc, valid-type]
        __doc__ = Base.__doc__

        def __init__(self, module: nn.Module, sharded_optimizer: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(module, sharded_optimizer, *args, **kwargs)
            bound = signature.bind(self, module, sharded_optimizer, *args, **kwargs)
            bound.apply_defaults()
            if bound.arguments.get("reduce_buffer_size", 0):  # absent before 0.3.1: no bucket, no trap
                for optimizer in _optimizers(sharded_optimizer):
                    _zero_through_model(optimizer, self)

    return ShardedDataParallel


class NativeShardedDataParallel(nn.parallel.DistributedDataParallel):
    """``fairscale.nn.ShardedDataParallel(module, sharded_optimizer, ...)`` as DDP over ZeRO."""

    def __init__(
        self,
        module: nn.Module,
        sharded_optimizer: NativeOSS | list[NativeOSS],
        process_group: Any = None,
        broadcast_buffers: bool = True,
        sync_models_at_startup: bool = True,
        reduce_buffer_size: int = 2**23,
        auto_refresh_trainable: bool = True,
        reduce_fp16: bool = False,
        warn_on_trainable_params_changed: bool = True,
    ) -> None:
        check("ShardedDataParallel", NATIVE, {"sync_models_at_startup": sync_models_at_startup})
        optimizers = _optimizers(sharded_optimizer)
        for optimizer in optimizers:
            if not isinstance(optimizer, NativeOSS):
                raise TypeError(
                    f"ShardedDataParallel needs the optimizer built by shardcompat.fairscale.OSS, got "
                    f"{type(optimizer).__module__}.{type(optimizer).__qualname__}: build it as "
                    "OSS(model.parameters(), optim=<optimizer class>, **kwargs) from shardcompat.fairscale"
                )
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        super().__init__(
            module,
            device_ids=[device] if device.type == "cuda" else None,
            process_group=process_group,
            broadcast_buffers=broadcast_buffers,
            bucket_cap_mb=reduce_buffer_size * _FP32_BYTES / 2**20,
        )
        if reduce_fp16:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            self.register_comm_hook(process_group, default_hooks.fp16_compress_hook)
        self.sharded_optimizers = optimizers

    def refresh_trainable(self) -> None:
        """fairscale re-reads ``requires_grad`` here; DDP cannot, so a change needs a new wrapper."""
        raise RuntimeError(
            "the native ShardedDataParallel (DDP) fixes its trainable parameters when built: "
            "wrap the model again (and build a new OSS) after changing requires_grad"
        )
