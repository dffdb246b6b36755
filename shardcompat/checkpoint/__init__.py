"""Checkpoints that move between backends and world sizes, written so a crash cannot lose one.

A checkpoint is a directory::

    manifest.json     format, version, kind, backend, options, world size, versions, the
                      model's {name: shape} table, and sha256 + size of every file below
    model.pt          full model state, original parameter names          (kind "full")
    optimizer.pt      consolidated optimizer state keyed by parameter NAME (kind "full")
    .metadata, __*_*.distcp   torch.distributed.checkpoint shards           (kind "sharded")
    trainer.pt        step, scheduler state, the caller's extra values
    rng/rank-NNNNN.pt each rank's torch / CUDA / python / numpy random states

Names, not optimizer indices or flat-parameter layouts, are what every backend agrees on, so
a full checkpoint saved by any backend on any world size loads on any other; parameter groups
are matched by the names they hold too (:func:`._groups.match_groups`).  The sharded
format (``sharded=True``) never gathers the model in one process: each rank writes its own
shards; :func:`consolidate` turns it into the full format.  Both are written into a temporary
directory and swapped in atomically (:mod:`shardcompat._atomic`), and both are verified
entirely (checksums, names, shapes, optimizer kind) before anything is loaded.

Loading restores the model, optimizer, ``prepared.step_count``, the scheduler passed in and
each rank's RNG (ranks beyond the saved world size keep their own RNG; ``restore_rng=False``
leaves it for :func:`load_rng_state` to restore later), and returns ``{"step": step, **extra}``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .._atomic import atomic_directory
from . import _sharded
from ._common import (
    MODEL,
    OPTIMIZER,
    TRAINER,
    CheckpointError,
    check_names_and_shapes,
    check_optimizer_kind,
    check_trainer,
    gather,
    header,
    load_torch,
    open_checkpoint,
    rank,
    rank0_decides,
    restore_rank_rng,
    restore_trainer,
    rng_file,
    rng_state,
    shape_table,
    share,
)
from ._groups import match_groups

if TYPE_CHECKING:
    from ..prepared import Prepared

__all__ = [
    "CheckpointError",
    "consolidate",
    "load_checkpoint",
    "load_rng_state",
    "read_manifest",
    "save_checkpoint",
]

def save_checkpoint(
    prepared: Prepared,
    path: str | os.PathLike[str],
    *,
    step: int | None = None,
    scheduler: Any = None,
    sharded: bool = False,
    **extra: Any,
) -> Path:
    """Write a checkpoint of ``prepared`` at ``path`` atomically (collective: call on every rank).

    ``step`` defaults to ``prepared.step_count``; ``scheduler`` (anything with ``state_dict``)
    is saved too; ``extra`` values must be plain data or tensors (they are read back with
    ``torch.load(weights_only=True)``).  An existing checkpoint at ``path`` is replaced only
    once the new one is complete.
    """
    target = Path(path)
    step = prepared.step_count if step is None else int(step)
    trainer = {
        "step": step,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "extra": dict(extra),
    }
    if sharded:
        _sharded.save(prepared, target, trainer)
        return target
    group = prepared.placement.process_group
    model = prepared.full_state_dict(rank0_only=True)
    optim = prepared.optimizer_state_dict(rank0_only=True)
    rngs = gather(rng_state(), group)

    def write() -> None:
        manifest = header(prepared, "full", step, shape_table(model))
        with atomic_directory(target, manifest) as tmp:
            torch.save(model, tmp / MODEL)
            torch.save(optim, tmp / OPTIMIZER)
            torch.save(trainer, tmp / TRAINER)
            for r, state in enumerate(rngs):
                (tmp / rng_file(r)).parent.mkdir(exist_ok=True)
                torch.save(state, tmp / rng_file(r))

    rank0_decides(write, group)
    return target


def load_checkpoint(
    prepared: Prepared, path: str | os.PathLike[str], *, scheduler: Any = None, restore_rng: bool = True
) -> dict[str, Any]:
    """Restore ``prepared`` (and ``scheduler``) from the checkpoint at ``path`` (collective).

    Works for both formats, from any backend and world size.  Everything is checked first;
    a damaged or mismatched checkpoint raises :class:`CheckpointError` and changes nothing.
    Each rank's random states are restored too, unless ``restore_rng=False`` (then
    :func:`load_rng_state` restores them when the loop wants).  Returns ``{"step": step, **extra}``.
    """
    source = Path(path)
    group = prepared.placement.process_group
    manifest = share(rank0_decides(lambda: open_checkpoint(source), group), group)
    sharded = manifest["kind"] == "sharded"
    names = prepared.optimizer_group_names()  # collective where parameters are flattened
    if sharded and _sharded.dcp_refusal(prepared) is None:
        return _sharded.load(prepared, source, manifest, names, scheduler, restore_rng)
    # The full format, or shards this backend cannot take directly: every rank reads it all.
    expected = shape_table(prepared.full_state_dict(rank0_only=True))  # collective
    rank0_decides(
        lambda: _validate_full(prepared, source, manifest, expected, names, scheduler, sharded), group
    )
    if sharded:
        model, optim = _sharded.read_full(source)
    else:
        model, optim = load_torch(source / MODEL), load_torch(source / OPTIMIZER)
    prepared.load_full_state_dict(model)
    del model
    prepared.load_optimizer_state_dict(optim)
    return restore_trainer(prepared, source, scheduler, restore_rng)


def load_rng_state(path: str | os.PathLike[str], *, group: Any = None) -> bool:
    """Restore this rank's random states (torch, CUDA, Python, numpy) from the checkpoint at ``path``.

    What :func:`load_checkpoint` does last, for a loop that restores them at another moment
    (load with ``restore_rng=False``): the Hugging Face Trainer, for one, first draws the data
    order as a fresh run would.  ``group`` numbers the ranks (the default process group when
    ``None``); only this rank's file is read and verified, so this is not collective.
    Returns ``False``, changing nothing, on a rank beyond the world size that saved it.
    """
    source = Path(path)
    open_checkpoint(source, only=[rng_file(rank(group))])
    return restore_rank_rng(source, group)


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The verified manifest of a checkpoint (no process group needed)."""
    return open_checkpoint(Path(path))


