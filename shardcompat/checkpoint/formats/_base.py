"""What every reader returns (:class:`Description`) and the safe ways they open files.

A checkpoint from elsewhere is untrusted: a file is opened only through :func:`inside` (a
plain relative path, no link on the way, a regular file), unpickled only by
``torch.load(weights_only=True)`` (:func:`load_safe`), and JSON is read with a size limit.
Every failure is a :class:`FormatError`: one line that names the file.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from ..._atomic import CorruptDirectory, contained
from .._common import CheckpointError, one_line

__all__ = [
    "Description",
    "Entry",
    "FormatError",
    "Reader",
    "entry_of",
    "inside",
    "load_safe",
    "read_json",
]

_JSON_LIMIT = 64 << 20  # an index or state file larger than this is not one a trainer wrote


class FormatError(CheckpointError):
    """A file of a checkpoint from elsewhere cannot be read safely; one line names the file."""


@dataclass(frozen=True)
class Entry:
    """One tensor as its file declares it (nothing allocated to know this)."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    file: str  # relative to the checkpoint folder

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "bytes": self.nbytes, "file": self.file}


@dataclass
class Description:
    """One checkpoint of any format, as ``shardcompat checkpoint inspect`` shows it.

    ``parameters`` are keyed by the model's parameter names; ``optimizer`` by parameter name,
    or by parameter index (``optimizer_keys == "index"``, as torch optimizers, ZeroRedundancy
    Optimizer and fairscale OSS save it: :func:`..optimizer.names_for_indices` maps them
    through the parameter order).  ``missing`` and ``inconsistent`` hold one line per thing.
    """

    format: str
    title: str
    path: str
    world_size: int | None = None
    world_size_from: str = ""
    backend: str | None = None
    backend_from: str = ""
    step: int | None = None
    parameters: dict[str, Entry] = field(default_factory=dict)
    optimizer: dict[str, dict[str, Entry]] | None = None
    optimizer_keys: str = "name"
    optimizer_groups: int | None = None
    scalars: dict[str, str] = field(default_factory=dict)  # e.g. "scheduler": "scheduler.pt"
    files: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def parameter_bytes(self) -> int:
        return sum(e.nbytes for e in self.parameters.values())

    @property
    def optimizer_bytes(self) -> int:
        return sum(e.nbytes for state in (self.optimizer or {}).values() for e in state.values())

    @property
    def total_bytes(self) -> int:
        return self.parameter_bytes + self.optimizer_bytes

    def dtypes(self) -> list[str]:
        return sorted({e.dtype for e in self.parameters.values()})

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["parameters"] = {n: e.to_json() for n, e in self.parameters.items()}
        if self.optimizer is not None:
            body["optimizer"] = {n: {k: e.to_json() for k, e in s.items()} for n, s in self.optimizer.items()}
        body.update(
            dtypes=self.dtypes(), parameter_bytes=self.parameter_bytes, optimizer_bytes=self.optimizer_bytes,
            total_bytes=self.total_bytes,
        )
        return body

    def lines(self) -> list[str]:
        """The human report: a header, the tables, then one line per missing or inconsistent thing."""
        ws = "unknown" if self.world_size is None else str(self.world_size)
        out = [f"{self.path}: {self.title} [{self.format}]"]
        out.append(f"  world size: {ws}{f' ({self.world_size_from})' if self.world_size_from else ''}")
        backend = self.backend or "not recorded"
        out.append(f"  backend: {backend}{f' ({self.backend_from})' if self.backend_from else ''}")
        out.append(f"  step: {'unknown' if self.step is None else self.step}")
        out.append(
            f"  parameters: {len(self.parameters)} tensors, {', '.join(self.dtypes()) or 'no dtype'}, "
            f"{self.parameter_bytes:,} bytes"
        )
        width = max((len(n) for n in self.parameters), default=0)
        for name, e in self.parameters.items():
            out.append(f"    {name:<{width}}  {list(e.shape)}  {e.dtype}  {e.file}")
        if self.optimizer is None:
            out.append("  optimizer state: none")
        else:
            keys = sorted({k for s in self.optimizer.values() for k in s})
            groups = "" if self.optimizer_groups is None else f", {self.optimizer_groups} group(s)"
            out.append(
                f"  optimizer state: keyed by parameter {self.optimizer_keys}, {len(self.optimizer)} parameters, "
                f"keys {', '.join(keys) or 'none'}{groups}, {self.optimizer_bytes:,} bytes"
            )
        for what, where in sorted(self.scalars.items()):
            out.append(f"  {what}: {where}")
        out.append(f"  total: {self.total_bytes:,} bytes of tensors in {len(self.files)} files")
        out += [f"  missing: {m}" for m in self.missing]
        out += [f"  inconsistent: {m}" for m in self.inconsistent]
        out += [f"  note: {m}" for m in self.notes]
        return out


class Reader(Protocol):
    """One checkpoint format: recognised from its files, described without loading tensors."""

    name: str
    title: str

    def detect(self, path: Path) -> bool: ...

    def describe(self, path: Path) -> Description: ...

    def tensors(self, path: Path) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's tensors by parameter name, one at a time."""
        ...


def inside(root: Path, rel: str) -> Path:
    """``root / rel`` if ``rel`` is a plain relative path reaching a regular file of ``root``
    through no symbolic link; else :class:`FormatError` naming it."""
    try:
        file = contained(root, rel)
    except CorruptDirectory as error:
        raise FormatError(one_line(f"{root}: {error}")) from None
    if not file.is_file():
        raise FormatError(f"{file}: {'not a regular file' if file.exists() else 'missing'}")
    return file


def read_json(file: Path) -> Any:
    """A JSON file, bounded in size, as one-line :class:`FormatError` when it is not JSON."""
    try:
        size = file.stat().st_size
        if size > _JSON_LIMIT:
            raise ValueError(f"{size} bytes, more than a checkpoint's JSON file holds ({_JSON_LIMIT})")
        return json.loads(file.read_bytes())
    except (OSError, ValueError, RecursionError) as error:
        raise FormatError(one_line(f"{file} cannot be read as JSON ({type(error).__name__}: {error})")) from None


def load_safe(file: Path, allow: Iterable[Any] = ()) -> Any:
    """``torch.load(file, weights_only=True)``, memory-mapped where the file and torch allow
    (tensors are then not read until used); ``allow``: extra globals the format needs (none by
    default; a torch without ``safe_globals`` allows none)."""
    allowed = list(allow)
    scope = getattr(torch.serialization, "safe_globals", None)
    try:
        with scope(allowed) if scope is not None and allowed else contextlib.nullcontext():
            try:
                return torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            except TypeError as error:  # a torch before 2.1 has no mmap
                if "mmap" not in str(error):
                    raise
            except RuntimeError as error:  # the legacy, non-zip format cannot be mapped
                if "mmap" not in str(error) and "zip" not in str(error):
                    raise
            return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:
        raise FormatError(one_line(f"{file} cannot be read safely ({type(error).__name__}: {error})")) from None


def entry_of(tensor: torch.Tensor, file: str) -> Entry:
    dtype = str(tensor.dtype).removeprefix("torch.")
    return Entry(tuple(tensor.shape), dtype, tensor.numel() * tensor.element_size(), file)


def relative(root: Path, file: Path) -> str:
    return os.path.relpath(file, root) if root.is_dir() else file.name
