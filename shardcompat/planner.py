"""The memory planner: what each backend holds per rank, before anything is allocated.

``shardcompat explain OPTIONS --params N`` (or ``--model PATH``) answers "will my model
fit?" with the bytes of parameters, gradients and optimizer state one rank holds, for the
backend that would serve the options and every other backend that could.

Each backend is modelled as it really lays memory out, not as the ZeRO paper idealises it,
so the figures agree with what ``shardcompat train`` measures (``benchmarks/planner.py``
holds them against each other):

- shards are padded as the backend pads them (FSDP1 and fairscale FSDP: one flat buffer
  per unit, padded to a multiple of N; FSDP2: each parameter's first dimension, padded);
- optimizer partitions are the backend's own (``ZeroRedundancyOptimizer``: largest
  parameter first to the least-loaded rank; fairscale ``OSS``: registration order);
- the peak is found the way the report finds it: the largest of the state held after
  forward, after backward and after the optimizer step (``zero_dp_2`` peaks after forward,
  holding the gathered parameters next to their shards; FSDP1 and fairscale FSDP keep the
  root unit gathered from forward to backward);
- offload's sharded parameters, gradients and optimizer state are host memory.

With only a parameter count (``--params``) the layout is unknown: shards are Ψ/N exactly,
no root unit stays gathered under ``auto_wrap``, and the figures are the ZeRO paper's
(with ``--precision mixed --optimizer adamw`` its Table 1, to the byte).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from .options import ShardingOptions

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "Estimate",
    "Layout",
    "estimate",
    "layout_of",
    "volume",
]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Precision:
    """Bytes per element of parameters, gradients, each optimizer state and a master copy."""

    param: int
    grad: int
    state: int
    master: int  # an fp32 copy of the parameters kept by the optimizer (mixed precision)
    help: str


# The ZeRO paper's mixed precision: fp16 parameters and gradients, fp32 master copy and
# Adam moments (K = 12).  bf16: everything in bf16, no master copy.
PRECISIONS = {
    "mixed": Precision(2, 2, 4, 4, "16-bit parameters and gradients, fp32 master copy and optimizer state "
                                   "(the ZeRO paper's model; K=12 for Adam)"),
    "fp32": Precision(4, 4, 4, 0, "fp32 everywhere (what shardcompat train runs; K=8 for Adam)"),
    "bf16": Precision(2, 2, 2, 0, "pure bf16: parameters, gradients and optimizer state (K=4 for Adam)"),
}


@dataclass(frozen=True)
class Optimizer:
    """How many state tensors the size of the parameter it keeps; ``factored``: Adafactor's
    row and column statistics instead of a full second moment for tensors of 2+ dimensions."""

    states: int
    factored: bool
    help: str


OPTIMIZERS = {
    "adamw": Optimizer(2, False, "Adam/AdamW: two moments per parameter"),
    "sgd": Optimizer(1, False, "SGD with momentum: one buffer per parameter"),
    "adafactor": Optimizer(0, True, "Adafactor without momentum: row + column statistics of each matrix, "
                                    "a full second moment for vectors"),
}


def _numel(shape: Shape) -> int:
    return math.prod(shape)


def _optimizer_elements(shapes: Iterable[Shape] | None, optimizer: Optimizer, count: float = 0.0) -> tuple[float, float]:
    """(parameter elements, optimizer state elements) of the tensors an optimizer steps; with
    ``shapes`` None only ``count`` elements are known (Adafactor's factored statistics, a
    sum over rows and columns, are then taken as negligible)."""
    if shapes is None:
        return count, optimizer.states * count
    params, state = 0, 0
    for shape in shapes:
        n = _numel(shape)
        params += n
        state += optimizer.states * n
        if optimizer.factored:
            state += n if len(shape) < 2 else _numel(shape[:-1]) + _numel(shape[:-2]) * shape[-1]
    return float(params), float(state)


@dataclass(frozen=True)
class Layout:
    """A model's parameters as the sharded units ``auto_wrap`` makes of them.

    ``units[0]`` is the root unit (the parameters no wrapped module owns); without
    ``auto_wrap`` it is every parameter.  ``exact`` is False when only a count is known.
    """

    units: tuple[tuple[Shape, ...], ...]
    exact: bool = True
    wrapped: tuple[str, ...] = ()  # qualified names of the modules auto_wrap wraps

    @classmethod
    def count(cls, parameters: int) -> Layout:
        return cls(units=(((parameters,),),), exact=False)

    @property
    def parameters(self) -> int:
        return sum(_numel(s) for unit in self.units for s in unit)

    @property
    def shapes(self) -> list[Shape]:
        return [s for unit in self.units for s in unit]


def layout_of(model: nn.Module, options: ShardingOptions | None = None) -> Layout:
    """The units of ``model`` (any device, ``meta`` included) under ``options``' auto_wrap rule.

    Parameters are taken once each (``parameters()`` drops tied duplicates); a wrapped
    module owns the parameters no wrapped descendant owns, children before parents, as
    ``fully_shard`` and FSDP1's policy assign them.
    """
    from .backends._wrap_policy import modules_to_wrap, wrap_rule

    chosen = modules_to_wrap(model, wrap_rule(model, options)) if options is not None and options.auto_wrap else []
    names = {id(m): n for n, m in model.named_modules()}
    owned: set[int] = set()
    units: list[tuple[Shape, ...]] = []
    for module in chosen:  # children before parents
        mine = [p for p in module.parameters() if id(p) not in owned]
        owned |= {id(p) for p in mine}
        units.append(tuple(tuple(p.shape) for p in mine))
    root = tuple(tuple(p.shape) for p in model.parameters() if id(p) not in owned)
    return Layout(units=(root, *units), exact=True, wrapped=tuple(names[id(m)] for m in chosen))


@dataclass(frozen=True)
class Estimate:
    """Bytes one rank holds at its peak; ``host`` is the part offload keeps in host memory."""

    params: float
    grads: float
    optimizer: float
    host: float = 0.0
    phase: str = "after step"
    working: float = 0.0  # the largest unit gathered for its compute (stage 3; transient, not state)

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer

    @property
    def device(self) -> float:
        """The state that must fit in the accelerator's memory."""
        return self.total - self.host

    def as_dict(self) -> dict[str, float | str]:
        return {"params": round(self.params), "grads": round(self.grads), "optimizer": round(self.optimizer),
                "total": round(self.total), "host": round(self.host), "device": round(self.device),
                "working": round(self.working), "phase": self.phase}


