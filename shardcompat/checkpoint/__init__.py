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

from .._atomic import MANIFEST, atomic_directory
from . import _sharded
from ._common import (
    MODEL,
    OPTIMIZER,
    TRAINER,
    CheckpointError,
    WriteRefused,
    all_agree,
    check_names_and_shapes,
    check_optimizer_kind,
    check_optimizer_state,
    check_state_matches,
    check_trainer,
    gather,
    header,
    load_torch,
    open_checkpoint,
    rank,
    rank0_decides,
    refuse_foreign,
    restore_rank_rng,
    restore_trainer,
    rng_file,
    rng_state,
    shape_table,
    share,
    writable,
)
from ._groups import match_groups

if TYPE_CHECKING:
    from ._protocol import Checkpointable

__all__ = [
    "CheckpointError",
    "WriteRefused",
    "consolidate",
    "load_checkpoint",
    "load_rng_state",
    "read_manifest",
    "save_checkpoint",
]

def save_checkpoint(
    prepared: Checkpointable,
    path: str | os.PathLike[str],
    *,
    step: int | None = None,
    scheduler: Any = None,
    sharded: bool = False,
    **extra: Any,
) -> Path:
    """Write a checkpoint of ``prepared`` into the directory ``path`` atomically (collective:
    call on every rank).

    ``step`` defaults to ``prepared.step_count``; ``scheduler`` (anything with ``state_dict``)
    is saved too; ``extra`` values must be plain data or tensors (they are read back with
    ``torch.load(weights_only=True)``).  The directory may hold other files (a run's output
    folder): they are left byte-identical, as ``torch.distributed.checkpoint`` and
    ``save_pretrained`` leave them.  An earlier checkpoint in it is replaced, file for file,
    only once the new one is complete; a crash at any moment leaves the old or the new one.
    Raises :class:`WriteRefused`, changing nothing, where a file the checkpoint would write
    (``manifest.json``, ``model.pt``, ...) is already there and not part of an earlier one.
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
    rank0_decides(lambda: writable(target), group)  # before gathering
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

    rank0_decides(lambda: refuse_foreign(write), group)
    return target


def load_checkpoint(
    prepared: Checkpointable, path: str | os.PathLike[str], *, scheduler: Any = None, restore_rng: bool = True
) -> dict[str, Any]:
    """Restore ``prepared`` (and ``scheduler``) from the checkpoint at ``path`` (collective).

    Works for both formats, from any backend and world size.  Everything is checked first
    (checksums, the manifest against the files, names and shapes against this model, the
    optimizer's kind and groups), and every rank has read what it needs before any rank
    changes anything: a damaged or mismatched checkpoint raises :class:`CheckpointError`, one
    line naming the file and what is wrong, and leaves the model, optimizer, step and
    scheduler exactly as they were.  Each rank's random states are restored too, unless
    ``restore_rng=False`` (then :func:`load_rng_state` restores them when the loop wants).

    Returns ``{"step": step, **extra}``: the step saved (also set as ``prepared.step_count``)
    and the keyword values given to :func:`save_checkpoint`, e.g. ``{"step": 1000, "epoch": 3}``.

    A Hugging Face folder (``save_pretrained`` or a Trainer ``checkpoint-N/``) or a torch DCP
    folder loads too, its model weights only, matched by name (tied names filled from their
    twin); what it holds beyond them (optimizer, step, scheduler, RNG) is named in a warning
    and in the returned ``"not_restored"`` list, and is not restored.
    """
    source = Path(path)
    group = prepared.placement.process_group
    foreign = share(rank0_decides(lambda: _foreign(source), group), group)
    if foreign is not None:  # a Hugging Face or DCP checkpoint: its model weights, by name
        from .formats import READERS
        from .formats._load import load_model_weights

        return load_model_weights(prepared, source, next(r for r in READERS if r.name == foreign))
    manifest = share(rank0_decides(lambda: open_checkpoint(source), group), group)
    sharded = manifest["kind"] == "sharded"
    names = prepared.optimizer_group_names()  # collective where parameters are flattened
    if sharded and _sharded.dcp_refusal(prepared) is None:
        return _sharded.load(prepared, source, manifest, names, scheduler, restore_rng)
    # The full format, or shards this backend cannot take directly: every rank reads it all.
    expected = share(shape_table(prepared.full_state_dict(rank0_only=True)), group)  # collective
    rank0_decides(lambda: _validate(prepared, source, manifest, expected, names, scheduler, sharded), group)
    model, optim = all_agree(lambda: _read_full(source, manifest, expected, sharded), group)
    prepared.load_full_state_dict(model)
    del model
    prepared.load_optimizer_state_dict(optim)
    return restore_trainer(prepared, source, scheduler, restore_rng)


def _foreign(path: Path) -> str | None:
    """The format of a checkpoint other tools wrote whose model weights load here, else ``None``
    (shardcompat's own, or nothing readable: the manifest checks then say what is wrong)."""
    from .._atomic import JOURNAL
    from .formats import DCP, HUGGINGFACE

    try:
        # Anything of shardcompat's own (a manifest, even a damaged one, its trainer state, a
        # commit journal): the manifest checks decide, so a damaged one is refused as before.
        if any((path / name).exists() or (path / name).is_symlink() for name in (MANIFEST, TRAINER, JOURNAL)):
            return None
        return next((r.name for r in (DCP, HUGGINGFACE) if r.detect(path)), None)
    except OSError:
        return None


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
    """The verified manifest of a checkpoint (no process group needed, nothing written).

    Everything :func:`load_checkpoint` checks before it needs the model: every checksum, the
    manifest's fields, no file or folder reached through a link, no interrupted save, the
    trainer state and, for the sharded kind, DCP's ``.metadata`` (read with only torch's
    metadata classes allowed) against the manifest.  ``checkpoint verify`` and
    ``--resume auto`` ask this, so they accept exactly what loads.
    """
    source = Path(path)
    manifest = open_checkpoint(source)
    check_trainer(source, None)
    if manifest["kind"] == "sharded":
        _sharded.check_metadata(source, manifest)
    return manifest


def _validate(
    prepared: Checkpointable,
    path: Path,
    manifest: Mapping[str, Any],
    expected: Mapping[str, list[int]],
    names: list[list[str]],
    scheduler: Any,
    sharded: bool,
) -> None:
    """What rank 0 checks before anyone reads the state: model, optimizer kind, groups, trainer."""
    check_names_and_shapes(manifest["model"], expected, path / MANIFEST)
    check_optimizer_kind(prepared, manifest)
    check_trainer(path, scheduler)
    if sharded:
        _sharded.check_metadata(path, manifest)
        match_groups(_sharded.read_param_groups(path), names, prepared.optimizer.param_groups)
        return
    optim = load_torch(path / OPTIMIZER)
    check_optimizer_state(optim, expected, path / OPTIMIZER)
    match_groups(optim["param_groups"], names, prepared.optimizer.param_groups, optim["state"])


def _read_full(
    path: Path, manifest: Mapping[str, Any], expected: Mapping[str, list[int]], sharded: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """This rank's copy of the whole state, checked against the manifest and the model."""
    if sharded:
        model, optim = _sharded.read_full(path)
    else:
        model, optim = load_torch(path / MODEL), load_torch(path / OPTIMIZER)
    file = path / (".metadata" if sharded else MODEL)
    check_state_matches(model, manifest, file)
    check_optimizer_state(optim, expected, path / OPTIMIZER)
    return model, optim


def consolidate(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> Path:
    """Turn the sharded checkpoint ``src`` into a full one in the directory ``dst`` (one process,
    no process group).

    ``dst`` is written like :func:`save_checkpoint` writes: other files there are kept, an
    earlier checkpoint there is replaced atomically.  Raises :class:`WriteRefused` before
    anything is written when ``dst`` and ``src`` overlap (the same directory, one inside the
    other, through symbolic links too) or ``dst`` holds someone else's ``manifest.json`` etc.
    Needs memory for one full copy of the model and optimizer state.
    """
    return _sharded.consolidate(Path(src), Path(dst))
