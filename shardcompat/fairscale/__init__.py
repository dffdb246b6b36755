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
package imports neither fairscale nor torch's distributed modules.  The helpers fairscale
users import beside the classes are served too (``checkpoint_wrapper``, ``auto_wrap_bn``,
``get_fsdp_instances``, ``TrainingState``...); asking for a fairscale name that is not served
raises ``AttributeError`` saying why and what to use instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._wrap import (
    auto_wrap,
    auto_wrap_bn,
    config_auto_wrap_policy,
    default_auto_wrap_policy,
    enable_wrap,
    get_fsdp_instances,
    wrap,
)

if TYPE_CHECKING:
    from ._checkpoint import checkpoint_wrapper, is_checkpointing, is_recomputing
    from ._fsdp import NativeFullyShardedDataParallel as FullyShardedDataParallel
    from ._fsdp import TrainingState
    from ._oss import NativeOSS as OSS
    from ._scaler import NativeShardedGradScaler as ShardedGradScaler
    from ._sdp import NativeShardedDataParallel as ShardedDataParallel

__all__ = [
    "OSS",
    "FullyShardedDataParallel",
    "ShardedDataParallel",
    "ShardedGradScaler",
    "TrainingState",
    "auto_wrap",
    "auto_wrap_bn",
    "checkpoint_wrapper",
    "config_auto_wrap_policy",
    "default_auto_wrap_policy",
    "describe",
    "enable_wrap",
    "get_fsdp_instances",
    "is_checkpointing",
    "is_recomputing",
    "wrap",
]


def describe() -> list[str]:
    """Which implementation serves each class here, and why: the lines ``explain --fairscale`` prints."""
    from ._select import describe as _describe

    return _describe()


def __getattr__(name: str) -> Any:
    from ._select import FAMILIES
    from ._unserved import UNSERVED, refusal

    if name in UNSERVED:
        raise AttributeError(refusal(name))
    if name not in FAMILIES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ._classes import implementation

    return implementation(name)