# --------------------------------------------------------------------------- shards


def _greedy(shapes: Sequence[Shape], world: int, *, largest_first: bool) -> list[list[Shape]]:
    """Whole parameters to ranks, each to the least-loaded one (lowest rank on a tie)."""
    order = sorted(shapes, key=_numel, reverse=True) if largest_first else list(shapes)
    sizes, parts = [0] * world, [[] for _ in range(world)]  # type: list[int], list[list[Shape]]
    for shape in order:
        rank = sizes.index(min(sizes))
        parts[rank].append(shape)
        sizes[rank] += _numel(shape)
    return parts


def _flat_shard(unit: Sequence[Shape], world: int) -> int:
    """FSDP1 / fairscale FSDP: one flat parameter per unit, padded to a multiple of N."""
    return math.ceil(sum(_numel(s) for s in unit) / world) if unit else 0


def _dim0_shard(shape: Shape, world: int) -> Shape:
    """FSDP2: a parameter chunked on dim 0, every rank's chunk padded to the largest."""
    if not shape:
        shape = (1,)
    return (math.ceil(shape[0] / world), *shape[1:])


@dataclass(frozen=True)
class _Held:
    """Elements one rank holds: parameters (own shard or whole), gathered copies, gradients,
    and the optimizer's (parameter elements, state elements)."""

    params: float
    gathered: float
    grads: float
    optim: tuple[float, float]


def _fsdp_shards(backend: str, layout: Layout, world: int) -> tuple[list[float], list[float], list[Shape]]:
    """Per unit: shard elements and gathered elements, and the shapes the optimizer steps."""
    shard, full, stepped = [], [], []  # type: list[float], list[float], list[Shape]
    for unit in layout.units:
        if backend == "torch-fsdp2":
            pieces = [_dim0_shard(s, world) for s in unit]
            shard.append(sum(_numel(p) for p in pieces))
            stepped += pieces
        else:
            n = _flat_shard(unit, world)
            shard.append(n)
            if n:
                stepped.append((n,))  # a flat 1-D shard: Adafactor cannot factor it
        full.append(world * shard[-1])
    return shard, full, stepped


# --------------------------------------------------------------------------- phases


