"""``fairscale.optim`` mirrored: OSS (AdaScale, GradScaler and Adam are refused with the reason).

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from typing import TYPE_CHECKING

from shardcompat.fairscale._tree import attach

if TYPE_CHECKING:  # the objects __getattr__ resolves, for type checkers
    from shardcompat.fairscale import OSS as OSS

__getattr__, __dir__, __all__ = attach(__name__)
