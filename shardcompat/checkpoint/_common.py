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

from .._atomic import (
    MANIFEST,
    CorruptDirectory,
    ForeignFiles,
    check_target,
    contained,
    recover,
    verify,
)
from ._protocol import local_optimizer

if TYPE_CHECKING:
    from ._protocol import Checkpointable

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MODEL",
    "OPTIMIZER",
    "TRAINER",
    "CheckpointError",
    "WriteRefused",
    "all_agree",
    "check_names_and_shapes",
    "check_optimizer_kind",
    "check_state_matches",
    "check_trainer",
    "gather",
    "header",
    "is_rank0",
    "load_torch",
    "one_line",
    "open_checkpoint",
    "optimizer_kind",
    "rank",
    "rank0_decides",
    "refuse_foreign",
    "restore_rank_rng",
    "restore_rng",
    "restore_trainer",
    "rng_file",
    "rng_state",
    "shape_table",
    "share",
    "state_shapes",
    "table_differences",
    "world_size",
    "writable",
]

FORMAT = "shardcompat-checkpoint"
MODEL, OPTIMIZER, TRAINER = "model.pt", "optimizer.pt", "trainer.pt"
FORMAT_VERSION = 1
T = TypeVar("T")


class CheckpointError(ValueError):
    """A checkpoint cannot be written or loaded as asked; one line names the file and what is wrong.

    Raised before anything is loaded, so the model and optimizer are untouched.
    """


class WriteRefused(CheckpointError):
    """The destination cannot take the write as asked (it overlaps the source, or holds files
    this checkpoint did not write where it would put its own); nothing was changed."""


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
    """Run ``fn`` on rank 0; if it raises, every rank raises the same :class:`CheckpointError`
    class with its text (the other ranks prefix ``on rank 0:``).

    The other ranks get ``None``.  This is how one rank's validation (or write) failure
    reaches everyone instead of leaving them waiting at the next collective; the class
    travels too, so ``except WriteRefused`` catches a refused save on every rank.
    """
    result: T | None = None
    failure: BaseException | None = None
    if is_rank0(group):
        try:
            result = fn()
        except Exception as error:
            failure = error if isinstance(error, CheckpointError) else _as_checkpoint_error(error)
    if _distributed(group):
        box: list[Any] = [None if failure is None else (type(failure), str(failure))]
        dist.broadcast_object_list(box, src=_global_rank0(group), group=group)
        if box[0] is not None and failure is None:
            kind, text = box[0]
            raise kind(f"on rank 0: {text}")
    if failure is not None:
        raise failure
    return result


def _as_checkpoint_error(error: Exception) -> CheckpointError:
    wrapped = CheckpointError(_describe(error))
    wrapped.__cause__ = error
    return wrapped


def _describe(error: BaseException) -> str:
    text = str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
    return one_line(text)


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line: its lines joined, cut at ``limit`` characters (torch's own load
    errors run to dozens of lines of advice that does not apply here)."""
    joined = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


def all_agree(fn: Callable[[], T], group: Any = None) -> T:
    """Run ``fn`` on every rank; if it raises on any, every rank raises :class:`CheckpointError`
    naming the rank, so that no rank goes on to change its model while another cannot."""
    result: T | None = None
    error = ""
    try:
        result = fn()
    except Exception as failure:
        error = _describe(failure)
    errors = [error]
    if _distributed(group):
        errors = [""] * world_size(group)
        dist.all_gather_object(errors, error, group=group)
    failed = [(r, e) for r, e in enumerate(errors) if e]
    if failed:
        r, e = failed[0]
        raise CheckpointError(e if r == rank(group) or world_size(group) == 1 else f"on rank {r}: {e}")
    return cast(T, result)


def refuse_foreign(fn: Callable[[], T]) -> T:
    """``fn()``, with the atomic writer's refusal of a taken destination as :class:`WriteRefused`."""
    try:
        return fn()
    except ForeignFiles as error:
        raise WriteRefused(str(error)) from None


