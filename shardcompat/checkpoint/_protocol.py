"""What a checkpoint reads off and writes into the object it saves: a small protocol.

:class:`~shardcompat.prepared.Prepared` satisfies it (mypy checks that where ``Prepared``
calls :func:`~shardcompat.checkpoint.save_checkpoint` with itself), so this package depends on
nothing above it: ``prepared`` imports ``checkpoint``, never the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

    from ..options import ShardingOptions

__all__ = ["Checkpointable", "HasProcessGroup", "local_optimizer"]


class HasProcessGroup(Protocol):
    """Where the job runs, as far as a checkpoint cares: the group its collectives use."""

    @property
    def process_group(self) -> ProcessGroup | None: ...


class Checkpointable(Protocol):
    """A wrapped model with its optimizer, as :func:`~shardcompat.checkpoint.save_checkpoint`
    and :func:`~shardcompat.checkpoint.load_checkpoint` use it (collective methods are called
    on every rank)."""

    step_count: int

    @property
    def model(self) -> torch.nn.Module: ...

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def placement(self) -> HasProcessGroup: ...

    @property
    def backend(self) -> str: ...

    @property
    def options(self) -> ShardingOptions: ...

    def full_state_dict(self, *, rank0_only: bool = True) -> dict[str, torch.Tensor]: ...

    def optimizer_state_dict(self, *, rank0_only: bool = True) -> dict[str, Any]: ...

    def optimizer_group_names(self) -> list[list[str]]: ...

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None: ...

    def load_optimizer_state_dict(self, state: dict[str, Any]) -> None: ...


def local_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer that really holds this rank's state (OSS and ZeRO keep one inside)."""
    inner = getattr(optimizer, "optim", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer
