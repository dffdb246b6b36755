"""The safetensors layout, read here without the ``safetensors`` package (not a dependency).

A file is an 8-byte little-endian header length, a JSON header ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {...}}`` and the tensors' bytes.  Everything
the header declares is checked against the file's real size before anything is allocated:
the header fits, every tensor's byte range is exactly its shape times its dtype's size and
lies inside the file, and no two ranges overlap.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from .._common import one_line
from ._base import Entry, FormatError

__all__ = ["DTYPES", "header", "read_tensor", "sniff"]

_HEADER_LIMIT = 100 << 20  # the safetensors specification's own bound on the header
DTYPES: dict[str, tuple[str, int]] = {
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1), "U8": ("uint8", 1),
    "BOOL": ("bool", 1), "U16": ("uint16", 2), "U32": ("uint32", 4), "U64": ("uint64", 8),
    "F8_E4M3": ("float8_e4m3fn", 1), "F8_E5M2": ("float8_e5m2", 1),
}


def sniff(file: Path) -> bool:
    """Whether ``file`` starts like a safetensors file (a plausible length, then ``{``)."""
    try:
        with file.open("rb") as handle:
            start = handle.read(9)
    except OSError:
        return False
    if len(start) < 9:
        return False
    return 2 <= int.from_bytes(start[:8], "little") <= _HEADER_LIMIT and start[8:9] == b"{"


def header(file: Path, rel: str) -> tuple[dict[str, Entry], dict[str, tuple[int, int]], dict[str, Any]]:
    """``({name: Entry}, {name: (begin, end) absolute in the file}, __metadata__)``, checked."""
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ValueError(f"it has {len(prefix)} bytes, fewer than a safetensors header length")
            length = int.from_bytes(prefix, "little")
            if length > _HEADER_LIMIT or 8 + length > size:
                raise ValueError(f"its header declares {length} bytes, the file has {size} (truncated or not safetensors)")
            raw = handle.read(length)
        body = json.loads(raw)
    except (OSError, ValueError, RecursionError) as error:
        raise FormatError(one_line(f"{file} is not a readable safetensors file: {error}")) from None
    if not isinstance(body, dict):
        raise FormatError(f"{file} is not a readable safetensors file: its header is not a JSON object")
    meta = body.pop("__metadata__", None) or {}
    start = 8 + length
    entries: dict[str, Entry] = {}
    spans: dict[str, tuple[int, int]] = {}
    for name, info in body.items():
        entry, span = _entry(file, rel, name, info, size - start)
        entries[name] = entry
        spans[name] = (start + span[0], start + span[1])
    previous_end, previous = 0, ""
    for name, (begin, end) in sorted(spans.items(), key=lambda kv: kv[1]):
        if begin < previous_end:
            raise FormatError(f"{file}: the bytes of {name!r} overlap those of {previous!r}: the header is damaged")
        previous_end, previous = max(previous_end, end), name
    return entries, spans, meta if isinstance(meta, dict) else {}


def _entry(file: Path, rel: str, name: str, info: Any, room: int) -> tuple[Entry, tuple[int, int]]:
    bad = f"{file}: the header's entry {name[:80]!r}"
    if not isinstance(info, dict):
        raise FormatError(f"{bad} is not a tensor description")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPES:
        raise FormatError(f"{bad} has dtype {str(dtype)[:20]!r}, not one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise FormatError(f"{bad} has a shape that is not a list of sizes")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int and n >= 0 for n in offsets)):
        raise FormatError(f"{bad} has no [begin, end] byte offsets")
    begin, end = offsets
    nbytes = math.prod(shape) * DTYPES[dtype][1]
    if end - begin != nbytes:
        raise FormatError(f"{bad} declares shape {shape} of {dtype} ({nbytes} bytes) in {end - begin} bytes")
    if end > room:
        raise FormatError(f"{bad} ends at byte {end} of a {room}-byte data section (truncated)")
    return Entry(tuple(shape), DTYPES[dtype][0], nbytes, rel), (begin, end)


def read_tensor(file: Path, entry: Entry, span: tuple[int, int]) -> torch.Tensor:
    """One tensor of a checked header, read alone (little-endian, as the format stores it)."""
    begin, end = span
    with file.open("rb") as handle:
        handle.seek(begin)
        data = bytearray(handle.read(end - begin))
    if len(data) != end - begin:
        raise FormatError(f"{file}: {entry.file} ends inside {entry.shape} (truncated)")
    dtype = getattr(torch, entry.dtype, None)
    if dtype is None:
        raise FormatError(f"{file}: this torch has no dtype {entry.dtype}: upgrade torch to read it")
    if not data:
        return torch.empty(entry.shape, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype).reshape(entry.shape)
