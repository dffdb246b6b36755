"""The object each public name resolves to, given the implementation ``_select`` chose."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ._arguments import FAIRSCALE
from ._select import announce

__all__ = ["implementation"]


def _from(module: str, name: str) -> Callable[[], Any]:
    return lambda: getattr(importlib.import_module(module), name)


def _loaders() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """name -> (fairscale loader, native loader); imported lazily, so only the chosen one loads."""
    from . import _fsdp, _scaler, _sdp

    native = {name: _from(f"{__package__}.{module}", attr) for name, (module, attr) in {
        "OSS": ("_oss", "NativeOSS"),
        "ShardedDataParallel": ("_sdp", "NativeShardedDataParallel"),
        "FullyShardedDataParallel": ("_fsdp", "NativeFullyShardedDataParallel"),
        "TrainingState": ("_fsdp", "TrainingState"),
        "checkpoint_wrapper": ("_checkpoint", "checkpoint_wrapper"),
        "is_checkpointing": ("_checkpoint", "is_checkpointing"),
        "is_recomputing": ("_checkpoint", "is_recomputing"),
        "ShardedGradScaler": ("_scaler", "NativeShardedGradScaler"),
    }.items()}
    fairscale: dict[str, Callable[[], Any]] = {
        "OSS": _from("fairscale.optim.oss", "OSS"),
        "ShardedDataParallel": _sdp.fairscale_sharded_data_parallel,
        "FullyShardedDataParallel": _fsdp.fairscale_fully_sharded_data_parallel,
        "TrainingState": _from("fairscale.nn.data_parallel.fully_sharded_data_parallel", "TrainingState"),
        "checkpoint_wrapper": _from("fairscale.nn.checkpoint", "checkpoint_wrapper"),
        "is_checkpointing": _from("fairscale.nn.checkpoint", "is_checkpointing"),
        "is_recomputing": _from("fairscale.nn.checkpoint", "is_recomputing"),
        "ShardedGradScaler": _scaler.fairscale_sharded_grad_scaler,
    }
    return {name: (fairscale[name], native[name]) for name in native}


def implementation(name: str) -> Any:
    fairscale, native = _loaders()[name]
    return fairscale() if announce(name).impl == FAIRSCALE else native()
