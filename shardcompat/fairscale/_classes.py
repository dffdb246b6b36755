"""The object each served name resolves to: for a class family, the implementation ``_select``
chose; for shardcompat's own helpers (the wrap functions, ``torch_version``), always those.

Every mirrored path resolves a name here, so ``shardcompat.fairscale.nn.wrap.auto_wrap is
shardcompat.fairscale.auto_wrap`` and the same holds for the classes, whichever library serves them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ._arguments import FAIRSCALE
from ._select import FAMILIES, announce
from ._unserved import UnservedAttribute

__all__ = ["OWN", "implementation"]

# shardcompat's own, whichever library serves the classes: name -> private module.
OWN = {
    **{name: "_wrap" for name in ("ConfigAutoWrap", "auto_wrap", "auto_wrap_bn", "config_auto_wrap_policy",
                                  "default_auto_wrap_policy", "enable_wrap", "get_fsdp_instances", "wrap")},
    **{name: "_version" for name in ("torch_version", "__version__", "__version_tuple__")},
}


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
        "disable_checkpointing": ("_checkpoint", "disable_checkpointing"),
        "ShardedGradScaler": ("_scaler", "NativeShardedGradScaler"),
    }.items()}
    fairscale: dict[str, Callable[[], Any]] = {
        "OSS": _from("fairscale.optim.oss", "OSS"),
        "ShardedDataParallel": _sdp.fairscale_sharded_data_parallel,
        "FullyShardedDataParallel": _fsdp.fairscale_fully_sharded_data_parallel,
        "TrainingState": _from("fairscale.nn.data_parallel.fully_sharded_data_parallel", "TrainingState"),
        **{name: _fairscale_checkpoint(name) for name in (
            "checkpoint_wrapper", "is_checkpointing", "is_recomputing", "disable_checkpointing")},
        "ShardedGradScaler": _scaler.fairscale_sharded_grad_scaler,
    }
    return {name: (fairscale[name], native[name]) for name in native}


_CHECKPOINT_HOMES = ("fairscale.nn.checkpoint.checkpoint_activations",  # 0.3.7 on
                     "fairscale.nn.misc.checkpoint_activations")  # before


def _fairscale_checkpoint(name: str) -> Callable[[], Any]:
    """fairscale's checkpointing helper ``name`` from wherever this release keeps it: the ones
    its FSDP (served beside them) reads.  A release without it says so."""

    def load() -> Any:
        for home in _CHECKPOINT_HOMES:
            try:
                module = importlib.import_module(home)
            except ImportError:
                continue
            if hasattr(module, name):
                return getattr(module, name)
        raise UnservedAttribute(
            f"{name}: the fairscale installed here serves FullyShardedDataParallel and checkpoint_wrapper but "
            f"predates {name}, which only that release's wrapper could honour; upgrade fairscale or set "
            "SHARDCOMPAT_FAIRSCALE=native", name=name)

    return load


def implementation(name: str) -> Any:
    if name not in FAMILIES:
        return getattr(importlib.import_module(f"{__package__}.{OWN[name]}"), name)
    fairscale, native = _loaders()[name]
    return fairscale() if announce(name).impl == FAIRSCALE else native()
