"""Exact, repeatable figures for the state a rank holds, and its peak process memory.

State bytes are counted from unique tensor *storages*, not tensors: FSDP's parameters are
views of one flat buffer, fairscale's gradients views of a bucket, and a tied weight appears
twice in ``parameters()``; summing ``numel() * element_size()`` would count those wrongly.
Each storage is counted once, whole (what the rank really holds), under the first kind it
is seen as, in the order ``Prepared.local_tensors()`` yields them (params, grads, optim).
"""

from __future__ import annotations

import re
import resource
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["KINDS", "StateBytes", "count_state", "peak_rss", "reset_peak_rss"]

KINDS = ("param", "grad", "optim")


@dataclass(frozen=True)
class StateBytes:
    """Bytes of parameters, gradients and optimizer state; ``cpu`` is how much of it is in host memory."""

    params: int = 0
    grads: int = 0
    optim: int = 0
    cpu: int = 0

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optim

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"total": self.total}


def count_state(tensors: Iterable[tuple[str, torch.Tensor]]) -> StateBytes:
    """Sum ``(kind, tensor)`` pairs by unique storage; kinds are :data:`KINDS`."""
    seen: set[tuple[str, int]] = set()
    sums = dict.fromkeys(KINDS, 0)
    cpu = 0
    for kind, tensor in tensors:
        if kind not in sums:
            raise ValueError(f"unknown state kind {kind!r}; expected one of {KINDS}")
        storage = tensor.untyped_storage()
        if tensor.is_meta or storage.nbytes() == 0:
            continue  # freed (resized to 0) or never allocated: holds nothing
        key = (str(storage.device), storage.data_ptr())
        if key in seen:
            continue
        seen.add(key)
        sums[kind] += storage.nbytes()
        if storage.device.type == "cpu":
            cpu += storage.nbytes()
    return StateBytes(params=sums["param"], grads=sums["grad"], optim=sums["optim"], cpu=cpu)


# Peak resident memory.  Linux keeps a resettable high-water mark (VmHWM, reset by writing 5
# to clear_refs), which lets two runs in one process each report their own peak; elsewhere
# ru_maxrss, the whole process's peak, is the best there is.
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window if the OS allows it; True when it did."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss() -> int:
    """Peak resident set size of this process in bytes (since the last reset where possible)."""
    try:
        match = re.search(r"^VmHWM:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        match = None
    if match:
        return int(match.group(1)) * 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux
