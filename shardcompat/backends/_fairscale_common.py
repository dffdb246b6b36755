"""What the two fairscale backends share: probing the install, signatures, state-dict keys.

fairscale is unmaintained and its releases differ in import paths and constructor
arguments, so everything here is found by importing and inspecting, never by comparing
version strings; :func:`fairscale_version` is only for messages and ``packaging`` ranges.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from .. import _rng
from ..options import Precision, ShardingOptions
from ._base import FAIRSCALE_MISSING, Probe
from ._fairscale_waits import wait_for_every_collective

__all__ = [
    "accepts",
    "fairscale_version",
    "grad_scaler",
    "import_fairscale",
    "indexed_optimizer_state",
    "named_optimizer_state",
    "owner_clip_grad_norm_",
    "probe_fairscale",
    "shard_clip_grad_norm_",
]



def fairscale_version() -> str | None:
    """The installed fairscale distribution's version, read without importing it."""
    try:
        return importlib.metadata.version("fairscale")
    except importlib.metadata.PackageNotFoundError:
        return None


def import_fairscale(modules: Sequence[str]) -> tuple[dict[str, Any], str]:
    """Import ``modules``; return them, or ``{}`` and the reason (with the fix) they failed.

    fairscale 0.1.0-0.1.4 import ``torch._six``, which torch 2.0 removed; fairscale 0.4.7+
    may ``sys.exit`` while importing FSDP when ``pygit2``/``pgzip`` are missing.  Both must
    become an explanation, not a crash of the user's script, so ``SystemExit`` is caught too.
    """
    version = fairscale_version()
    if version is None:
        return {}, FAIRSCALE_MISSING
    found: dict[str, Any] = {}
    for name in modules:
        try:
            found[name] = importlib.import_module(name)
        except (ImportError, SystemExit, AttributeError) as error:
            return {}, _import_failure(version, name, error)
    return found, ""


