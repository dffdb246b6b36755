"""``trainer.train(resume_from_checkpoint=FOLDER)`` where FOLDER holds a model, not a Trainer checkpoint.

The 4.x examples pass ``model_args.model_name_or_path`` there when it is a local folder
(``run_glue.py`` of 4.3-4.5, ``run_speech_recognition_ctc.py`` and ``run_mlm_wwm.py`` up to
4.30).  4.x read the folder's ``trainer_state.json`` only when it had one: without it, it loaded
the weights and trained from a fresh state.  From 4.36, ``train()`` reads it unconditionally
(FileNotFoundError), and a sharded run resumes only from its portable checkpoint.  The Trainer
drop-in serves such a folder as 4.x did: its weights, then a fresh start.  4.2's run_glue passed
the folder as ``trainer.train(model_path=...)``, which 4.3-4.x took as ``resume_from_checkpoint``
and 5.0 removed: served so too.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

__all__ = ["MODEL_PATH", "STATE", "message", "release_requires_state", "weights_folder"]

#: What makes a folder a Trainer checkpoint (the release's ``TRAINER_STATE_NAME``).
STATE = "trainer_state.json"
#: ``trainer.train(model_path=...)``, 4.2's spelling (4.2's run_glue passed its model folder).
MODEL_PATH = ("trainer.train(model_path=...) is Transformers 4.x API (4.2's name for resume_from_checkpoint; "
              "4.3-4.x took it with a warning, 5.0 removed it); shardcompat takes it as resume_from_checkpoint=. "
              "Write resume_from_checkpoint=")


def release_requires_state(train: Any) -> bool:
    """Whether the release's ``Trainer.train`` reads the state of every folder it resumes from
    (4.36 and later did; 4.x read it in the training loop, only where the file was)."""
    try:
        source = inspect.getsource(train)
    except (OSError, TypeError):
        return True
    return "TRAINER_STATE_NAME" in source


def weights_folder(resume_from_checkpoint: Any) -> str | None:
    """The folder ``resume_from_checkpoint`` names when it holds a model and nothing of a Trainer
    checkpoint, else None.  A checkpoint that lost its state (a save cut short) is left to the
    release, which says the state is missing: starting it fresh would silently drop its step."""
    if isinstance(resume_from_checkpoint, bool) or not isinstance(resume_from_checkpoint, (str, os.PathLike)):
        return None
    folder = os.fspath(resume_from_checkpoint)
    if not os.path.isdir(folder):
        return None
    from ._model import CHECKPOINT_DIR  # here: the migrate rule imports this module without torch

    # the state, the optimizer, the scheduler, the RNG states, a sharded run's portable checkpoint
    marks = (STATE, "optimizer.pt", "optimizer.bin", "scheduler.pt", CHECKPOINT_DIR)
    if any(name in marks or (name.startswith("rng_state") and name.endswith(".pth")) for name in os.listdir(folder)):
        return None
    return folder


def message(folder: str) -> str:
    """The once-only warning where the release would have raised."""
    return (f"trainer.train(resume_from_checkpoint={folder!r}): the folder has no {STATE}, so it holds a model, "
            "not a Trainer checkpoint. Transformers 4.x then loaded its weights and trained from a fresh state, "
            "as shardcompat does here; today's release raises FileNotFoundError. Build the model from that folder "
            "(from_pretrained) and pass resume_from_checkpoint=None, or resume only a folder that has "
            f"{STATE}")
