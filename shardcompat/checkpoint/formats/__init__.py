"""Readers for checkpoints other tools wrote, and shardcompat's own, behind one description.

Each format has one module exporting ``READER`` (the :class:`._base.Reader` protocol): it
recognises its checkpoints from the files themselves (never from a folder's name) and
describes them (:class:`._base.Description`: parameters by name, optimizer state, world size,
backend, step, and one line per missing or inconsistent thing) without loading tensors.  The
registry below is tried in order; the first reader whose ``detect`` is true reads the path.

Files from elsewhere are untrusted: nothing is unpickled but by ``torch.load(weights_only=True)``
or (DCP's ``.metadata``) a restricted unpickler of DCP's own classes; no path in an index or
metadata may leave the folder; declared sizes are checked against the files before allocating.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from ._base import Description, Entry, FormatError, Reader
from .dcp import READER as DCP
from .huggingface import READER as HUGGINGFACE
from .native import READER as NATIVE
from .optimizer import READER as OPTIMIZER
from .optimizer import names_for_indices

__all__ = ["DCP", "HUGGINGFACE", "NATIVE", "OPTIMIZER", "READERS", "Description", "Entry", "FormatError", "Reader", "describe", "detect", "names_for_indices", "tensors"]

READERS: tuple[Reader, ...] = (NATIVE, DCP, HUGGINGFACE, OPTIMIZER)  # shardcompat's own first: it holds DCP files too


def detect(path: str | Path) -> Reader:
    """The reader of the checkpoint at ``path``, or :class:`FormatError` saying what is readable."""
    where = Path(path)
    if not where.exists():
        raise FormatError(f"{where}: no such file or folder")
    for reader in READERS:
        try:
            if reader.detect(where):
                return reader
        except OSError as error:
            raise FormatError(f"{where}: cannot be read ({type(error).__name__}: {error})") from None
    raise FormatError(
        f"{where}: not a checkpoint of a format shardcompat reads ({', '.join(r.name for r in READERS)}): "
        "give a shardcompat checkpoint, a DCP folder (.metadata), a Hugging Face folder (model.safetensors, "
        "pytorch_model.bin, their *.index.json, trainer_state.json) or an optimizer state file"
    )


def describe(path: str | Path) -> Description:
    """What the checkpoint at ``path`` holds (:class:`FormatError`, one line naming the file, if unreadable)."""
    return detect(path).describe(Path(path))


def tensors(path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """The model tensors of the checkpoint at ``path`` by parameter name, one at a time."""
    where = Path(path)
    return detect(where).tensors(where)
