"""What both checkpoint formats share: the error, the manifest header, RNG and trainer state,
and the collective pattern "rank 0 decides, everyone raises the same error".
"""

from __future__ import annotations

import datetime
import importlib.metadata
import random
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
import torch.distributed as dist

from .._atomic import CorruptDirectory, recover, verify

if TYPE_CHECKING:
    from ..prepared import Prepared

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MODEL",
    "OPTIMIZER",
    "TRAINER",
    "CheckpointError",
    "check_names_and_shapes",
    "check_optimizer_kind",
    "check_trainer",
    "gather",
    "header",
    "is_rank0",
    "load_torch",
    "open_checkpoint",
    "optimizer_kind",
    "rank",
    "rank0_decides",
    "restore_rank_rng",
    "restore_rng",
    "restore_trainer",
    "rng_file",
    "rng_state",
    "shape_table",
    "share",
    "world_size",
]

FORMAT = "shardcompat-checkpoint"
MODEL, OPTIMIZER, TRAINER = "model.pt", "optimizer.pt", "trainer.pt"
FORMAT_VERSION = 1
T = TypeVar("T")


class CheckpointError(ValueError):
    """A checkpoint cannot be written or loaded as asked; the message says exactly why.

    Raised before anything is loaded, so the model and optimizer are untouched.
    """


# ---------------------------------------------------------------------- collectives
def _distributed(group: Any) -> bool:
    return dist.is_available() and dist.is_initialized()


def is_rank0(group: Any = None) -> bool:
    return not _distributed(group) or dist.get_rank(group) == 0


def world_size(group: Any = None) -> int:
    return dist.get_world_size(group) if _distributed(group) else 1


def rank(group: Any = None) -> int:
    return dist.get_rank(group) if _distributed(group) else 0


def _global_rank0(group: Any) -> int:
    return dist.get_global_rank(group, 0) if group is not None else 0


def rank0_decides(fn: Callable[[], T], group: Any = None) -> T | None:
    """Run ``fn`` on rank 0; if it raises, every rank raises :class:`CheckpointError` with its text.

    The other ranks get ``None``.  This is how one rank's validation (or write) failure
    reaches everyone instead of leaving them waiting at the next collective.
    """
    result: T | None = None
    failure: BaseException | None = None
    if is_rank0(group):
        try:
            result = fn()
        except Exception as error:
            failure = error
    if _distributed(group):
        box: list[Any] = [None if failure is None else _describe(failure)]
        dist.broadcast_object_list(box, src=_global_rank0(group), group=group)
        if box[0] is not None and failure is None:
            raise CheckpointError(f"on rank 0: {box[0]}")
    if failure is not None:
        if isinstance(failure, CheckpointError):
            raise failure
        raise CheckpointError(_describe(failure)) from failure
    return result


def _describe(error: BaseException) -> str:
    return str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"


def open_checkpoint(path: Path, only: Collection[str] | None = None) -> dict[str, Any]:
    """Recover from an interrupted save, verify every checksum (``only``: of those files), and
    return the manifest."""
    recover(path)
    try:
        manifest = verify(path, only)
    except CorruptDirectory as error:
        raise CheckpointError(str(error)) from None
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a shardcompat checkpoint (format {manifest.get('format')!r})")
    if manifest.get("version", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format version {manifest['version']}; this shardcompat reads up to "
            f"{FORMAT_VERSION}: upgrade shardcompat"
        )
    if manifest.get("kind") not in ("full", "sharded"):
        raise CheckpointError(f"{path}: unknown checkpoint kind {manifest.get('kind')!r}")
    return manifest

def check_trainer(path: Path, scheduler: Any) -> None:
    trainer = load_torch(path / TRAINER)
    if scheduler is not None and trainer.get("scheduler") is None:
        raise CheckpointError(
            f"{path} has no scheduler state (it was saved without scheduler=); "
            "load it without scheduler= or resume the scheduler yourself"
        )

def restore_trainer(prepared: Prepared, path: Path, scheduler: Any, rng: bool) -> dict[str, Any]:
    """Step, scheduler and (``rng``) this rank's RNG, after the model and optimizer are loaded."""
    trainer = load_torch(path / TRAINER)
    prepared.step_count = int(trainer["step"])
    if scheduler is not None:
        scheduler.load_state_dict(trainer["scheduler"])
    if rng:
        restore_rank_rng(path, prepared.placement.process_group)
    return {"step": prepared.step_count, **trainer["extra"]}

