"""Native ``OSS``: fairscale's sharded optimizer API over torch's ``ZeroRedundancyOptimizer``.

Both partition whole parameters across ranks, step only the local shard and broadcast the
result, so the training maths is the same; what differs is the API spelling, bridged here
(``optim``/``group``, ``consolidate_state_dict(recipient_rank=)``, ``state_dict(all_ranks=)``,
``clip_grad_norm``, ``partition_parameters``), and two behaviours fairscale code relies on:
parameters of mixed dtypes (a frozen integer tensor beside float weights), and ``{}`` rather
than ``None`` as the loaded state of the parameters other ranks own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

from ..backends._fairscale_common import shard_clip_grad_norm_
from ._arguments import NATIVE, check

__all__ = ["NativeOSS"]


class NativeOSS(ZeroRedundancyOptimizer):
    """``fairscale.optim.OSS(params, optim=SGD, group=None, ..., **default)`` on ZeRO."""

    def __init__(
        self,
        params: Iterable[Any],
        optim: type[torch.optim.Optimizer] = torch.optim.SGD,
        group: Any = None,
        broadcast_buffer_size: int = -1,
        broadcast_fp16: bool = False,
        force_broadcast_object: bool = False,
        **default: Any,
    ) -> None:
        check("OSS", NATIVE, {
            "broadcast_buffer_size": broadcast_buffer_size,
            "broadcast_fp16": broadcast_fp16,
            "force_broadcast_object": force_broadcast_object,
        })
        super().__init__(params, optimizer_class=optim, process_group=group, **default)
        self.group = group if group is not None else dist.group.WORLD  # fairscale's attribute

    def consolidate_state_dict(self, recipient_rank: int = 0) -> None:  # type: ignore[override]
        """Gather the full state on ``recipient_rank`` (a collective: call it on every rank)."""
        super().consolidate_state_dict(to=recipient_rank)

    def state_dict(self, all_ranks: bool = False) -> dict[str, Any]:
        """The consolidated full state; ``all_ranks=True`` gathers it on every rank (collective)."""
        if not all_ranks:
            return super().state_dict()
        mine: dict[str, Any] = {}
        group: Any = self.group
        for rank in range(dist.get_world_size(self.process_group)):
            super().consolidate_state_dict(to=dist.get_global_rank(group, rank))
            if rank == dist.get_rank(self.process_group):
                mine = super().state_dict()
        return mine

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the full state; this rank keeps its shard's state and ``{}`` for the others'.

        ZeRO would write ``None`` into the caller's dict and into ``self.state`` for the
        parameters other ranks own (``for s in optimizer.state.values(): s.items()`` then
        fails); fairscale leaves the input alone and holds ``{}``.
        """
        super().load_state_dict({**state_dict, "state": dict(state_dict["state"])})
        for param, state in self.state.items():
            if state is None:
                self.state[param] = {}

    def partition_parameters(self) -> list[list[dict[str, Any]]]:
        """Each rank's ``param_groups``: which parameters each rank steps (fairscale's name)."""
        partition: list[list[dict[str, Any]]] = self._partition_parameters()  # type: ignore[attr-defined]
        return partition

    @property
    def _per_device_params(self) -> dict[torch.device, list[list[torch.Tensor]]]:
        """fairscale's view of the partition, by device and then by rank (its own tests and
        user code that checks what each rank steps read it; ZeRO keeps it only for bucket views)."""
        partition = self.partition_parameters()
        by_device: dict[torch.device, list[list[torch.Tensor]]] = {}
        for rank, groups in enumerate(partition):
            for param in (p for group in groups for p in group["params"]):
                by_device.setdefault(param.device, [[] for _ in partition])[rank].append(param)
        return by_device

    @property
    def buckets(self) -> dict[torch.device, dict[int, Any]]:
        """fairscale's flat broadcast buffers, by device and rank: none here, since ZeRO without
        bucket views (which mixed dtypes rule out) broadcasts each parameter from its owner."""
        return {}

    def refresh_trainable(self) -> None:
        """Nothing to do: ZeRO re-reads ``requires_grad`` at every :meth:`step`."""

    def _verify_same_dense_param_type(self) -> None:
        """Allow mixed dtypes, as fairscale does (ZeRO refuses them only because of
        ``parameters_as_bucket_view``, which this class never turns on); sparse still fails."""
        for param in self._all_params:  # type: ignore[attr-defined]
            if param.is_sparse:
                raise ValueError(f"OSS cannot shard sparse parameters (got {torch.typename(param)})")

    def clip_grad_norm(
        self,
        max_norm: float,
        norm_type: float = 2.0,
        filter_params_fn: Callable[[Any], Any] | None = None,
    ) -> torch.Tensor:
        """Clip by the norm over every rank's shard, as ``clip_grad_norm_`` on the whole model.

        Only this rank's parameters are clipped: they are the only ones it steps.
        """
        local = [p for group in self.optim.param_groups for p in group["params"]]
        if filter_params_fn is not None:
            local = list(filter_params_fn(local))
        return shard_clip_grad_norm_(local, float(max_norm), float(norm_type), self.process_group)
