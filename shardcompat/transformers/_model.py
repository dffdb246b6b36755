"""What the Trainer holds when ``sharded_ddp`` is set: a module and an optimizer that answer
the training loop's questions through the :class:`~shardcompat.prepared.Prepared`.

Every Transformers release hands the model to Accelerate unless ``Trainer._wrap_model``
returns a model other than ``self.model``.  FSDP2 shards a model in place (the wrapped model
*is* ``self.model``), so the Trainer always gets a :class:`ShardedModule` around
``prepared.model``: a distinct object on every backend.  The training loop then asks the model
for ``no_sync()`` (gradient accumulation, through Accelerate) and ``clip_grad_norm_`` (4.x
releases), and both are answered by the backend.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ._api import load

if TYPE_CHECKING:
    from ..prepared import Prepared

__all__ = ["CHECKPOINT_DIR", "ShardedModule", "TrainerOptimizer"]

CHECKPOINT_DIR = "shardcompat"  # the portable checkpoint inside each checkpoint-N folder

_AcceleratedOptimizer: Any = load("accelerate.optimizer").AcceleratedOptimizer


class ShardedModule(nn.Module):
    """``prepared.model`` for the Trainer; other attributes read through to the Transformers model."""

    def __init__(self, prepared: Prepared) -> None:
        super().__init__()
        self.module = prepared.model
        self.prepared = prepared

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Gradient accumulation: the backend's way of not reducing until the last micro-batch."""
        return self.prepared.no_sync()

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Unscale (fp16, once a step: :meth:`Prepared.unscale_`) and clip by the global norm
        over all shards; the norm before clipping."""
        return self.prepared.clip_grad_norm_(max_norm, norm_type)

    def _get_name(self) -> str:
        # The Trainer picks the loss of label smoothing by the model class's name.
        name: str = self.prepared.module._get_name()  # type: ignore[no-untyped-call]
        return name

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in ("module", "prepared"):
                raise
            return getattr(self.prepared.module, name)


class TrainerOptimizer(_AcceleratedOptimizer):  # type: ignore[misc]
    """Accelerate's optimizer wrapper (gradient accumulation, the backend's grad scaler) whose
    ``state_dict`` points at the portable checkpoint.

    A sharded optimizer has no state dict one rank can produce alone (ZeRO's needs a
    collective first, FSDP's is one shard), and the Trainer saves ``optimizer.state_dict()``
    on rank 0 only.  The real state is written by every rank, consolidated by parameter name,
    into ``checkpoint-N/shardcompat/``; :meth:`Prepared.optimizer_state_dict` gives it to code.
    """

    def __init__(self, prepared: Prepared) -> None:
        # device_placement=False: moving the state would copy ZeRO's or undo offload's placement.
        super().__init__(prepared.optimizer, device_placement=False, scaler=prepared.scaler)

    def state_dict(self) -> dict[str, Any]:
        return {"shardcompat": f"the optimizer state is in {CHECKPOINT_DIR}/ next to this file"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "shardcompat" in state_dict:
            raise ValueError(
                "this optimizer.pt only points at the portable checkpoint; resume with "
                f"trainer.train(resume_from_checkpoint=...), which reads {CHECKPOINT_DIR}/"
            )
        super().load_state_dict(state_dict)