def _validate_full(
    prepared: Prepared,
    path: Path,
    manifest: Mapping[str, Any],
    expected: Mapping[str, list[int]],
    names: list[list[str]],
    scheduler: Any,
    sharded: bool,
) -> None:
    check_names_and_shapes(manifest["model"], expected)
    check_optimizer_kind(prepared, manifest)
    check_trainer(path, scheduler)
    if sharded:  # the shards' own metadata is checked as they are read
        match_groups(_sharded.read_param_groups(path), names, prepared.optimizer.param_groups)
        return
    optim = load_torch(path / OPTIMIZER)
    if not isinstance(optim, Mapping) or not {"state", "param_groups"} <= optim.keys():
        raise CheckpointError(f"{path / OPTIMIZER} is not a consolidated optimizer state")
    problems = []
    for name, values in optim["state"].items():
        if name not in expected:
            problems.append(f"state for {name!r}, which the model does not have")
            continue
        for key, value in values.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and list(value.shape) != expected[name]:
                problems.append(f"{name}.{key} has shape {tuple(value.shape)}, the parameter {tuple(expected[name])}")
    if problems:
        raise CheckpointError(f"the optimizer state in {path} does not fit: " + "; ".join(problems))
    match_groups(optim["param_groups"], names, prepared.optimizer.param_groups, optim["state"])


def consolidate(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> Path:
    """Turn the sharded checkpoint ``src`` into a full one at ``dst`` (one process, no process group).

    Needs memory for one full copy of the model and optimizer state.
    """
    return _sharded.consolidate(Path(src), Path(dst))
