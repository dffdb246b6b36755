"""``fairscale.nn.misc`` mirrored: checkpoint_wrapper's home before 0.3.7, and FSDP's internals.

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from shardcompat.fairscale._tree import attach

__getattr__, __dir__, __all__ = attach(__name__)
