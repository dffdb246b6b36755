"""Reading a torch distributed checkpoint (DCP) without running anything it holds.

DCP's ``.metadata`` is a pickle, and torch's ``FileSystemReader.read_metadata`` unpickles it
with the full unpickler, so a ``.metadata`` from elsewhere can run any code on load.  Here it
is unpickled by :class:`_MetadataUnpickler`, which builds only the classes DCP itself writes
there, listed mechanically from torch's own modules (:func:`allowed_globals`); anything else is
refused before it runs.  The shards' non-tensor entries (parameter groups, ints) are pickles
too, which DCP's planners load with ``weights_only=False``: :class:`SafeReader` hands them to the
planner only after ``torch.load(weights_only=True)`` read them, re-serialised from what it
built.  Every file the metadata names must be a plain file inside the checkpoint folder.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import pathlib
import pickle
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, cast

import torch
from torch.distributed.checkpoint import filesystem, metadata
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadPlanner

from .._atomic import CorruptDirectory, contained
from ._common import CheckpointError, one_line

__all__ = ["DCP_ERRORS", "METADATA", "SafeReader", "allowed_globals", "read_metadata", "reason"]

METADATA = ".metadata"
DCP_ERRORS = (Exception, CheckpointException)  # DCP wraps each rank's failure in a BaseException
_LIMIT = 1 << 30  # a .metadata larger than this is not one DCP wrote for a model that fits here


@cache
def allowed_globals() -> Mapping[tuple[str, str], Any]:
    """``{(module, name): object}`` that a ``.metadata`` may name: the dataclasses and enums of
    DCP's ``metadata`` and ``filesystem`` modules, ``torch.Size``, the dtypes, the layouts (by
    torch's own ``_get_layout``) and the path classes a checkpoint id is saved as."""
    allowed: dict[tuple[str, str], Any] = {}
    for module in (metadata, filesystem):
        for name, value in vars(module).items():
            ours = isinstance(value, type) and value.__module__ == module.__name__
            if ours and (dataclasses.is_dataclass(value) or issubclass(value, enum.Enum)):
                allowed[module.__name__, name] = value
    allowed["torch", "Size"] = torch.Size
    allowed.update({("torch", n): v for n, v in vars(torch).items() if isinstance(v, torch.dtype)})
    get_layout = torch.serialization._get_layout  # what torch pickles a layout as (copyreg)
    allowed[get_layout.__module__, get_layout.__name__] = get_layout
    for cls in (pathlib.PosixPath, pathlib.WindowsPath, pathlib.PurePosixPath, pathlib.PureWindowsPath):
        allowed[cls.__module__, cls.__name__] = cls
    return allowed


class _MetadataUnpickler(pickle.Unpickler):
    """An unpickler that knows only :func:`allowed_globals` (no persistent ids, no others)."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return allowed_globals()[module, name]
        except KeyError:
            raise pickle.UnpicklingError(
                f"it names {module}.{name}, which torch does not write in a checkpoint's metadata"
            ) from None


def read_metadata(folder: str | Path) -> Metadata:
    """The DCP metadata of ``folder``, unpickled with only DCP's own classes allowed and checked
    (types, and every shard file a plain file inside ``folder``); :class:`CheckpointError`,
    one line naming the file, for anything else, before any of it runs."""
    root = Path(folder)
    file = root / METADATA
    try:
        contained(root, METADATA)
        size = file.stat().st_size
        if size > _LIMIT:
            raise ValueError(f"it is {size} bytes, more than DCP writes ({_LIMIT})")
        with file.open("rb") as handle:
            loaded = _MetadataUnpickler(handle).load()
        _check(root, loaded)
    except (CorruptDirectory, OSError, ValueError, pickle.UnpicklingError, EOFError, TypeError, AttributeError,
            IndexError, KeyError, RecursionError, MemoryError) as error:
        raise CheckpointError(one_line(f"{file} cannot be read as DCP metadata: {_reason(error)}")) from None
    assert isinstance(loaded, Metadata)
    return loaded


def _reason(error: BaseException) -> str:
    return str(error) if isinstance(error, (ValueError, pickle.UnpicklingError)) else f"{type(error).__name__}: {error}"


def _check(root: Path, loaded: object) -> None:
    """What the readers rely on: the metadata's types, and shard files that stay in ``root``."""
    if not isinstance(loaded, Metadata):
        raise ValueError(f"it holds a {type(loaded).__name__}, not DCP's Metadata")
    entries = loaded.state_dict_metadata
    kinds = (metadata.TensorStorageMetadata, metadata.BytesStorageMetadata)
    if not isinstance(entries, dict) or not all(isinstance(k, str) and isinstance(v, kinds) for k, v in entries.items()):
        raise ValueError("its state_dict_metadata is not {name: tensor or bytes entry}")
    storage = loaded.storage_data
    if not isinstance(storage, dict):
        raise ValueError("it has no storage table")
    files = set()
    for key, info in storage.items():
        if not isinstance(key, metadata.MetadataIndex) or not isinstance(info, filesystem._StorageInfo):
            raise ValueError("its storage table is not {index: file, offset, length}")
        if not isinstance(info.relative_path, str) or not all(isinstance(n, int) for n in (info.offset, info.length)):
            raise ValueError(f"its storage entry for {key.fqn!r} is damaged")
        files.add(info.relative_path)
    for rel in sorted(files):
        contained(root, rel)


class _BytesChecked:
    """A load planner whose ``load_bytes`` receives only what ``weights_only`` could read."""

    def __init__(self, planner: Any, root: Path) -> None:
        self._planner, self._root = planner, root

    def __getattr__(self, name: str) -> Any:
        return getattr(self._planner, name)

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            safe = torch.load(value, map_location="cpu", weights_only=True)
        except Exception as error:
            raise CheckpointError(
                one_line(f"{self._root}: the entry {fqn!r} cannot be read safely ({type(error).__name__}: {error})")
            ) from None
        clean = io.BytesIO()
        torch.save(safe, clean)
        clean.seek(0)
        self._planner.load_bytes(read_item, clean)


class SafeReader(FileSystemReader):
    """DCP's file-system reader with :func:`read_metadata`'s restricted, checked metadata and
    ``weights_only`` for every entry: the only reader shardcompat loads DCP shards with.

    The metadata is read (and refused, as :class:`CheckpointError`) when the reader is made,
    before DCP runs: DCP would catch a refusal, log it with a traceback and retry per-rank
    metadata files, which shardcompat never reads.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._root = Path(path)
        self._metadata = read_metadata(self._root)

    # No ``**kwargs``: DCP asks a reader whose signature has them for per-rank metadata.
    def read_metadata(self) -> Metadata:  # type: ignore[override]
        loaded = self._metadata
        if loaded.storage_meta is None:
            loaded.storage_meta = metadata.StorageMeta()
        loaded.storage_meta.load_id = self.load_id
        return loaded

    def read_data(self, plan: Any, planner: Any) -> Any:
        return super().read_data(plan, cast(LoadPlanner, _BytesChecked(planner, self._root)))  # a stand-in by delegation


def reason(error: BaseException) -> str:
    """What failed inside a DCP call: this module's refusal where DCP wrapped one, else the error."""
    failures = error.failures.values() if isinstance(error, CheckpointException) else ()
    inner = [exc for exc, _ in failures]
    return str(next((e for e in inner if isinstance(e, CheckpointError)), inner[0] if inner else error))
