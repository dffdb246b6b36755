"""torch distributed-checkpoint (DCP) folders: ``.metadata`` and ``__<rank>_<n>.distcp`` files.

What FSDP1 ``SHARDED_STATE_DICT``, FSDP2 / ``dcp.save``, Accelerate's ``pytorch_model_fsdp_0/``
and Lightning's sharded checkpoints write.  The ``.metadata`` is read by shardcompat's
restricted unpickler (:mod:`.._dcp_metadata`: only DCP's own classes, every shard file inside
the folder); it declares every tensor's global shape, dtype and chunks, so describing the
folder reads no tensor.  Before anything is allocated, every chunk's byte range must lie in its
file and hold at least the chunk's declared size.  Tensors are read through DCP's
``FileSystemReader`` (``torch.load(weights_only=True)`` per chunk) wrapped by
:class:`.._dcp_metadata.SafeReader`, which also reads the non-tensor entries with
``weights_only``: nothing is unpickled unrestricted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from .._common import CheckpointError
from .._dcp_metadata import METADATA, read_metadata
from ._base import Description, Entry, FormatError

__all__ = ["READER", "split_key"]

_SHARD = re.compile(r"__(\d+)_(\d+)\.distcp")


def split_key(key: str, planner_data: Any) -> tuple[str, ...]:
    """The path a flattened DCP key came from (``("model", "inp.weight")``), by the save
    planner's own record where it kept one, else ``(key,)``."""
    path = planner_data.get(key) if isinstance(planner_data, Mapping) else None
    if isinstance(path, tuple) and path and all(isinstance(p, (str, int)) for p in path):
        return tuple(str(p) for p in path)
    return (key,)


def _numel(size: Any) -> int:
    count = 1
    for n in size:
        count *= int(n)
    return count


def _sizes(root: Path, storage: Mapping[Any, Any]) -> tuple[dict[str, int], list[str]]:
    """Bytes stored per key, and one line per chunk that does not lie in its file."""
    stored: dict[str, int] = {}
    problems: list[str] = []
    sizes: dict[str, int | None] = {}
    for index, info in storage.items():
        rel = info.relative_path
        if rel not in sizes:
            file = root / rel
            sizes[rel] = file.stat().st_size if file.is_file() else None
        size = sizes[rel]
        if size is not None and (info.offset < 0 or info.length < 0 or info.offset + info.length > size):
            problems.append(f"{rel}: the chunk of {index.fqn!r} ends at byte {info.offset + info.length}, the file has {size} (truncated)")
        stored[index.fqn] = stored.get(index.fqn, 0) + max(info.length, 0)
    return stored, problems


class _DCP:
    name = "torch-dcp"
    title = "torch distributed checkpoint (DCP) folder"

    def detect(self, path: Path) -> bool:
        file = path / METADATA
        if not path.is_dir() or file.is_symlink():  # a link is DCP's name: describe refuses it
            return path.is_dir()
        if not file.is_file():
            return False
        with file.open("rb") as handle:
            return handle.read(1) == b"\x80"  # a pickle (protocol 2 or later), as DCP writes it

    def describe(self, path: Path) -> Description:
        meta = read_metadata(path)  # restricted, checked: CheckpointError naming .metadata
        out = Description(self.name, self.title, str(path), files=[METADATA])
        storage = meta.storage_data
        files = sorted({info.relative_path for info in storage.values()})
        out.files += files
        ranks = sorted({int(m.group(1)) for f in files if (m := _SHARD.fullmatch(f))})
        if ranks:
            out.world_size = max(ranks) + 1
            out.world_size_from = f"shard files of ranks {ranks[0]}..{ranks[-1]}" if len(ranks) > 1 else "one shard file"
            absent = sorted(set(range(out.world_size)) - set(ranks))
            if absent:
                out.missing.append(f"no shard file of rank(s) {', '.join(map(str, absent))} is named by the metadata")
        out.backend_from = "DCP does not record the writer (FSDP1, FSDP2, Accelerate and Lightning write alike)"
        for rel in files:
            if not (path / rel).is_file():
                out.missing.append(f"{rel}: a shard file the metadata names is not in the folder")
        stored, problems = _sizes(path, storage)
        out.inconsistent += problems
        model: dict[str, Entry] = {}
        optim: dict[str, dict[str, Entry]] = {}
        groups: set[str] = set()
        other: list[str] = []
        for key, entry in meta.state_dict_metadata.items():
            parts = split_key(key, meta.planner_data)
            if not isinstance(entry, TensorStorageMetadata):  # bytes: parameter groups, counters
                if parts[:2] == ("optimizer", "param_groups") and len(parts) > 2:
                    groups.add(parts[2])
                else:
                    other.append(".".join(parts))
                continue
            dtype = str(entry.properties.dtype).removeprefix("torch.")
            item = torch.empty((), dtype=entry.properties.dtype).element_size()
            nbytes = _numel(entry.size) * item
            declared = sum(_numel(c.sizes) for c in entry.chunks) * item
            if declared > stored.get(key, 0) or any(
                o < 0 or s < 0 or o + s > g for c in entry.chunks for o, s, g in zip(c.offsets, c.sizes, entry.size)
            ):
                out.inconsistent.append(
                    f"{METADATA}: {key!r} declares {declared} bytes in chunks of shape {list(entry.size)}, its shards hold {stored.get(key, 0)}"
                )
            file = ",".join(sorted({storage[i].relative_path for i in storage if i.fqn == key}))
            e = Entry(tuple(entry.size), dtype, nbytes, file)
            if parts[0] == "model" and len(parts) == 2:
                model[parts[1]] = e
            elif parts[:2] == ("optimizer", "state") and len(parts) == 4:
                optim.setdefault(parts[2], {})[parts[3]] = e
            elif len(parts) == 1 and not key.startswith("optimizer."):
                model[key] = e  # dcp.save(model.state_dict()): the names themselves
            else:
                other.append(".".join(parts))
        out.parameters = model
        if optim or groups:
            out.optimizer, out.optimizer_groups = optim, len(groups)
            for name in sorted(set(model) - set(optim)):
                out.missing.append(f"optimizer state of {name!r} (its parameter is here)")
            for name in sorted(set(optim) - set(model)) if model else ():
                out.inconsistent.append(f"optimizer state of {name!r}, a parameter this checkpoint does not hold")
            for name in sorted(set(optim) & set(model)):
                for k, v in optim[name].items():
                    if v.shape and v.shape != model[name].shape:
                        out.inconsistent.append(f"optimizer state {name}.{k} has shape {list(v.shape)}, the parameter {list(model[name].shape)}")
        if other:
            out.notes.append(f"{len(other)} other entries ({', '.join(sorted(other)[:3])}{', ...' if len(other) > 3 else ''})")
        return out

    def tensors(self, path: Path) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's tensors, read whole in this process (DCP joins the chunks into them)."""
        from .._sharded import _read  # the restricted reader over DCP's own loader

        described = self.describe(path)
        damaged = described.inconsistent + [m for m in described.missing if "shard file" in m]
        if damaged:  # before DCP allocates what the metadata declares
            raise FormatError(f"{path}: {damaged[0]}")
        meta = read_metadata(path)
        nested = any(split_key(k, meta.planner_data)[0] == "model" for k in meta.state_dict_metadata)
        try:
            state = _read(path, "model") if nested else _read(path)  # the optimizer's shards stay unread
        except CheckpointError as error:
            raise FormatError(str(error)) from None
        flat: dict[str, Any] = state["model"] if nested else state
        for name in described.parameters:
            if isinstance(flat.get(name), torch.Tensor):
                yield name, flat[name]


READER = _DCP()
