"""``fairscale.optim`` mirrored: OSS (AdaScale, GradScaler and Adam are refused with the reason).

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from shardcompat.fairscale._tree import attach

__getattr__, __dir__, __all__ = attach(__name__)
