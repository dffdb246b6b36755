"""Per-rank collective bytes, counted where every collective passes: torch's dispatcher.

Every ``torch.distributed`` collective, whoever issues it (DDP's C++ reducer, FSDP, ZeRO,
fairscale, our own code), is a ``c10d::*`` operator call through the dispatcher; a
``TorchDispatchMode`` sees each one with its tensors, on the calling thread and on the
autograd threads the mode is propagated to.  So the count is independent of the code paths
of the backend being measured.

Volume follows the ZeRO paper's accounting (§7), per rank, in bytes: an all-reduce of n
bytes counts 2n (a reduce-scatter plus an all-gather); a reduce-scatter counts its input
(n, the full tensor), an all-gather its output (n), a broadcast or a reduce n.  The model:
plain DDP, ZeRO-1 and ZeRO-2 move 2Ψ per step, ZeRO-3 3Ψ (Ψ: the parameters' bytes;
:func:`shardcompat.memory.zero_model_volume`, kept there so the report imports no torch).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .memory import zero_model_volume

__all__ = ["KINDS", "CommCounter", "CommVolume", "zero_model_volume"]

KINDS = ("all-reduce", "reduce-scatter", "all-gather", "broadcast", "reduce")

# c10d operator name -> (kind, which argument holds the tensors the volume is counted from,
# how many times that is counted)
_OPS: dict[str, tuple[str, int, int]] = {
    "allreduce_": ("all-reduce", 0, 2),
    "allreduce_coalesced_": ("all-reduce", 0, 2),
    "_reduce_scatter_base_": ("reduce-scatter", 1, 1),
    "reduce_scatter_": ("reduce-scatter", 1, 1),
    "reduce_scatter_tensor_coalesced_": ("reduce-scatter", 1, 1),
    "_allgather_base_": ("all-gather", 0, 1),
    "allgather_": ("all-gather", 0, 1),
    "allgather_coalesced_": ("all-gather", 0, 1),
    "allgather_into_tensor_coalesced_": ("all-gather", 0, 1),
    "broadcast_": ("broadcast", 0, 1),
    "reduce_": ("reduce", 0, 1),
}


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes(v) for v in value)
    return 0


@dataclass
class CommVolume:
    """Bytes and calls of each collective kind; ``other`` counts calls outside :data:`KINDS`."""

    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    other: int = 0

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    @property
    def collectives(self) -> int:
        return sum(self.calls.values())

    def as_dict(self) -> dict[str, Any]:
        return {"bytes": dict(self.bytes), "calls": dict(self.calls), "total": self.total,
                "collectives": self.collectives}


class CommCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """``with CommCounter() as counter: ...`` then ``counter.volume``.

    Only ``c10d`` operators are looked at; every other operator passes straight through.
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.volume = CommVolume()

    def __torch_dispatch__(self, func: Any, types: Iterable[type], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if getattr(func, "namespace", None) == "c10d":
            name = func.__name__.split(".")[0]
            found = _OPS.get(name)
            if found is None:
                self.volume.other += 1
            else:
                kind, arg, times = found
                self.volume.bytes[kind] += times * _bytes(args[arg] if len(args) > arg else None)
                self.volume.calls[kind] += 1
        return func(*args, **(kwargs or {}))
