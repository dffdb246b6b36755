"""``fairscale.nn.misc`` mirrored: checkpoint_wrapper's home before 0.3.7, and FSDP's internals.

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from typing import TYPE_CHECKING

from shardcompat.fairscale._tree import attach

if TYPE_CHECKING:  # the objects __getattr__ resolves, for type checkers
    from shardcompat.fairscale import checkpoint_wrapper as checkpoint_wrapper

__getattr__, __dir__, __all__ = attach(__name__)
