"""A drop-in for code written against fairscale: change the import line, keep the code.

::

    # from fairscale.nn.data_parallel import ShardedDataParallel, FullyShardedDataParallel
    # from fairscale.optim import OSS
    # from fairscale.optim.grad_scaler import ShardedGradScaler
    # from fairscale.nn.wrap import auto_wrap, enable_wrap, wrap
    from shardcompat.fairscale import (ShardedDataParallel, FullyShardedDataParallel, OSS,
                                       ShardedGradScaler, auto_wrap, enable_wrap, wrap)

Each class is real fairscale where the capability probe says it works (with its torch-2
traps fixed), else native torch with fairscale's signature; :func:`describe` says which
(``shardcompat explain --fairscale``), and the choice is logged at INFO on
``shardcompat.fairscale``.  The classes are resolved on first access, so importing this
package imports neither fairscale nor torch's distributed modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._wrap import auto_wrap, default_auto_wrap_policy, enable_wrap, wrap

if TYPE_CHECKING:
    from ._fsdp import NativeFullyShardedDataParallel as FullyShardedDataParallel
    from ._oss import NativeOSS as OSS
    from ._scaler import NativeShardedGradScaler as ShardedGradScaler
    from ._sdp import NativeShardedDataParallel as ShardedDataParallel

__all__ = [
    "OSS",
    "FullyShardedDataParallel",
    "ShardedDataParallel",
    "ShardedGradScaler",
    "auto_wrap",
    "default_auto_wrap_policy",
    "describe",
    "enable_wrap",
    "wrap",
]


def describe() -> list[str]:
    """Which implementation serves each class here, and why: the lines ``explain --fairscale`` prints."""
    from ._select import describe as _describe

    return _describe()


def __getattr__(name: str) -> Any:
    from ._select import FAMILIES

    if name not in FAMILIES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ._classes import implementation

    return implementation(name)
