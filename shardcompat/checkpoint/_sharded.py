"""The sharded checkpoint format: ``torch.distributed.checkpoint`` (DCP), one file per rank.

No process ever holds the whole model: ``get_state_dict`` hands DCP each rank's shards
(DTensors for FSDP2, ShardedTensors for FSDP1, plain tensors for DDP), keyed by the original
parameter names, and DCP reshards on load, so world size may change in between.  DCP does
not know ZeRO's or fairscale's optimizers: those backends cannot *write* this format (the
error says to use the full one), but they can *read* it, each rank reading the full state.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .._atomic import MANIFEST, atomic_directory, commit, new_staging, write_manifest
from ._common import (
    MODEL,
    OPTIMIZER,
    TRAINER,
    CheckpointError,
    WriteRefused,
    check_names_and_shapes,
    check_optimizer_kind,
    check_trainer,
    gather,
    header,
    is_rank0,
    one_line,
    open_checkpoint,
    rank,
    rank0_decides,
    refuse_foreign,
    restore_trainer,
    rng_file,
    rng_state,
    shape_table,
    share,
    state_shapes,
    table_differences,
    writable,
)
from ._groups import match_groups

if TYPE_CHECKING:
    from ._protocol import Checkpointable

__all__ = ["check_metadata", "consolidate", "dcp_refusal", "load", "read_full", "read_param_groups", "save"]


def dcp_refusal(prepared: Checkpointable) -> str | None:
    """Why DCP's ``get_state_dict`` cannot serve this backend, or ``None`` when it can."""
    optimizer, model = type(prepared.optimizer), type(prepared.model)
    if optimizer.__name__ == "ZeroRedundancyOptimizer":
        return "its ZeroRedundancyOptimizer partitions state by index, which DCP cannot shard"
    if any(cls.__module__.startswith("fairscale") for cls in (optimizer, model)):
        return "fairscale's wrappers and OSS are unknown to torch.distributed.checkpoint"
    return None


def _state_dicts(prepared: Checkpointable) -> tuple[dict[str, Any], dict[str, Any]]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    why = dcp_refusal(prepared)
    if why is not None:
        raise CheckpointError(
            f"{prepared.backend} cannot write a sharded checkpoint: {why}. Save the full "
            "format instead (sharded=False; it loads on every backend), or train with "
            "torch-fsdp2 / torch-fsdp1 for sharded checkpoints"
        )
    model, optim = get_state_dict(prepared.model, prepared.optimizer)
    return model, optim


def save(prepared: Checkpointable, path: Path, trainer: Mapping[str, Any]) -> None:
    """Every rank writes its shards and RNG into one temporary directory; rank 0 commits it."""
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    group = prepared.placement.process_group
    model, optim = _state_dicts(prepared)
    table = shape_table(model)

    def start() -> Path:
        writable(path)
        return new_staging(path)

    tmp: Path = share(rank0_decides(start, group), group)
    error = ""
    try:
        dcp_save({"model": model, "optimizer": optim}, checkpoint_id=tmp, process_group=group)
        (tmp / rng_file(0)).parent.mkdir(exist_ok=True)
        torch.save(rng_state(), tmp / rng_file(rank(group)))
        if is_rank0(group):
            torch.save(dict(trainer), tmp / TRAINER)
    except Exception as failure:  # reported by rank below, so no rank waits on a dead one
        error = f"{type(failure).__name__}: {failure}"
    errors = gather(error, group)

    def finish() -> None:
        failed = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
        if failed:
            shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointError("the sharded save failed; nothing was replaced: " + "; ".join(failed))
        write_manifest(tmp, header(prepared, "sharded", int(trainer["step"]), table))
        refuse_foreign(lambda: commit(tmp, path))

    rank0_decides(finish, group)


