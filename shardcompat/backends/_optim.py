"""Turning the user's optimizer factory into what each backend needs."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ._base import OptimizerFactory

__all__ = ["optimizer_spec"]


def optimizer_spec(factory: OptimizerFactory) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The optimizer class and constructor kwargs a factory builds.

    ``ZeroRedundancyOptimizer`` and fairscale's ``OSS`` take a class and kwargs, not a factory:
    build the optimizer once on a throwaway parameter and read them back from ``defaults``.
    """
    probe = factory([torch.nn.Parameter(torch.zeros(1))])
    cls = type(probe)
    accepted = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    kwargs = {k: v for k, v in probe.defaults.items() if takes_any or k in accepted}
    return cls, kwargs