def optimizer_kind(prepared: Prepared) -> str:
    """The class of the optimizer doing the math (inside ZeRO or OSS), e.g. ``AdamW``."""
    from ..prepared import _local_optimizer

    return type(_local_optimizer(prepared.optimizer)).__name__


def check_optimizer_kind(prepared: Prepared, manifest: Mapping[str, Any]) -> None:
    saved, current = manifest.get("optimizer"), optimizer_kind(prepared)
    if saved is not None and saved != current:
        raise CheckpointError(
            f"the checkpoint holds {saved} optimizer state, but this optimizer is {current}: "
            f"build the optimizer with {saved} to resume (or load the model state only)"
        )


def gather(value: Any, group: Any) -> list[Any]:
    """Every rank's ``value`` on rank 0 (``[]`` elsewhere)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    out: list[Any] | None = [None] * world_size(group) if is_rank0(group) else None
    dst = dist.get_global_rank(group, 0) if group is not None else 0
    dist.gather_object(value, out, dst=dst, group=group)
    return out or []

def share(value: Any, group: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    return box[0]


# ---------------------------------------------------------------------- manifest
def _version(dist_name: str) -> str | None:
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None


def header(prepared: Prepared, kind: str, step: int, model: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest fields other than ``files``: who wrote this, how, and the model's table."""
    versions = {name: _version(name) for name in ("torch", "fairscale", "shardcompat")}
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "kind": kind,
        "backend": prepared.backend,
        "options": str(prepared.options),
        "world_size": world_size(prepared.placement.process_group),
        "step": step,
        "versions": {k: v for k, v in versions.items() if v is not None},
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": dict(model),
        "optimizer": optimizer_kind(prepared),
    }


def shape_table(state: Mapping[str, Any]) -> dict[str, list[int]]:
    """``{name: global shape}`` of a model state (plain tensors, DTensors, ShardedTensors)."""
    return {name: list(value.size()) for name, value in state.items() if hasattr(value, "size")}


def check_names_and_shapes(saved: Mapping[str, list[int]], model: Mapping[str, list[int]]) -> None:
    """Refuse a checkpoint of another model, naming every missing, unexpected and mis-shaped entry."""
    missing = sorted(model.keys() - saved.keys())
    unexpected = sorted(saved.keys() - model.keys())
    shapes = sorted(
        f"{name}: checkpoint {tuple(saved[name])}, model {tuple(model[name])}"
        for name in saved.keys() & model.keys()
        if list(saved[name]) != list(model[name])
    )
    problems = []
    if missing:
        problems.append(f"missing from the checkpoint: {', '.join(missing)}")
    if unexpected:
        problems.append(f"not in the model: {', '.join(unexpected)}")
    if shapes:
        problems.append(f"shapes differ: {'; '.join(shapes)}")
    if problems:
        raise CheckpointError(
            "the checkpoint is of a different model:\n  " + "\n  ".join(problems)
            + "\nLoad it into the model it was saved from (same parameter names and shapes)."
        )


def load_torch(file: Path) -> Any:
    """``torch.load`` with ``weights_only`` (checkpoint files hold tensors and plain data only)."""
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:
        raise CheckpointError(f"{file} cannot be read ({type(error).__name__}: {error})") from None


# ---------------------------------------------------------------------- RNG
def rng_file(rank_: int) -> str:
    return f"rng/rank-{rank_:05d}.pt"


def rng_state() -> dict[str, Any]:
    """This process's random states: torch CPU (and CUDA), Python ``random``, numpy if installed."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy
    except ImportError:
        return state
    kind, keys, pos, has_gauss, gauss = cast(Any, numpy.random.get_state())
    state["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, gauss)
    return state


def restore_rank_rng(path: Path, group: Any) -> bool:
    """This rank's random states from the (verified) checkpoint at ``path``, if it has them."""
    file = path / rng_file(rank(group))
    if not file.exists():  # a rank beyond the saved world size keeps its own
        return False
    restore_rng(load_torch(file))
    return True


def restore_rng(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        try:
            import numpy
        except ImportError:
            return
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        numpy.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, gauss))
