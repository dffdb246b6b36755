"""One process group for the Trainer: never unsynchronised copies of the model.

Under a launcher (``torchrun``, ``shardcompat run --nproc N``) every process has
``WORLD_SIZE=N``.  Some Transformers releases then set up a one-process "distributed" state on
a machine without GPUs (each rank trains its own copy on all the data, and nothing says so):
:func:`train_on_cpu_under_a_launcher` asks for the CPU collective backend in that case, and
:func:`check_one_group` stops any Trainer whose arguments still disagree with the launcher.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "ProcessGroupMismatch",
    "check_one_group",
    "ensure_group",
    "launched_world_size",
    "train_on_cpu_under_a_launcher",
]


class ProcessGroupMismatch(RuntimeError):
    """The launcher started N processes but the Trainer would not train them as one job."""


def launched_world_size() -> int:
    """How many processes the launcher started (1 when there is no launcher)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def _accelerator_available() -> bool:
    probe = getattr(torch, "accelerator", None)
    if probe is not None and hasattr(probe, "is_available"):
        return bool(probe.is_available())
    return torch.cuda.is_available()


def train_on_cpu_under_a_launcher(args: Any, fields: set[str]) -> str | None:
    """Ask ``args`` for CPU training across the launcher's processes when there is no GPU.

    Returns the field it set (``use_cpu``, or ``no_cuda`` on releases before it), or ``None``.
    """
    if launched_world_size() <= 1 or _accelerator_available():
        return None
    for name in ("use_cpu", "no_cuda"):
        if name in fields:
            if not getattr(args, name):
                setattr(args, name, True)
                return name
            return None
    return None


def check_one_group(args: Any) -> None:
    """Raise :class:`ProcessGroupMismatch` if ``args`` would not train the launched processes together."""
    launched = launched_world_size()
    if launched <= 1:
        return
    configured = int(args.world_size)
    joined = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if configured == launched and joined == launched:
        return
    state = getattr(getattr(args, "distributed_state", None), "distributed_type", None)
    raise ProcessGroupMismatch(
        f"this process was started by a launcher with WORLD_SIZE={launched}, but the "
        f"TrainingArguments set up a world of {configured} (process group: {joined} rank(s)"
        + (f", distributed type {state}" if state is not None else "")
        + "): every rank would train its own unsynchronised copy of the model on all the data. "
        "Use shardcompat.transformers.TrainingArguments (it trains on the CPU across the launched "
        "processes when there is no GPU), or pass use_cpu=True to TrainingArguments on a machine "
        "without GPUs."
    )


def ensure_group(device: torch.device) -> None:
    """A one-rank process group when the job runs in a single process without one.

    ``prepare`` needs a process group; a single process (``shardcompat run`` without
    ``--nproc``, or ``python script.py``) still shards (offload works on one rank) over a
    group of one, built on an in-memory store, so no port is needed.
    """
    if dist.is_initialized():
        return
    if launched_world_size() > 1:
        raise ProcessGroupMismatch(
            f"WORLD_SIZE={launched_world_size()} but no process group was initialised; "
            "start the script with torchrun or shardcompat run --nproc N"
        )
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
