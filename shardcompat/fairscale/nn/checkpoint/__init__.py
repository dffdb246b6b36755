"""``fairscale.nn.checkpoint`` mirrored: activation checkpointing (0.3.7 on).

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from typing import TYPE_CHECKING

from shardcompat.fairscale._tree import attach

if TYPE_CHECKING:  # the objects __getattr__ resolves, for type checkers
    from shardcompat.fairscale import checkpoint_wrapper as checkpoint_wrapper
    from shardcompat.fairscale import is_checkpointing as is_checkpointing
    from shardcompat.fairscale import is_recomputing as is_recomputing

__getattr__, __dir__, __all__ = attach(__name__)