def writable(target: Path) -> None:
    """Before a write into ``target`` (the writer only): finish or drop what a killed save into it
    left, then refuse a target holding foreign files or a journal that is not ours
    (:class:`WriteRefused`, nothing changed)."""
    try:
        recover(target)
        check_target(target, FORMAT)
    except (ForeignFiles, CorruptDirectory) as error:
        raise WriteRefused(str(error)) from None


def open_checkpoint(path: Path, only: Collection[str] | None = None) -> dict[str, Any]:
    """Verify every checksum (``only``: of those files) and the manifest's fields, and return
    the manifest.  Reading changes nothing: an interrupted save is refused, not finished (only
    the next save into ``path`` finishes it), and no file is followed through a link."""
    try:
        manifest = verify(path, only)
    except CorruptDirectory as error:
        raise CheckpointError(str(error)) from None
    file = path / MANIFEST
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{file}: not a shardcompat checkpoint (format {_short(manifest.get('format'))})")
    version = manifest.get("version", 0)
    if type(version) is not int:
        raise CheckpointError(f"{file}: its version {_short(version)} is not a whole number: the manifest is damaged")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{file}: format version {version}; this shardcompat reads up to {FORMAT_VERSION}: upgrade shardcompat"
        )
    kind = manifest.get("kind")
    if not isinstance(kind, str) or kind not in _REQUIRED:
        raise CheckpointError(f"{file}: unknown checkpoint kind {_short(kind)} (valid: {', '.join(_REQUIRED)})")
    missing = [name for name in _REQUIRED[kind] if name not in manifest["files"]]
    if missing or not isinstance(manifest.get("model"), dict):
        what = f"lists no {', '.join(missing)}" if missing else "has no model table"
        raise CheckpointError(f"{file} {what}, which a {kind} checkpoint has: the manifest does not match its files")
    for key, want in _FIELDS.items():
        if not isinstance(manifest.get(key), want) or isinstance(manifest.get(key), bool):
            raise CheckpointError(f"{file}: {key!r} is missing or not a {want.__name__}: the manifest is damaged")
    for name, shape in manifest["model"].items():
        if not isinstance(shape, list) or not all(type(n) is int for n in shape):
            raise CheckpointError(f"{file}: the shape of {name!r} is not a list of whole numbers: the manifest is damaged")
    return manifest


_FIELDS = {"step": int, "world_size": int, "backend": str, "options": str}


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_REQUIRED = {"full": (MODEL, OPTIMIZER, TRAINER), "sharded": (".metadata", TRAINER)}

def check_trainer(path: Path, scheduler: Any) -> None:
    trainer = load_torch(path / TRAINER)
    if not isinstance(trainer, Mapping) or not isinstance(trainer.get("step"), int) or not isinstance(
        trainer.get("extra"), Mapping
    ):
        raise CheckpointError(f"{path / TRAINER} is not a trainer state (step, scheduler, extra values)")
    if scheduler is not None and trainer.get("scheduler") is None:
        raise CheckpointError(
            f"{path} has no scheduler state (it was saved without scheduler=); "
            "load it without scheduler= or resume the scheduler yourself"
        )

def restore_trainer(prepared: Checkpointable, path: Path, scheduler: Any, rng: bool) -> dict[str, Any]:
    """Step, scheduler and (``rng``) this rank's RNG, after the model and optimizer are loaded."""
    trainer = load_torch(path / TRAINER)
    prepared.step_count = int(trainer["step"])
    if scheduler is not None:
        scheduler.load_state_dict(trainer["scheduler"])
    if rng:
        restore_rank_rng(path, prepared.placement.process_group)
    return {"step": prepared.step_count, **trainer["extra"]}

def optimizer_kind(prepared: Checkpointable) -> str:
    """The class of the optimizer doing the math (inside ZeRO or OSS), e.g. ``AdamW``."""
    return type(local_optimizer(prepared.optimizer)).__name__