def _phases(backend: str, options: ShardingOptions, stage: int, layout: Layout, world: int,
            optimizer: Optimizer) -> dict[str, _Held]:
    """The elements held after forward, after backward and after the step (zero_grad last)."""
    from .options import Stage

    psi = float(layout.parameters)
    if backend in ("torch-zero", "fairscale-sdp"):  # parameters whole, whole parameters per rank
        if stage == 0:
            mine, optim = psi, _optimizer_elements(layout.shapes if layout.exact else None, optimizer, psi)
        elif layout.exact:
            parts = _greedy(layout.shapes, world, largest_first=backend == "torch-zero")
            part = max(parts, key=lambda p: sum(_numel(s) for s in p))
            optim = _optimizer_elements(part, optimizer)
            mine = optim[0]
        else:
            mine = psi / world
            optim = _optimizer_elements(None, optimizer, mine)
        # fairscale's ShardedDDP reduces each gradient to its owner, which alone keeps it.
        grads = mine if backend == "fairscale-sdp" and options.stage is Stage.SIMPLE else psi
        held = _Held(psi, 0.0, grads, optim)
        return {"after forward": _Held(psi, 0.0, 0.0, optim), "after backward": held, "after step": held}
    if layout.exact:
        shard, full, stepped = _fsdp_shards(backend, layout, world)
        optim = _optimizer_elements(stepped, optimizer)
    else:
        shard, full = [psi / world], [psi]
        optim = _optimizer_elements(None, optimizer, psi / world)
    sharded = sum(shard)
    if stage == 2:
        kept = sum(full)  # every unit's parameters stay gathered from forward to backward
    elif (backend == "torch-fsdp2" and not options.auto_wrap) or (not layout.exact and options.auto_wrap):
        kept = 0.0  # all resharded (or, units unknown, the root taken as negligible)
    else:
        # FSDP1 never reshards its root unit after forward, fairscale neither
        # (disable_reshard_on_root); FSDP2 under auto_wrap keeps it as torch's default does.
        kept = full[0]
    # fairscale's offload allocates the host gradient shard up front: held through forward.
    forward_grads = sharded if backend == "fairscale-fsdp" and options.offload else 0.0
    after = _Held(sharded, 0.0, sharded, optim)
    return {"after forward": _Held(sharded, kept, forward_grads, optim), "after backward": after, "after step": after}


def estimate(options: ShardingOptions, backend: str, stage: int, layout: Layout, world: int, *,
             precision: str = "fp32", optimizer: str = "adamw") -> Estimate:
    """Bytes one rank (the largest) holds at its peak under ``backend``'s plan (ZeRO ``stage``)."""
    bytes_ = PRECISIONS[precision]
    optim = OPTIMIZERS[optimizer]
    best: Estimate | None = None
    for phase, held in _phases(backend, options, stage, layout, world, optim).items():
        sharded_params = held.params * bytes_.param
        params = sharded_params + held.gathered * bytes_.param
        grads = held.grads * bytes_.grad
        optimizer_bytes = held.optim[0] * bytes_.master + held.optim[1] * bytes_.state
        host = sharded_params + grads + optimizer_bytes if options.offload else 0.0
        found = Estimate(params, grads, optimizer_bytes, host, phase)
        if best is None or found.total > best.total:
            best = found
    assert best is not None
    if stage == 3 and layout.exact and backend not in ("torch-zero", "fairscale-sdp"):
        full = _fsdp_shards(backend, layout, world)[1]
        best = dataclasses.replace(best, working=max(full) * bytes_.param)
    return best


# --------------------------------------------------------------------------- communication


def volume(options: ShardingOptions, backend: str, stage: int, layout: Layout, world: int, *,
           precision: str = "fp32", nnodes: int = 1) -> dict[str, float]:
    """Collective bytes one rank moves per optimizer step, by kind (``shardcompat.comm.KINDS``),
    counted as :class:`shardcompat.comm.CommCounter` counts them (an all-reduce twice its size).

    Gathers move parameters (``precision``'s parameter bytes), reductions gradients.  ``world``
    is the ranks parameters are sharded over; with hybrid sharding on ``nnodes`` nodes each
    rank also all-reduces its gradient shard across the nodes.
    """
    from .options import Stage

    bytes_ = PRECISIONS[precision]
    psi = float(layout.parameters)
    out = {"all-reduce": 0.0, "reduce-scatter": 0.0, "all-gather": 0.0, "broadcast": 0.0, "reduce": 0.0}
    if backend in ("torch-zero", "fairscale-sdp"):
        if backend == "fairscale-sdp" and options.stage is Stage.SIMPLE:
            out["reduce"] = psi * bytes_.grad  # ShardedDDP: each gradient to its owner
        elif backend == "torch-zero" and stage:
            out["reduce-scatter"] = psi * bytes_.grad  # DDP's hook: each bucket to its owners
        else:
            out["all-reduce"] = 2 * psi * bytes_.grad  # DDP
        if stage:
            out["broadcast"] = psi * bytes_.param  # each owner's updated parameters
        return out
    if layout.exact:
        shard, full, _ = _fsdp_shards(backend, layout, world)
    else:
        shard, full = [psi / world], [psi]
    gathered = sum(full)
    if stage == 2:
        again = 0.0
    elif backend == "torch-fsdp2" and not options.auto_wrap:
        again = gathered  # the whole model, resharded after forward, gathered again for backward
    elif not layout.exact and options.auto_wrap:
        again = gathered  # units unknown: the root taken as negligible
    else:
        again = gathered - full[0]  # every unit but the root, which stays gathered
    out["all-gather"] = (gathered + again) * bytes_.param
    out["reduce-scatter"] = gathered * bytes_.grad
    if options.hybrid and nnodes > 1:
        out["all-reduce"] = 2 * sum(shard) * bytes_.grad
    return out
