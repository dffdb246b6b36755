"""Exact, repeatable figures for the state a rank holds, and its peak process memory.

State bytes are counted from unique tensor *storages*, not tensors: FSDP's parameters are
views of one flat buffer, fairscale's gradients views of a bucket, and a tied weight appears
twice in ``parameters()``; summing ``numel() * element_size()`` would count those wrongly.
Each storage is counted once, whole (what the rank really holds), under the first kind it
is seen as, in the order ``Prepared.local_tensors()`` yields them (params, grads, optim).

The figures are held against the ZeRO paper's model (:func:`zero_model_bytes`), and
:func:`off_model_reason` says in one line why a run is off it: the note ``shardcompat train``
and ``benchmarks/memory.py`` print under their tables.
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

    from .options import ShardingOptions

__all__ = [
    "KINDS",
    "TOLERANCE",
    "UNEXPLAINED",
    "StateBytes",
    "count_state",
    "off_model_reason",
    "peak_rss",
    "peak_rss_method",
    "plan_stage",
    "reset_peak_rss",
    "zero_model_bytes",
    "zero_model_host_bytes",
    "zero_model_volume",
]

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
# to clear_refs), but the reset only lowers it to the current RSS: what an earlier run left
# resident (allocator caches, torch's lazily loaded kernels; gc and malloc_trim return almost
# none of it) still counts.  So a figure per run needs a process per run (``shardcompat
# train`` starts one); the reset keeps the window honest within that process.  Elsewhere
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


def peak_rss_method() -> str:
    """Which counter :func:`peak_rss` reads here: ``VmHWM`` (resettable, Linux) or ``ru_maxrss``."""
    try:
        return "VmHWM" if "VmHWM:" in _STATUS.read_text() else "ru_maxrss"
    except OSError:
        return "ru_maxrss"


# --------------------------------------------------------------------------- the ZeRO model

# Bytes per parameter for Adam in fp32 (parameters 4, gradients 4, two moments 8), by ZeRO
# stage: (held whole on every rank, divided among the N ranks).
_ZERO_MODEL = {0: (16, 0), 1: (8, 8), 2: (4, 12), 3: (0, 16)}
TOLERANCE = 0.05  # a run within 5% of the model is on it
_FSDP_FAMILY = ("torch-fsdp1", "torch-fsdp2", "fairscale-fsdp")  # gather parameters for compute
UNEXPLAINED = "no known cause"  # how off_model_reason says it has no reason to give


def zero_model_bytes(stage: int, psi: int, world_size: int) -> float:
    """Per-rank state of ZeRO ``stage`` for ``psi`` parameters on ``world_size`` ranks (Adam, fp32):
    DDP 16Ψ, stage 1 8Ψ + 8Ψ/N, stage 2 4Ψ + 12Ψ/N, stage 3 16Ψ/N."""
    whole, sharded = _ZERO_MODEL[stage]
    return psi * (whole + sharded / world_size)


def zero_model_host_bytes(stage: int, psi: int, world_size: int) -> float:
    """How much of :func:`zero_model_bytes` offload moves to host memory: the sharded part."""
    return psi * _ZERO_MODEL[stage][1] / world_size


def zero_model_volume(stage: int, psi_bytes: int) -> int:
    """The ZeRO paper's per-rank collective bytes of one step (§7): 2Ψ for DDP and stages 1-2
    (an all-reduce, or a reduce-scatter and an all-gather), 3Ψ for stage 3 (one more all-gather)."""
    return (3 if stage == 3 else 2) * psi_bytes


def plan_stage(options: str | ShardingOptions, backend: str, world_size: int, device: str = "cpu") -> int:
    """The ZeRO stage ``backend``'s plan for ``options`` really implements (``Plan.zero_stage``:
    torch-zero serves ``simple`` as stage 1); the options' own stage if it cannot plan here."""
    from .backends import Placement, UnsupportedOptions, get
    from .options import parse_options

    parsed = parse_options(options)
    placement = Placement(world_size=world_size, local_world_size=world_size,
                          device="cuda:0" if device.startswith("cuda") else "cpu")
    try:
        return get(backend).plan(parsed, placement).zero_stage
    except (UnsupportedOptions, ImportError, ValueError):
        return parsed.zero_stage


