"""Refusals: shardcompat's own answer to input it will not run, reported once, in one message.

A refusal (a bad option string, an optimizer a backend cannot shard, a checkpoint that does
not fit, a Trainer argument that shards another way) is raised before training, with the
input it names and what to do instead.  The commands that start ranks (``shardcompat train``,
``shardcompat run``) print it once, from global rank 0 or from the parent that started the
ranks, without a traceback, and exit 2 as argparse does for a bad option.  Anything else a
rank raises is a crash and keeps its traceback.

What makes an error a refusal is its class: one that shardcompat defines for input it
refuses, a ``ValueError`` (every error class of the option grammar, the backends,
``prepare``, checkpoints, ``--resume`` and the Trainer integration is one) or the facade's
``ImportError`` / ``AttributeError`` for a name it does not serve.  A ``ValueError`` that
torch, Transformers or the user's own code raises is not shardcompat's word on its input:
it stays a crash.
"""

from __future__ import annotations

import os
import re

__all__ = ["EXIT_CODE", "FOLDER_ENV", "is_refusal", "read_refusal", "write_refusal"]

EXIT_CODE = 2  # what argparse exits with for a bad option, and what the commands exit with for a refusal
FOLDER_ENV = "SHARDCOMPAT_REFUSAL_DIR"  # where ranks leave a refusal for the parent that started them
_NAME = re.compile(r"refusal-([0-9]+)\.txt", re.ASCII)


def is_refusal(error: BaseException) -> bool:
    """Whether ``error`` is one of shardcompat's refusals (see the module's docstring)."""
    module = type(error).__module__ or ""
    ours = module == "shardcompat" or module.startswith("shardcompat.")
    return ours and isinstance(error, (ValueError, ImportError, AttributeError))


def write_refusal(folder: str, rank: int, text: str) -> None:
    """Leave ``text`` for the parent as ``refusal-<rank>.txt``, complete or not at all."""
    final = os.path.join(folder, f"refusal-{rank}.txt")
    partial = final + ".tmp"
    with open(partial, "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(partial, final)


def read_refusal(folder: str) -> str | None:
    """The refusal of the lowest rank that left one in ``folder`` (rank 0's where it refused), else None."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    ranks = sorted(int(found.group(1)) for found in map(_NAME.fullmatch, names) if found)
    for rank in ranks:
        try:
            with open(os.path.join(folder, f"refusal-{rank}.txt"), encoding="utf-8") as file:
                return file.read()
        except OSError:
            continue
    return None
