"""Turning the user's optimizer factory into what each backend needs."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..options import ShardingOptions
from ._base import OptimizerFactory, UnsupportedOptions

__all__ = [
    "OPTIMIZERS",
    "OptimizerGroups",
    "OptimizerRow",
    "UnsupportedOptimizer",
    "check_groups",
    "check_optimizer",
    "check_same_groups",
    "markdown_table",
    "optimizer_groups",
    "refused_optimizers",
]

GROUPS_TEXT = "<the factory's parameter groups>"  # how plans write the groups in a call


@dataclass(frozen=True)
class OptimizerGroups:
    """What a factory builds, as ``ZeroRedundancyOptimizer`` and fairscale's ``OSS`` take it.

    ``groups`` are the factory's parameter groups, each with its own hyperparameters (weight
    decay on weights only, a learning rate per group...): both wrappers accept such dicts and
    give every rank's shard the settings of the group each parameter came from.  ``defaults``
    are the class's constructor arguments, for what the wrapper reads from its keywords.
    """

    cls: type[torch.optim.Optimizer]
    defaults: dict[str, Any]
    groups: list[dict[str, Any]]


def optimizer_groups(factory: OptimizerFactory, params: Sequence[torch.nn.Parameter]) -> OptimizerGroups:
    """Build the factory's optimizer on the real ``params`` once and read back what it made.

    The optimizer built here holds no state yet (torch's optimizers create it at the first
    step) and is dropped; the wrapper builds each rank's own from the same class and groups.
    """
    built = factory(list(params))
    cls = type(built)
    accepted = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    defaults = {k: v for k, v in built.defaults.items() if takes_any or k in accepted}
    groups = [{**group, "params": list(group["params"])} for group in built.param_groups]
    return OptimizerGroups(cls, defaults, groups)


# --------------------------------------------------------------------------- which optimizer where
#
# How each backend hands parameters to the optimizer, which decides what an optimizer can do
# with them.  Element-wise optimizers (Adam, AdamW, SGD with momentum, Adagrad...) give the
# same update on any slice of a parameter; Adafactor does not: it factors the second moment
# into row and column statistics of each whole 2-D parameter and scales the update by the
# parameter's RMS, so it needs each parameter whole, as it is on one rank, or as a DTensor
# shard whose reductions span the whole parameter (FSDP2, for Transformers' Adafactor).
LAYOUTS = {
    "torch-zero": "whole parameters (ZeroRedundancyOptimizer gives each rank whole parameters to step)",
    "fairscale-sdp": "whole parameters (OSS gives each rank whole parameters to step)",
    "torch-fsdp1": "1-D slices of its flat parameter (use_orig_params views, flattened)",
    "torch-fsdp2": "DTensor shards of each parameter (dim-0 slices)",
    "fairscale-fsdp": "flat parameters, each holding the shard of several weights, biases and norms",
}
_FACTORED = "its factored second moments need whole 2-D parameters and its update is scaled by each parameter's RMS"
_FLAT_FACTORED = (f"{_FACTORED}, and this backend hands it {{layout}}: it would step each shard "
                  "as a separate 1-D parameter and silently train a different model than DDP")
_GROUPS_FLAT = ("its flat parameters hold weights, biases and norms alike, so the groups' different "
                "settings (e.g. no weight decay on biases and norms) cannot be kept")


@dataclass(frozen=True)
class OptimizerRow:
    """One kind of optimizer and, per backend, ``None`` (trains it as DDP does) or why not."""

    name: str
    classes: tuple[str, ...]  # "module.QualName" of the class or a base, matched over the MRO
    refused: dict[str, str]
    served: dict[str, str] = field(default_factory=dict)  # backend -> how, said beside "yes"


# Both Adafactors meet the flat layouts the same way.
_FLAT_FACTORED_REFUSALS = {b: _FLAT_FACTORED.format(layout=LAYOUTS[b]) for b in ("torch-fsdp1", "fairscale-fsdp")}

OPTIMIZERS: tuple[OptimizerRow, ...] = (
    OptimizerRow("Adam, AdamW, SGD (with momentum), Adagrad and other element-wise optimizers", (), {}),
    OptimizerRow(
        "Transformers' Adafactor (`--optim adafactor`)", ("transformers.optimization.Adafactor",),
        _FLAT_FACTORED_REFUSALS,
        # its state is built as DTensors placed like the parameter's reductions (_dtensor_adafactor)
        served={"torch-fsdp2": "DTensor state"},
    ),
    OptimizerRow(
        "`torch.optim.Adafactor`", ("torch.optim.Adafactor",),
        {
            **_FLAT_FACTORED_REFUSALS,
            "torch-fsdp2": f"{_FACTORED}; on FSDP2's DTensor shards its in-place row and column "
                           "reductions fail at the first step (sharding propagation of aten.pow_)",
        },
    ),
    OptimizerRow(
        "several parameter groups (e.g. no weight decay on biases and norms)", (),
        {"fairscale-fsdp": _GROUPS_FLAT},
        # groups made by shape (`p.dim()`) are refused: FSDP1 hands the factory 1-D views
        served={"torch-fsdp1": "by name"},
    ),
)
GROUPS_ROW = OPTIMIZERS[-1]


class UnsupportedOptimizer(UnsupportedOptions):
    """The backend cannot train this optimizer as DDP would; refused at ``prepare()``."""

    def __init__(self, backend: str, options: ShardingOptions, optimizer: str, reason: str, fix: str) -> None:
        ValueError.__init__(self, f"{backend} ('{options}') cannot train {optimizer}: {reason}. {fix}")
        self.backend, self.reason, self.fix, self.optimizer = backend, reason, fix, optimizer


def _class_names(cls: type) -> set[str]:
    return {f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__}


def optimizer_row(optimizer: torch.optim.Optimizer) -> OptimizerRow:
    """The table's row for this optimizer (its class or a base class); element-wise otherwise."""
    names = _class_names(type(optimizer))
    return next((row for row in OPTIMIZERS[1:-1] if names & set(row.classes)), OPTIMIZERS[0])