def load(
    prepared: Checkpointable, path: Path, manifest: Mapping[str, Any], names: list[list[str]], scheduler: Any,
    rng: bool,
) -> dict[str, Any]:
    """Load shards in place through DCP (resharding to this world size), after checking them.

    The parameter groups are matched here (``names``: the parameters of each of the
    optimizer's groups), not by DCP, which would give a group the settings of whichever saved
    group it meets last.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    from ._dcp_metadata import DCP_ERRORS, SafeReader, reason

    group = prepared.placement.process_group
    # The model's shapes without the optimizer's state: DCP's get_state_dict creates that
    # state (a zero step) for an optimizer that has none, which a refused load must not do.
    expected = shape_table(get_model_state_dict(prepared.model))

    def validate() -> list[dict[str, Any]]:
        check_names_and_shapes(manifest["model"], expected, path / MANIFEST)
        check_optimizer_kind(prepared, manifest)
        check_trainer(path, scheduler)
        check_metadata(path, manifest)
        return match_groups(read_param_groups(path), names, prepared.optimizer.param_groups)

    groups = share(rank0_decides(validate, group), group)
    model, optim = _state_dicts(prepared)
    reader = SafeReader(path)
    try:
        dcp_load({"model": model, "optimizer": {"state": optim["state"]}}, storage_reader=reader, process_group=group)
    except DCP_ERRORS as error:
        raise CheckpointError(one_line(f"{path}: the shards do not fit this model/optimizer: {reason(error)}")) from None
    optim = {"state": optim["state"], "param_groups": groups}
    set_state_dict(prepared.model, prepared.optimizer, model_state_dict=model, optim_state_dict=optim)
    return restore_trainer(prepared, path, scheduler, rng)


def check_metadata(path: Path, manifest: Mapping[str, Any]) -> None:
    """Refuse shards whose own index (DCP's ``.metadata``) is not the model the manifest
    describes: a foreign ``.metadata`` whose checksum was rewritten, or an edited manifest."""
    from ._dcp_metadata import METADATA, read_metadata

    file = path / METADATA
    metadata = read_metadata(path).state_dict_metadata
    table = {
        key.removeprefix("model."): list(entry.size)
        for key, entry in metadata.items()
        if key.startswith("model.") and hasattr(entry, "size")
    }
    problems = table_differences(table, manifest["model"], "shards", MANIFEST)
    state = {key for key in metadata if key.startswith("optimizer.state.")}
    for name, shape in manifest["model"].items():
        for key in (k for k in state if k.startswith(f"optimizer.state.{name}.")):
            size = getattr(metadata[key], "size", None)
            if size is not None and len(size) > 0 and list(size) not in state_shapes(list(shape)):
                problems = "; ".join(filter(None, [problems, f"{key} has shape {tuple(size)}, the parameter {tuple(shape)}"]))
    if problems:
        raise CheckpointError(f"{file} does not match its {MANIFEST}: {problems}")


def read_full(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole model and optimizer state of a sharded checkpoint, read in this process.

    This is what torch's own ``format_utils.dcp_to_torch_save`` does, without the extra file.
    """
    state = _read(path)
    return state["model"], state["optimizer"]


def read_param_groups(path: Path) -> list[dict[str, Any]]:
    """The optimizer's parameter groups in a sharded checkpoint (read alone: a few bytes)."""
    groups: list[dict[str, Any]] = _read(path, "optimizer.param_groups")["optimizer"]["param_groups"]
    return groups


def _read(path: Path, *keys: str) -> dict[str, Any]:
    """The entries ``keys`` (all when none) of a sharded checkpoint, read in this process."""
    from ._dcp_metadata import DCP_ERRORS, SafeReader, reason

    try:
        from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    except ImportError as error:
        raise CheckpointError(f"this torch cannot read a DCP checkpoint whole: {error}") from None
    state: dict[str, Any] = {}
    reader = SafeReader(path)
    try:
        _load_state_dict(
            state,
            storage_reader=reader,
            planner=_EmptyStateDictLoadPlanner(keys=set(keys) or None),  # type: ignore[no-untyped-call]
            no_dist=True,
        )
    except DCP_ERRORS as error:
        raise CheckpointError(one_line(f"{path}: the shards cannot be read: {reason(error)}")) from None
    return state


def consolidate(src: Path, dst: Path) -> Path:
    """Write the full-format checkpoint ``dst`` from the sharded checkpoint ``src``."""
    _refuse_overlap(src, dst)
    manifest = open_checkpoint(src)
    if manifest["kind"] != "sharded":
        raise CheckpointError(f"{src} is already a full checkpoint; copy it instead")
    check_metadata(src, manifest)
    writable(dst)
    model, optim = read_full(src)
    body = {k: v for k, v in manifest.items() if k != "files"}
    body.update(kind="full", consolidated_from=str(src))
    with refuse_foreign(lambda: atomic_directory(dst, body)) as tmp:
        torch.save(model, tmp / MODEL)
        torch.save(optim, tmp / OPTIMIZER)
        shutil.copy2(src / TRAINER, tmp / TRAINER)
        for rel in manifest["files"]:
            if rel.startswith("rng/"):
                (tmp / rel).parent.mkdir(exist_ok=True)
                shutil.copy2(src / rel, tmp / rel)
    return dst


def _refuse_overlap(src: Path, dst: Path) -> None:
    """Refuse a destination that is the source, inside it, or holds it (links followed)."""
    a, b = src.resolve(), dst.resolve()
    if a == b:
        why = "is the source"
    elif a in b.parents:
        why = "is inside the source"
    elif b in a.parents:
        why = "holds the source"
    else:
        return
    shown = f"{dst} (= {b})" if str(b) != str(dst) else str(dst)
    raise WriteRefused(
        f"the destination {shown} {why} {src}: writing there would mix the two checkpoints; "
        "choose a destination outside the source's directory tree"
    )
