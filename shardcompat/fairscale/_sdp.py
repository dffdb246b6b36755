"""``ShardedDataParallel`` both ways: real fairscale with its torch-2 trap fixed, or DDP + ZeRO.

The trap (fairscale #354, see ``backends/fairscale_sdp.py``): with a reduce bucket, grads are
views into the bucket and torch 2's ``Optimizer.zero_grad()`` cuts them.  The facade keeps the
user's ``reduce_buffer_size`` and reuses that backend's fix (every ``OSS.zero_grad`` goes
through ShardedDDP's, which zeroes the views in place).  Natively, DDP all-reduces full
gradients and the ZeRO optimizer steps its shard: the same result as ShardedDDP + OSS.  The
native class adds what fairscale code calls on top of DDP: ``reduce()`` after a ``no_sync``
backward, ``sync_buffers()``, ``zero_grad()`` keeping tensors, attributes forwarded to the
wrapped module, and fairscale's refusal of gradients that require grad.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..backends._fairscale_common import accepts
from ._arguments import NATIVE, check
from ._oss import NativeOSS

__all__ = ["NativeShardedDataParallel", "fairscale_sharded_data_parallel"]

_FP32_BYTES = 4
log = logging.getLogger("shardcompat.fairscale")


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


def _buffer_sync(broadcast_buffers: bool) -> dict[str, Any]:
    """fairscale's ``broadcast_buffers`` (sync buffers before each forward) in the spelling this
    torch takes: ``forward_sync_buffers`` where DDP has it (torch 2.13 deprecates
    ``broadcast_buffers`` with a FutureWarning), which syncs buffers at startup too, as
    fairscale's ``sync_models_at_startup`` does."""
    if accepts(nn.parallel.DistributedDataParallel.__init__, "forward_sync_buffers"):
        return {"forward_sync_buffers": broadcast_buffers}
    return {"broadcast_buffers": broadcast_buffers}


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
            bucket_cap_mb=reduce_buffer_size * _FP32_BYTES / 2**20,
            **_buffer_sync(broadcast_buffers),
        )
        self.sharded_optimizers = optimizers
        self._reduce_fp16 = reduce_fp16
        self._auto_refresh_trainable = auto_refresh_trainable
        self._warn_on_trainable_params_changed = warn_on_trainable_params_changed
        self._trainable = self._trainable_mask()
        if reduce_fp16:
            self._register_fp16_hook()

    def _register_fp16_hook(self) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self.register_comm_hook(self.process_group, default_hooks.fp16_compress_hook)

    def _trainable_mask(self) -> list[bool]:
        return [p.requires_grad for p in self.module.parameters()]

    def __getattr__(self, name: str) -> Any:
        """Attributes DDP does not have come from the wrapped module, as in fairscale."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            module = self.__dict__.get("_modules", {}).get("module")
            if module is None:
                raise
            return getattr(module, name)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """DDP's forward, after fairscale's checks: gradients that require grad are refused,
        and a change of ``requires_grad`` since the last forward rebuilds the reducer
        (``auto_refresh_trainable``, as fairscale re-reads trainability)."""
        if self.training and torch.is_grad_enabled():
            for param in self.module.parameters():
                if param.grad is not None and param.grad.requires_grad:
                    raise RuntimeError(
                        "ShardedDataParallel only works with gradients that don't require grad: "
                        "detach the gradients (or call zero_grad()) before the forward"
                    )
            if self._trainable_mask() != self._trainable:
                if self._warn_on_trainable_params_changed:
                    log.warning("ShardedDataParallel: the trainable parameters changed%s",
                                "; rebuilding DDP's reducer" if self._auto_refresh_trainable
                                else "; call refresh_trainable() (auto_refresh_trainable=False)")
                if self._auto_refresh_trainable:
                    self.refresh_trainable()
        return super().forward(*inputs, **kwargs)  # type: ignore[no-untyped-call]

    def zero_grad(self, set_to_none: bool = False) -> None:
        """fairscale's default keeps the gradient tensors (zeroed); torch's sets them to None."""
        super().zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def reduce(self) -> None:
        """Average the gradients accumulated under :meth:`no_sync` across ranks now.

        fairscale's manual reduction: ``with model.no_sync(): loss.backward()`` then
        ``model.reduce()`` gives every rank the gradients an ordinary synced backward would.
        A parameter no rank has a gradient for keeps ``None``; a collective, call it on every rank.
        """
        params = [p for p in self.module.parameters() if p.requires_grad]
        if not params:
            raise RuntimeError("ShardedDataParallel.reduce(): the model has no trainable parameters")
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        held = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=grads[0].device)
        flat = torch.cat([g.reshape(-1).to(grads[0].dtype) for g in grads] + [held.to(grads[0].dtype)])
        world = dist.get_world_size(self.process_group)
        flat.div_(world)  # before the sum, as DDP does
        dist.all_reduce(flat, group=self.process_group)
        held_anywhere = flat[-len(params):] > 0
        if not bool(held_anywhere.any()):
            raise RuntimeError(
                "ShardedDataParallel.reduce(): no gradients to reduce on any rank; call it after "
                "a backward pass run under no_sync(), once"
            )
        offset = 0
        for param, grad, anywhere in zip(params, grads, held_anywhere.tolist(), strict=True):
            reduced = flat[offset:offset + grad.numel()].view_as(grad).to(grad.dtype)
            offset += grad.numel()
            if param.grad is not None:
                param.grad.copy_(reduced)
            elif anywhere:
                param.grad = reduced.clone()

    @torch.no_grad()
    def sync_buffers(self, blocking: bool = False) -> None:
        """Broadcast the module's buffers (batch-norm statistics...) from the group's first rank."""
        source = dist.get_global_rank(self.process_group, 0)
        handles = [dist.broadcast(b, source, group=self.process_group, async_op=True) for b in self.module.buffers()]
        if blocking:
            for handle in handles:
                handle.wait()

    def refresh_trainable(self) -> None:
        """Re-read ``requires_grad``: rebuild DDP's reducer over the parameters trainable now.

        The same rebuild DDP performs when it is unpickled (``__setstate__``); the fp16
        compression hook, which lives on the reducer, is registered again.  ZeRO re-reads
        trainability at its next step by itself.
        """
        parameters, expect_sparse = self._build_params_for_reducer()  # type: ignore[no-untyped-call]
        names = self._build_debug_param_to_name_mapping(parameters)  # type: ignore[no-untyped-call]
        self._ddp_init_helper(parameters, expect_sparse, names, self.static_graph)  # type: ignore[no-untyped-call]
        if self._reduce_fp16:
            self._register_fp16_hook()
        self._trainable = self._trainable_mask()
