"""``fairscale.nn.wrap`` mirrored: enable_wrap, wrap, auto_wrap and the policies.

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from shardcompat.fairscale._tree import attach

__getattr__, __dir__, __all__ = attach(__name__)
