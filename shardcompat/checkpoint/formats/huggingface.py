"""Hugging Face folders: ``save_pretrained`` output and Trainer ``checkpoint-N/`` folders.

Weights are ``model.safetensors`` or ``pytorch_model.bin``, or shards listed by their
``*.index.json`` (``{"metadata": {"total_size"}, "weight_map": {name: file}}``); a Trainer
checkpoint adds ``optimizer.pt`` (keyed by parameter index), ``scheduler.pt``,
``rng_state.pth`` / ``rng_state_<rank>.pth``, ``trainer_state.json`` and ``training_args.bin``
(a full pickle of the arguments, which is never read), and with ``--fsdp`` a DCP folder
``pytorch_model_fsdp_0/``.  Every file an index names must be a plain file of the folder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..._atomic import CorruptDirectory, contained
from .._common import one_line
from ._base import Description, Entry, FormatError, entry_of, inside, load_safe, read_json
from ._safetensors import header, read_tensor, sniff
from .dcp import READER as DCP
from .optimizer import describe_state

__all__ = ["READER", "weight_files"]

SAFE, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"
BIN, BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
OPTIMIZER, SCHEDULER, SCALER, STATE, ARGS = (
    "optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin",
)
_RNG = re.compile(r"rng_state(?:_(\d+))?\.pth")
_ZIP, _PICKLE = b"PK\x03\x04", b"\x80"


def _torch_file(file: Path) -> bool:
    with file.open("rb") as handle:
        start = handle.read(4)
    return start == _ZIP or start[:1] == _PICKLE


def weight_files(path: Path) -> tuple[str | None, list[str]]:
    """``(index file or None, weight files)`` of a folder, safetensors first as Transformers loads."""
    for index in (SAFE_INDEX, BIN_INDEX):
        if (path / index).exists() or (path / index).is_symlink():
            body = read_json(inside(path, index))
            weight_map = body.get("weight_map") if isinstance(body, dict) else None
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise FormatError(f"{path / index} has no weight_map of parameter names to file names")
            return index, sorted(set(weight_map.values()))
    for single in (SAFE, BIN):
        if (path / single).exists() or (path / single).is_symlink():
            return None, [single]
    return None, []


def _entries(path: Path, rel: str) -> dict[str, Entry]:
    file = inside(path, rel)
    if rel.endswith(".safetensors"):
        return header(file, rel)[0]
    state = load_safe(file)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise FormatError(f"{file} is not a model state (a mapping of names to tensors)")
    return {n: entry_of(t, rel) for n, t in state.items()}


class _HuggingFace:
    name = "huggingface"
    title = "Hugging Face folder"

    def detect(self, path: Path) -> bool:
        if path.is_file():
            return sniff(path)
        if not path.is_dir():
            return False
        for rel in (SAFE, SAFE_INDEX, BIN, BIN_INDEX, STATE):
            file = path / rel
            if file.is_file() and not file.is_symlink():
                if rel.endswith(".json"):
                    return file.stat().st_size < (64 << 20) and file.read_bytes()[:1] == b"{"
                return sniff(file) if rel == SAFE else _torch_file(file)
        return any(sniff(f) for f in path.glob("*.safetensors") if f.is_file() and not f.is_symlink())

    def describe(self, path: Path) -> Description:
        if path.is_file():  # one safetensors file
            if path.is_symlink():
                raise FormatError(f"{path} is a symbolic link: give the file itself")
            out = Description(self.name, "safetensors file", str(path), files=[path.name])
            out.parameters = header(path, path.name)[0]
            return out
        out = Description(self.name, self.title, str(path))
        index, files = weight_files(path)
        out.files += ([index] if index else []) + files
        if index is not None:
            self._indexed(path, index, out)
        elif files:
            out.parameters = _entries(path, files[0])
        else:
            out.missing.append(f"model weights ({SAFE}, {BIN} or an index of shards)")
        names = sorted(p.name for p in path.iterdir())
        if SAFE in names and BIN in names:
            out.notes.append(f"both {SAFE} and {BIN}: Transformers loads {SAFE}, and so does this")
        self._trainer(path, names, out)
        return out

    def _indexed(self, path: Path, index: str, out: Description) -> None:
        body = read_json(path / index)
        weight_map: dict[str, str] = body["weight_map"]
        found: dict[str, Entry] = {}
        for rel in sorted(set(weight_map.values())):
            place = _place(path, rel)  # refused when it leaves the folder, even if absent
            if not place.exists() and not place.is_symlink():
                listed = sum(1 for v in weight_map.values() if v == rel)
                out.missing.append(f"{rel}: a shard {index} names ({listed} tensors) is not in the folder")
                continue
            entries = _entries(path, rel)
            for name, entry in entries.items():
                if weight_map.get(name) == rel:
                    found[name] = entry
                else:
                    out.inconsistent.append(f"{rel} holds {name!r}, which {index} puts in {weight_map.get(name)!r}")
            for name in sorted(n for n, f in weight_map.items() if f == rel and n not in entries):
                out.missing.append(f"{name!r}: {index} puts it in {rel}, which does not hold it")
        out.parameters = {n: found[n] for n in weight_map if n in found}
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        total = meta.get("total_size")
        if isinstance(total, int) and not out.missing and total != out.parameter_bytes:
            out.inconsistent.append(f"{index} says total_size {total}, its shards hold {out.parameter_bytes} bytes")

    def _trainer(self, path: Path, names: list[str], out: Description) -> None:
        trainer = STATE in names
        if trainer:
            state = read_json(inside(path, STATE))
            step = state.get("global_step") if isinstance(state, dict) else None
            if type(step) is not int:
                raise FormatError(f"{path / STATE} is not a Trainer state (no whole-number global_step)")
            out.step, out.title = step, "Hugging Face Trainer checkpoint"
            out.files.append(STATE)
        if OPTIMIZER in names:
            describe_state(load_safe(inside(path, OPTIMIZER)), path / OPTIMIZER, OPTIMIZER, out)
            out.files.append(OPTIMIZER)
        elif trainer:
            out.missing.append(f"optimizer state ({OPTIMIZER}): a resume from here starts the optimizer fresh")
        for rel, what in ((SCHEDULER, "scheduler"), (SCALER, "gradient scaler")):
            if rel in names:
                _check_plain(load_safe(inside(path, rel)), path / rel)
                out.scalars[what] = rel
                out.files.append(rel)
            elif trainer and rel == SCHEDULER:
                out.missing.append(f"scheduler state ({SCHEDULER}): a resume starts the schedule over")
        ranks = sorted(int(m.group(1) or 0) for n in names if (m := _RNG.fullmatch(n)))
        if ranks:
            out.world_size = max(ranks) + 1
            out.world_size_from = "rng_state.pth" if "rng_state.pth" in names else f"rng_state_<rank>.pth of ranks {ranks[0]}..{ranks[-1]}"
            absent = sorted(set(range(out.world_size)) - set(ranks))
            if absent:
                out.missing.append(f"RNG state of rank(s) {', '.join(map(str, absent))} (rng_state_<rank>.pth)")
            out.scalars["rng"] = ", ".join(n for n in names if _RNG.fullmatch(n))
        elif trainer:
            out.missing.append("RNG state (rng_state*.pth): a resume draws fresh random numbers")
        if ARGS in names:
            out.notes.append(f"{ARGS} not read: it is a full pickle of TrainingArguments, and unpickling it could run code")
        out.backend_from = "Transformers does not record it in the checkpoint's files"
        for sub in names:
            if (path / sub).is_dir() and not (path / sub).is_symlink() and DCP.detect(path / sub):
                inner = DCP.describe(path / sub)
                if inner.parameters and not out.parameters:
                    out.parameters = {n: Entry(e.shape, e.dtype, e.nbytes, f"{sub}/{e.file}") for n, e in inner.parameters.items()}
                    out.missing = [m for m in out.missing if not m.startswith("model weights")]
                    out.world_size, out.world_size_from = inner.world_size, f"{sub}/ {inner.world_size_from}"
                out.notes.append(f"{sub}/ is a DCP folder ({len(inner.parameters)} tensors): inspect it for detail")
        if (path / "config.json").is_file() and not (path / "config.json").is_symlink():
            config = read_json(path / "config.json")
            if isinstance(config, dict) and isinstance(config.get("model_type"), str):
                archs = config.get("architectures") or []
                out.notes.append(f"config.json: model_type {config['model_type']}" + (f" ({', '.join(map(str, archs))})" if archs else ""))

    def tensors(self, path: Path) -> Iterator[tuple[str, torch.Tensor]]:
        if path.is_file():
            entries, spans, _ = header(path, path.name)
            for name, entry in entries.items():
                yield name, read_tensor(path, entry, spans[name])
            return
        index, files = weight_files(path)
        wanted = read_json(path / index)["weight_map"] if index else None
        for rel in files:
            file = inside(path, rel)
            if rel.endswith(".safetensors"):
                entries, spans, _ = header(file, rel)
                for name, entry in entries.items():
                    if wanted is None or wanted.get(name) == rel:
                        yield name, read_tensor(file, entry, spans[name])
            else:
                for name, tensor in load_safe(file).items():
                    if wanted is None or wanted.get(name) == rel:
                        yield name, tensor


def _place(root: Path, rel: str) -> Path:
    try:
        return contained(root, rel)
    except CorruptDirectory as error:
        raise FormatError(one_line(f"{root}: {error}")) from None


def _check_plain(value: Any, file: Path) -> None:
    if not isinstance(value, dict):
        raise FormatError(f"{file} is not a state dict (a mapping)")


READER = _HuggingFace()
