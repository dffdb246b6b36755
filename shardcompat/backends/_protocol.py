"""The small protocol every backend satisfies (one module per backend, each exporting ``BACKEND``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..options import ShardingOptions, Stage
from ._base import OptimizerFactory, Placement, Plan, Probe

if TYPE_CHECKING:
    import torch

    from ..prepared import Prepared

__all__ = ["Backend"]


class Backend(Protocol):
    """One implementation of sharded data parallelism.

    ``serves`` lists the stages it can ever serve (``None`` is plain DDP); whether it can
    serve a particular request *here* is ``probe()`` plus ``plan()``, which raises
    :class:`UnsupportedOptions` with the reason.
    """

    name: str
    serves: frozenset[Stage | None]

    def probe(self) -> Probe: ...

    def plan(self, options: ShardingOptions, placement: Placement) -> Plan: ...

    def wrap(
        self,
        model: torch.nn.Module,
        optimizer: OptimizerFactory,
        plan: Plan,
        placement: Placement,
    ) -> Prepared: ...
