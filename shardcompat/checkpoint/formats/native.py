"""shardcompat's own checkpoints, full and sharded (``manifest.json`` of format
``shardcompat-checkpoint``): verified entirely by :func:`..read_manifest` first (checksums,
no links, no interrupted save, DCP metadata by the restricted reader), then described from the
manifest and the files' own tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..._atomic import MANIFEST
from .._common import FORMAT, MODEL, OPTIMIZER, TRAINER, check_trainer, open_checkpoint, rng_file
from .._sharded import check_metadata
from ._base import Description, FormatError, entry_of, inside, load_safe, read_json
from .dcp import READER as DCP
from .optimizer import describe_state

__all__ = ["READER"]


def _verified(path: Path) -> dict[str, Any]:
    """What :func:`shardcompat.checkpoint.read_manifest` checks: every checksum, the manifest,
    the trainer state and DCP's metadata (restricted); reading changes nothing."""
    manifest = open_checkpoint(path)
    check_trainer(path, None)
    if manifest["kind"] == "sharded":
        check_metadata(path, manifest)
    return manifest


class _Native:
    name = "shardcompat"
    title = "shardcompat checkpoint"

    def detect(self, path: Path) -> bool:
        file = path / MANIFEST
        if not path.is_dir() or not file.is_file() or file.is_symlink():
            return False
        try:
            body = read_json(file)
        except FormatError:
            return False
        return isinstance(body, dict) and body.get("format") == FORMAT

    def describe(self, path: Path) -> Description:
        manifest = _verified(path)
        kind = manifest["kind"]
        if kind == "sharded":
            out = DCP.describe(path)
            out.format, out.title = self.name, f"{self.title} ({kind})"
            out.backend_from = ""
        else:
            out = Description(self.name, f"{self.title} ({kind})", str(path), files=[MANIFEST])
            model = load_safe(inside(path, MODEL))
            out.parameters = {n: entry_of(t, MODEL) for n, t in model.items() if isinstance(t, torch.Tensor)}
            describe_state(load_safe(inside(path, OPTIMIZER)), path / OPTIMIZER, OPTIMIZER, out)
            out.notes = [n for n in out.notes if "keys its state by parameter index" not in n]
        out.files = [*sorted(manifest["files"]), MANIFEST]
        out.world_size, out.world_size_from = manifest["world_size"], MANIFEST
        out.backend, out.backend_from = manifest["backend"], f"{MANIFEST}, options '{manifest['options']}'"
        out.step = manifest["step"]
        out.scalars["trainer state"] = TRAINER
        trainer = load_safe(inside(path, TRAINER))
        if isinstance(trainer, dict) and trainer.get("scheduler") is not None:
            out.scalars["scheduler"] = f"{TRAINER} (scheduler)"
        absent = [r for r in range(out.world_size) if rng_file(r) not in manifest["files"]]
        if absent:
            out.missing.append(f"RNG state of rank(s) {', '.join(map(str, absent))} not in this checkpoint")
        else:
            out.scalars["rng"] = f"rng/rank-*.pt for ranks 0..{out.world_size - 1}"
        return out

    def tensors(self, path: Path) -> Iterator[tuple[str, torch.Tensor]]:
        manifest = _verified(path)
        if manifest["kind"] == "sharded":
            yield from DCP.tensors(path)
            return
        yield from load_safe(inside(path, MODEL)).items()


READER = _Native()