def _whole_root(parsed: ShardingOptions, backend: str) -> str | None:
    """Why ZeRO-3 holds the whole model from forward to backward on ``backend``, if it does.

    FSDP1 and fairscale FSDP never reshard their root unit after forward; without auto_wrap
    the root is the whole model, so forward ends holding 4Ψ + the shard: ZeRO-2's bytes.
    """
    from .options import Stage

    if parsed.stage is not Stage.ZERO_DP_3 or parsed.auto_wrap or backend not in ("torch-fsdp1", "fairscale-fsdp"):
        return None
    who = "FSDP1" if backend == "torch-fsdp1" else "fairscale FSDP (disable_reshard_on_root)"
    return (f"{who} keeps its root unit, here the whole model, gathered from forward to "
            "backward by design; add auto_wrap to gather one block at a time")


def held_whole_from_forward(options: str | ShardingOptions, backend: str, world_size: int,
                            device: str = "cpu") -> str | None:
    """Why ``backend``'s plan for ``options`` holds the whole parameters from forward to
    backward (so a rank's state can peak after forward, before any gradient exists), or
    ``None`` where it reshards them: the same rule :func:`off_model_reason` predicts bytes by."""
    from .options import parse_options

    parsed = parse_options(options)
    stage = plan_stage(parsed, backend, world_size, device)
    if stage == 0:
        return "plain DDP holds the whole model on every rank"
    if stage in (1, 2):
        return f"ZeRO-{stage} shards only the gradients and optimizer state, never the parameters"
    return _whole_root(parsed, backend)


def off_model_reason(
    options: str | ShardingOptions, backend: str, world_size: int, psi: int, measured: float,
    *, stage: int | None = None, device: str = "cpu",
) -> str | None:
    """``None`` when ``measured`` (a rank's state bytes) is within :data:`TOLERANCE` of the ZeRO
    model for the stage the plan implements; otherwise one line: the ratio and why.

    A known cause is named only when the bytes it predicts match the measurement within the
    same tolerance, so the note cannot blame the wrong thing; anything else is said to be
    unexplained.  ``stage`` defaults to :func:`plan_stage`.
    """
    from .options import Precision, parse_options

    parsed = parse_options(options)
    stage = plan_stage(parsed, backend, world_size, device) if stage is None else stage
    model = zero_model_bytes(stage, psi, world_size)
    ratio = measured / model
    if abs(ratio - 1) <= TOLERANCE:
        return None
    head = f"{ratio:.2f}x the ZeRO-{stage} model"
    causes: list[str] = []
    predicted = model
    root = _whole_root(parsed, backend)
    if root:
        predicted = zero_model_bytes(2, psi, world_size)
        causes.append(root)
    gathered = stage == 2 or bool(root)  # full parameters held from forward to backward
    # The FSDP family gathers mixed precision's parameters in 16 bits: 2Ψ, not the model's 4Ψ.
    if gathered and parsed.mixed_precision in (Precision.BF16, Precision.FP16) and backend in _FSDP_FAMILY:
        predicted -= 2 * psi
        causes.append(f"with mixed_precision={parsed.mixed_precision.value} the gathered parameters "
                      "are 16-bit, 2 bytes each where the fp32 model counts 4")
    # fairscale's offload allocates its host gradient shard (_cpu_grad) up front, so it is held
    # through forward too, next to the gathered parameters.
    if gathered and backend == "fairscale-fsdp" and parsed.offload:
        predicted += 4 * psi / world_size
        causes.append("fairscale's offload allocates its host gradient shard up front, so it is "
                      "held through forward as well")
    if causes and abs(measured / predicted - 1) <= TOLERANCE:
        return f"{head}: " + "; ".join(causes)
    # Causes whose size depends on more than the options: named when they can only add bytes.
    if measured > model:
        if parsed.hybrid:
            return f"{head}: hybrid sharding shards over the ranks of one node, not all {world_size}"
        if backend == "fairscale-fsdp" and parsed.bucket_cap_mb is not None:
            return (f"{head}: gradient shards are views of the bucket_cap_mb={parsed.bucket_cap_mb:g} "
                    "reduce-scatter bucket and keep 1/N of it alive; leave bucket_cap_mb unset")
        if backend == "fairscale-sdp" and world_size > 2:
            return (f"{head}: OSS gives each rank whole parameters, so the largest rank holds more "
                    "than 1/N of the optimizer state")
    return f"{head}: {UNEXPLAINED} (please report it with the options and world size)"