def check_optimizer_kind(prepared: Checkpointable, manifest: Mapping[str, Any]) -> None:
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


def header(prepared: Checkpointable, kind: str, step: int, model: Mapping[str, Any]) -> dict[str, Any]:
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


def check_names_and_shapes(saved: Mapping[str, list[int]], model: Mapping[str, list[int]], where: Path) -> None:
    """Refuse a checkpoint of another model (``where``: the file whose table ``saved`` is),
    naming the missing, unexpected and mis-shaped entries, on one line."""
    problems = table_differences(saved, model, "checkpoint", "model")
    if problems:
        raise CheckpointError(
            f"{where}: the checkpoint is of a different model: {problems}; load it into the model "
            "it was saved from (same parameter names and shapes)"
        )


def check_state_matches(state: Any, manifest: Mapping[str, Any], file: Path) -> None:
    """Refuse a model file whose tensors are not the ones its manifest describes (a foreign or
    swapped file whose checksums were rewritten, or a manifest edited by hand)."""
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{file} is not a model state (a mapping of names to tensors)")
    problems = table_differences(shape_table(state), manifest["model"], "file", MANIFEST)
    if problems:
        raise CheckpointError(f"{file} does not match its {MANIFEST}: {problems}")


def check_optimizer_state(optim: Any, expected: Mapping[str, list[int]], file: Path) -> None:
    """Refuse an optimizer file that is not a consolidated, name-keyed state fitting the model."""
    if not isinstance(optim, Mapping) or not {"state", "param_groups"} <= optim.keys():
        raise CheckpointError(f"{file} is not a consolidated optimizer state")
    if not isinstance(optim["state"], Mapping) or not isinstance(optim["param_groups"], list):
        raise CheckpointError(f"{file} is not a consolidated optimizer state")
    problems = []
    for name, values in optim["state"].items():
        if name not in expected:
            problems.append(f"state for {name!r}, which the model does not have")
            continue
        for key, value in values.items() if isinstance(values, Mapping) else ():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and list(value.shape) not in state_shapes(expected[name]):
                problems.append(f"{name}.{key} has shape {tuple(value.shape)}, the parameter {tuple(expected[name])}")
    if problems:
        raise CheckpointError(f"{file}: the optimizer state does not fit this model: {_some(problems)}")


def state_shapes(shape: list[int]) -> list[list[int]]:
    """The shapes an optimizer keeps per parameter: the parameter's own and, for a matrix or
    more, Adafactor's factored statistics (the mean over the last or the second-last dim)."""
    if len(shape) < 2:
        return [shape]
    return [shape, shape[:-1], shape[:-2] + shape[-1:]]


def table_differences(a: Mapping[str, Any], b: Mapping[str, Any], a_name: str, b_name: str) -> str:
    """``"missing from the <a>: ...; not in the <b>: ...; shapes differ: ..."`` or ``""``."""
    missing = sorted(b.keys() - a.keys())
    unexpected = sorted(a.keys() - b.keys())
    shapes = sorted(
        f"{name}: {a_name} {tuple(a[name])}, {b_name} {tuple(b[name])}"
        for name in a.keys() & b.keys()
        if list(a[name]) != list(b[name])
    )
    problems = []
    if missing:
        problems.append(f"missing from the {a_name}: {_some(missing)}")
    if unexpected:
        problems.append(f"not in the {b_name}: {_some(unexpected)}")
    if shapes:
        problems.append(f"shapes differ: {_some(shapes)}")
    return "; ".join(problems)


def _some(items: list[str], shown: int = 5) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def load_torch(file: Path) -> Any:
    """``torch.load`` with ``weights_only`` (checkpoint files hold tensors and plain data only)."""
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:
        raise CheckpointError(one_line(f"{file} cannot be read ({type(error).__name__}: {error})")) from None


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
    try:
        file = contained(path, rng_file(rank(group)))
    except CorruptDirectory as error:
        raise CheckpointError(str(error)) from None
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
