"""Where ``shardcompat train`` saves its checkpoints and which one it resumes from.

Checkpoints live in ``--checkpoint-dir`` as ``step-N`` folders (N optimizer steps done), each
written by :func:`shardcompat.checkpoint.save_checkpoint`.  A new ``step-N`` is staged whole in
a hidden ``.shardcompat-staging-<id>-step-N`` folder beside it and renamed to ``step-N`` with
its manifest inside, so a folder of that name appears only complete; a worker killed mid-save
leaves only the hidden staging, which never matches (the next save of that step removes it).
A save into a ``step-N`` that already exists (a restarted attempt saving that step again)
replaces its files through a journal; killed while moving them, it leaves the folder holding
the journal, which reading refuses and never finishes (only the next save into it does), so
it is skipped.  ``--resume auto`` verifies a candidate's manifest and checksums before choosing
it and falls back to the next newest, so a folder damaged afterwards costs steps, not the run.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["AUTO", "ResumeError", "checkpoint_path", "complete_checkpoints", "resolve_resume"]

AUTO = "auto"
_STEP_DIR = re.compile(r"step-(\d+)")


class ResumeError(ValueError):
    """``--resume`` names nothing this run can resume from; the message says why."""


def checkpoint_path(root: str | Path, step: int) -> Path:
    """The folder of the checkpoint taken after ``step`` optimizer steps."""
    return Path(root) / f"step-{step}"


def complete_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every verified checkpoint under ``root``, newest first."""
    from ..checkpoint import CheckpointError, read_manifest

    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.fullmatch(child.name)
        if match is None or not child.is_dir():
            continue
        try:
            read_manifest(child)
        except CheckpointError:
            continue
        found.append((int(match.group(1)), child))
    return sorted(found, reverse=True)


def resolve_resume(resume: str | None, root: str | Path | None, steps: int) -> Path | None:
    """The checkpoint to resume from, or ``None`` to start afresh (rank 0 decides, once).

    ``auto`` takes the newest complete checkpoint under ``root`` (none yet: a fresh start,
    which is what the first attempt of a restartable job needs); a path must be a complete
    checkpoint.  One that already holds ``steps`` steps leaves nothing to train and is refused.
    """
    from ..checkpoint import CheckpointError, read_manifest

    if resume is None:
        return None
    if resume == AUTO:
        if root is None:
            raise ResumeError("--resume auto needs --checkpoint-dir: the folder to look for step-N checkpoints in")
        found = complete_checkpoints(root)
        if not found:
            return None
        step, path = found[0]
    else:
        path = Path(resume)
        try:
            step = int(read_manifest(path)["step"])
        except CheckpointError as error:
            raise ResumeError(f"--resume {resume}: {error}") from None
    if step >= steps:
        raise ResumeError(f"--resume {path}: it holds {step} steps and --steps is {steps}: nothing left to train")
    return path