def _import_failure(version: str, module: str, error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    if "_six" in text:
        return (
            f"fairscale {version} cannot be imported on torch {torch.__version__}: it imports "
            "torch._six, which torch 2.0 removed; upgrade to fairscale>=0.1.5 "
            "(pip install -U 'fairscale>=0.1.5') or use backend torch-zero"
        )
    if isinstance(error, SystemExit) or any(dep in text for dep in ("pygit2", "pgzip")):
        return (
            f"fairscale {version} exits while importing {module} ({text}): its experimental "
            "wgit tools need pygit2 and pgzip; pip install pygit2 pgzip, or use a native "
            "torch backend (torch-fsdp1, torch-fsdp2, torch-zero)"
        )
    return f"fairscale {version} failed to import {module} ({text})"


@_rng.read_only  # features(mods) may build a tiny wrapper to see how this release behaves
def probe_fairscale(
    backend: str, modules: Sequence[str], features: Callable[[dict[str, Any]], dict[str, bool]]
) -> Probe:
    """A :class:`Probe` for ``backend``: importable or the reason, versions, ``features(mods)``."""
    versions: dict[str, str] = {"torch": str(torch.__version__)}
    version = fairscale_version()
    if version is not None:
        versions["fairscale"] = version
    if not dist.is_available():
        return Probe(backend, False, "torch.distributed is not available in this torch build", versions)
    mods, reason = import_fairscale(modules)
    if not mods:
        return Probe(backend, False, reason, versions)
    # Before 0.3.7, async broadcasts race on gloo; fixed here, once, for every user of fairscale.
    fixed = wait_for_every_collective()
    return Probe(backend, True, "", versions, {**features(mods), "collective_wait_fix": bool(fixed)})


def accepts(func: Callable[..., Any], name: str) -> bool:
    """Whether ``func`` takes a keyword argument ``name`` (how versions are told apart)."""
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def grad_scaler(options: ShardingOptions, process_group: Any = None) -> Any:
    """fairscale's ``ShardedGradScaler`` for fp16 (a plain scaler would see one shard's infs)."""
    if options.mixed_precision is not Precision.FP16:
        return None
    from fairscale.optim.grad_scaler import ShardedGradScaler

    kwargs = {"process_group": process_group} if process_group is not None else {}
    return ShardedGradScaler(**kwargs)


@torch.no_grad()
def owner_clip_grad_norm_(
    params: Sequence[torch.Tensor], owned: Sequence[bool], max_norm: float, norm_type: float,
    group: Any = None,
) -> torch.Tensor:
    """``clip_grad_norm_`` over the whole model when each rank owns whole parameters (OSS).

    The owner of each parameter computes its norm; the others add an exact zero, so the
    all-reduced vector holds the very per-parameter norms DDP would see, in model order, and
    the total and the clip factor are bit-for-bit DDP's.  (Summing per-rank partial norms,
    as ``OSS.clip_grad_norm`` does, is off by rounding, and AdamW turns that into 1e-4 drift.)
    """
    grads = [p.grad for p in params if p.grad is not None]
    dtype = grads[0].dtype if grads else torch.float32
    device = grads[0].device if grads else torch.device("cpu")
    norms = torch.zeros(len(params), dtype=dtype, device=device)
    for i, (param, mine) in enumerate(zip(params, owned)):
        if mine and param.grad is not None:
            norms[i] = torch.linalg.vector_norm(param.grad.detach(), norm_type)
    dist.all_reduce(norms, group=group)
    total: torch.Tensor = torch.linalg.vector_norm(norms, norm_type)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for grad in grads:
        grad.detach().mul_(coef.to(grad.device))
    return total


@torch.no_grad()
def shard_clip_grad_norm_(
    params: Iterable[torch.Tensor], max_norm: float, norm_type: float, group: Any = None
) -> torch.Tensor:
    """Clip gradient shards by the norm over all ranks, as ``clip_grad_norm_`` on the full model.

    Every rank holds a disjoint piece of every gradient (padding is zeros), so the global
    p-norm is the p-th root of the sum over ranks of each rank's sum of ``|g|**p``.  Offloaded
    gradients are on the CPU, where NCCL cannot reduce: the sum travels on this rank's GPU then.
    """
    grads = [p.grad for p in params if p.grad is not None]
    device = grads[0].device if grads else torch.device("cpu")
    comm = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else device
    if norm_type == float("inf"):
        local = max((g.detach().abs().max().float() for g in grads), default=torch.zeros((), device=device))
        total = local.to(comm, copy=True)
        dist.all_reduce(total, op=dist.ReduceOp.MAX, group=group)
    else:
        local = sum((g.detach().float().norm(norm_type) ** norm_type for g in grads), torch.zeros((), device=device))
        total = local.to(comm, copy=True)
        dist.all_reduce(total, group=group)
        total = torch.pow(total, 1.0 / norm_type)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(coef.to(g.device, g.dtype))
    return total


def _cloned(value: Any) -> Any:
    """A copy of nested optimizer state owning its tensors.

    fairscale "copies" state to a device with ``.to()``, which returns the same tensor when it
    is already there: without this a saved state would keep changing as training goes on.
    """
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cloned(v) for v in value)
    return value


def named_optimizer_state(state: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """torch's index-keyed optimizer state (params numbered in ``names`` order) keyed by name."""
    return {
        "state": {names[int(i)]: _cloned(value) for i, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [names[int(i)] for i in group["params"]]} for group in state["param_groups"]
        ],
    }


def indexed_optimizer_state(state: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The inverse of :func:`named_optimizer_state` for an optimizer built on ``names`` in order.

    The result is in model order and dense (``{}`` for a parameter without state), whatever
    order the names came in (another backend may list them differently): torch pairs saved
    and current parameters by position in ``param_groups``, and fairscale before 0.3.7 pairs
    the ``state`` entries by position too.  An empty state is what an optimizer has before
    its first step.
    """
    index = {name: i for i, name in enumerate(names)}
    missing = [n for g in state["param_groups"] for n in g["params"] if n not in index]
    missing += [n for n in state["state"] if n not in index]
    if missing:
        raise KeyError(f"optimizer state names parameters this model does not have: {missing[:5]}")
    groups = [{**g, "params": sorted(index[n] for n in g["params"])} for g in state["param_groups"]]
    saved = {index[name]: value for name, value in state["state"].items()}
    return {
        "state": {i: _cloned(saved.get(i, {})) for g in groups for i in g["params"]},
        "param_groups": groups,
    }
