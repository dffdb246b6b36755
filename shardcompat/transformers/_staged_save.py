"""The Trainer's ``checkpoint-N`` appears under its name only once every rank has written it.

The stock Trainer writes into ``checkpoint-N`` directly, and ``get_last_checkpoint`` (which
the 4.x example scripts call on restart) takes the highest-numbered folder: a worker lost
mid-save leaves a half-written checkpoint that the restarted job then fails on, or resumes
from without its optimizer state.  Here the release's own ``_save_checkpoint`` writes into a
hidden folder beside (``.checkpoint-N.staging``, which neither ``get_last_checkpoint`` nor
the rotation matches); when every rank is done, each node's first process renames it into
place, one rename, and the release's rotation then runs on the real folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ._api import load

__all__ = ["save_staged"]

_STATE = "trainer_state.json"


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save_staged(trainer: Any, save: Callable[[], None], trial: Any) -> None:
    """Run ``save`` (the release's ``_save_checkpoint``) into a staging folder, then commit it."""
    args = trainer.args
    if getattr(args, "push_to_hub", False) or not callable(getattr(trainer, "_get_output_dir", None)):
        save()  # a hub push reads the folder after the method returns: leave the release's paths alone
        return
    run_dir = trainer._get_output_dir(trial=trial)
    name = f"checkpoint-{trainer.state.global_step}"
    staging, final = os.path.join(run_dir, f".{name}.staging"), os.path.join(run_dir, name)
    first_on_node = int(getattr(args, "local_process_index", 0)) == 0
    if first_on_node and os.path.isdir(staging):
        shutil.rmtree(staging, ignore_errors=True)  # what a save that died left of itself (another node may too)
    _barrier()
    trainer._get_output_dir = lambda trial=None: staging  # this call only: the instance attribute goes below
    try:
        save()
    finally:
        del trainer._get_output_dir
    best = trainer.state.best_model_checkpoint
    if isinstance(best, str) and best.startswith(staging):
        trainer.state.best_model_checkpoint = run_dir + best[len(staging):]
        if args.should_save:  # the state the release just wrote names the staging folder
            trainer.state.save_to_json(os.path.join(staging, name, _STATE))
    _barrier()  # every rank's files are in
    if first_on_node and os.path.isdir(os.path.join(staging, name)):
        _commit(os.path.join(staging, name), final)
        with contextlib.suppress(OSError):
            os.rmdir(staging)
    _barrier()
    if args.should_save:
        _rotate(trainer, run_dir)


def _commit(new: str, final: str) -> None:
    """Rename ``new`` to ``final``; a folder already there for the same step (the release would
    have written over it) is moved aside first and removed after.

    On a filesystem the nodes share, every node's first process commits the same folder: the
    one whose rename finds ``new`` gone puts back what it moved aside (the other's commit, or
    a stale folder the commit now replaces, which goes)."""
    old = None
    if os.path.isdir(final):
        old = f"{os.path.dirname(final)}/.{os.path.basename(final)}.replaced"
        shutil.rmtree(old, ignore_errors=True)
        try:
            os.rename(final, old)
        except FileNotFoundError:  # another node moved it aside first
            old = None
    try:
        os.rename(new, final)
    except FileNotFoundError:  # another node's process committed it first
        if old is not None:
            with contextlib.suppress(OSError):  # final is there again if old was the stale one
                os.rename(old, final)
            shutil.rmtree(old, ignore_errors=True)
        return
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _rotate(trainer: Any, run_dir: str) -> None:
    """The release's own ``save_total_limit`` rotation, which ran on the staging folder."""
    args = trainer.args
    if getattr(args, "save_total_limit", None) is None:
        return
    if callable(getattr(trainer, "_rotate_checkpoints", None)):  # up to 4.5x
        trainer._rotate_checkpoints(use_mtime=False, output_dir=run_dir)
        return
    rotate = getattr(load("transformers.trainer_utils"), "rotate_checkpoints", None)
    if rotate is not None:
        rotate(output_dir=run_dir, save_total_limit=args.save_total_limit,
               best_model_checkpoint=trainer.state.best_model_checkpoint, use_mtime=False)