def serving(row: OptimizerRow) -> str:
    """Which options and backends do serve the row's optimizer, for refusals and ``explain``."""
    from . import get

    parts = []
    for name in LAYOUTS:
        if name not in row.refused:
            stages = sorted(s.value for s in get(name).serves if s is not None)
            parts.append(f"backend={name} ({', '.join(stages)})")
    return "Options that serve it: " + "; ".join(parts)


def _describe(optimizer: torch.optim.Optimizer) -> str:
    cls = type(optimizer)
    return f"{cls.__name__} ({cls.__module__}.{cls.__qualname__})"


def check_optimizer(backend: str, options: ShardingOptions, optimizer: torch.optim.Optimizer) -> None:
    """Refuse, before the first step, an optimizer this backend would crash on or train differently."""
    row = optimizer_row(optimizer)
    reason = row.refused.get(backend)
    if reason is not None:
        raise UnsupportedOptimizer(backend, options, _describe(optimizer), reason, serving(row))


def _settings(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


def check_groups(
    backend: str, options: ShardingOptions, model: torch.nn.Module, factory: OptimizerFactory,
) -> dict[int, int]:
    """Build ``factory`` on the model's own parameters (before the backend reshapes them) and
    check the optimizer and its groups; returns each parameter's group index, by ``id``.

    A flat-parameter backend (fairscale-fsdp) cannot keep groups whose settings differ.
    """
    built = factory(list(model.parameters()))
    check_optimizer(backend, options, built)
    if len({repr(_settings(g)) for g in built.param_groups}) > 1 and backend in GROUPS_ROW.refused:
        raise UnsupportedOptimizer(
            backend, options, f"{_describe(built)} with {len(built.param_groups)} parameter groups",
            GROUPS_ROW.refused[backend], serving(GROUPS_ROW) + "; or give one group",
        )
    return {id(p): i for i, g in enumerate(built.param_groups) for p in g["params"]}


def check_same_groups(
    backend: str, options: ShardingOptions, before: dict[int, int], optimizer: torch.optim.Optimizer,
) -> None:
    """The groups the factory made on the backend's parameters are those it made on the model's.

    FSDP1 keeps the parameter objects but hands them over as 1-D views: a factory that groups
    by shape (``p.dim() > 1`` for weight decay) puts every parameter in one group there.
    """
    after = {id(p): i for i, g in enumerate(optimizer.param_groups) for p in g["params"]}
    if after != {k: v for k, v in before.items() if k in after} or after.keys() != before.keys():
        raise UnsupportedOptimizer(
            backend, options, f"{_describe(optimizer)} with these parameter groups",
            f"the factory groups the parameters differently when it gets {LAYOUTS[backend]} "
            "(grouping by shape, e.g. p.dim() > 1, sees only 1-D views), so the groups' settings "
            "would land on other parameters than under DDP",
            "Group by name (model.named_parameters(), as the Transformers Trainer does). "
            + serving(OptimizerRow("", (), {backend: "groups by shape"})),
        )


def refused_optimizers(backend: str) -> list[str]:
    """The table's rows this backend refuses (``shardcompat explain`` lists them)."""
    return [row.name.split(" (")[0].replace("`", "") for row in OPTIMIZERS if backend in row.refused]


def markdown_table() -> str:
    """Which optimizer each backend trains as DDP does (docs/optimizers.md carries it)."""
    lines = ["| optimizer | " + " | ".join(LAYOUTS) + " |", "|---" * (len(LAYOUTS) + 1) + "|"]
    for row in OPTIMIZERS:
        cells = ["no" if name in row.refused else f"yes ({row.served[name]})" if name in row.served else "yes"
                 for name in LAYOUTS]
        lines.append(f"| {row.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
