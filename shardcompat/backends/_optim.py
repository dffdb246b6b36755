"""Turning the user's optimizer factory into what each backend needs."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ._base import OptimizerFactory

__all__ = ["OptimizerGroups", "optimizer_groups"]

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
