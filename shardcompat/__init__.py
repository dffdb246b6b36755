"""shardcompat: one option grammar and one adapter layer for ZeRO-style sharded data parallel.

    import shardcompat
    options = shardcompat.parse_options("zero_dp_3 offload")
    prepared = shardcompat.prepare(model, lambda p: torch.optim.AdamW(p, lr=1e-3), options)

Importing this package does not import torch; ``prepare`` and friends load it on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .arguments import add_sharded_ddp_argument, sharded_ddp_field
from .options import (
    Precision,
    Prefetch,
    ShardingOptions,
    ShardingOptionsConflict,
    ShardingOptionsError,
    ShardingOptionsWarning,
    Stage,
    parse_options,
)

if TYPE_CHECKING:
    from .adapter import PrepareError, prepare
    from .checkpoint import load_checkpoint
    from .prepared import Prepared

__version__ = "0.1.0"

__all__ = [
    "Precision",
    "Prefetch",
    "PrepareError",
    "Prepared",
    "ShardingOptions",
    "ShardingOptionsConflict",
    "ShardingOptionsError",
    "ShardingOptionsWarning",
    "Stage",
    "__version__",
    "add_sharded_ddp_argument",
    "load_checkpoint",
    "parse_options",
    "prepare",
    "sharded_ddp_field",
]

_LAZY = {
    "prepare": "adapter",
    "PrepareError": "adapter",
    "Prepared": "prepared",
    "load_checkpoint": "checkpoint",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'shardcompat' has no attribute {name!r}")
