"""The class each public name resolves to, given the implementation ``_select`` chose."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._arguments import FAIRSCALE
from ._select import announce

__all__ = ["implementation"]


def _fairscale_oss() -> type[Any]:
    from fairscale.optim.oss import OSS

    oss: type[Any] = OSS
    return oss


def _loaders() -> dict[str, tuple[Callable[[], type[Any]], Callable[[], type[Any]]]]:
    """name -> (fairscale loader, native loader); imported lazily, so only the chosen one loads."""
    from . import _fsdp, _oss, _scaler, _sdp

    return {
        "OSS": (_fairscale_oss, lambda: _oss.NativeOSS),
        "ShardedDataParallel": (_sdp.fairscale_sharded_data_parallel, lambda: _sdp.NativeShardedDataParallel),
        "FullyShardedDataParallel": (
            _fsdp.fairscale_fully_sharded_data_parallel, lambda: _fsdp.NativeFullyShardedDataParallel,
        ),
        "ShardedGradScaler": (_scaler.fairscale_sharded_grad_scaler, lambda: _scaler.NativeShardedGradScaler),
    }


def implementation(name: str) -> type[Any]:
    fairscale, native = _loaders()[name]
    return fairscale() if announce(name).impl == FAIRSCALE else native()
