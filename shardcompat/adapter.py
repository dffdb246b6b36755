"""``prepare``: options in, a trained-ready :class:`~shardcompat.prepared.Prepared` out."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import torch
import torch.distributed as dist

from . import _exit_guard, _rng
from .backends import OptimizerFactory, Placement, get, resolve
from .backends._unused import SETTING
from .options import OptionsInput, parse_options
from .prepared import Prepared, shared_names

__all__ = ["PrepareError", "placement_from_env", "prepare"]


class PrepareError(ValueError):
    """``prepare`` was called in a way that cannot work; the message says how to fix it."""


_FACTORY_EXAMPLE = (
    "pass a factory so the optimizer is built on the shards after wrapping, e.g. "
    "optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3), "
    "or optimizer=torch.optim.AdamW with optimizer_kwargs={'lr': 1e-3}"
)


def _factory(optimizer: Any, optimizer_kwargs: dict[str, Any] | None) -> OptimizerFactory:
    if isinstance(optimizer, torch.optim.Optimizer):
        raise PrepareError(
            f"prepare() got an optimizer instance ({type(optimizer).__name__}); {_FACTORY_EXAMPLE}"
        )
    if not callable(optimizer):
        raise PrepareError(f"prepare() needs an optimizer factory, got {optimizer!r}; {_FACTORY_EXAMPLE}")
    if optimizer_kwargs:
        return functools.partial(optimizer, **optimizer_kwargs)
    factory: OptimizerFactory = optimizer
    return factory


def _check_model(model: torch.nn.Module) -> None:
    wrapped = [
        type(m).__name__
        for m in model.modules()
        if type(m).__name__
        in ("DistributedDataParallel", "FullyShardedDataParallel", "ShardedDataParallel")
        or type(m).__name__.startswith("FSDP")
    ]
    if wrapped:
        raise PrepareError(
            f"the model is already wrapped ({wrapped[0]}); pass the plain nn.Module and let "
            "prepare() wrap it (unwrap with model.module)"
        )


def placement_from_env(device: str | torch.device | None = None, process_group: Any = None) -> Placement:
    """The placement of this process in the initialised default process group."""
    if not dist.is_available() or not dist.is_initialized():
        raise PrepareError(
            "prepare() needs torch.distributed to be initialised first: call "
            "torch.distributed.init_process_group('gloo' or 'nccl') (torchrun sets the "
            "environment), or use shardcompat.launch.spawn to start local ranks"
        )
    world = dist.get_world_size(process_group)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if device is None:
        device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend(process_group) == "nccl" else "cpu"
    return Placement(
        world_size=world,
        rank=dist.get_rank(process_group),
        local_world_size=local,
        device=str(device),
        process_group=process_group,
    )


def prepare(
    model: torch.nn.Module,
    optimizer: Any,
    options: OptionsInput = "",
    *,
    backend: str = "auto",
    device: str | torch.device | None = None,
    process_group: Any = None,
    optimizer_kwargs: dict[str, Any] | None = None,
    find_unused_parameters: bool | None = None,
) -> Prepared:
    """Wrap ``model`` for sharded data parallel training as ``options`` ask.

    ``optimizer`` is a factory ``params -> Optimizer`` (or an optimizer class with
    ``optimizer_kwargs``): sharded backends must build it on the shards after wrapping.
    ``backend`` is ``auto`` (the first capable backend, native torch first), ``torch``,
    ``fairscale`` or a backend name; a ``backend=`` inside ``options`` counts when this is auto.
    ``find_unused_parameters`` goes to the ``DistributedDataParallel`` a backend builds; ``None``
    is the Trainer's default (on for a Transformers model not checkpointing activations).

    It leaves every random stream (torch CPU and CUDA, NumPy, Python) as it found it: probing,
    planning and wrapping are not training, and a wrapper that draws (fairscale FSDP does) would
    otherwise give this rank other dropout masks than DDP would.
    """
    opts = parse_options(options, stacklevel=3)
    factory = _factory(optimizer, optimizer_kwargs)
    _check_model(model)
    placement = placement_from_env(device, process_group)
    _exit_guard.install()
    with _rng.unchanged():
        plan = resolve(opts, backend, placement)
        if find_unused_parameters is not None:
            plan = dataclasses.replace(plan, settings={**plan.settings, SETTING: find_unused_parameters})
        tied = shared_names(model)  # before a backend flattens the parameters away
        prepared = get(plan.backend).wrap(model, factory, plan, placement)
    prepared.tied = tied
    return prepared
