"""``fairscale.utils.version`` mirrored: torch_version.

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from typing import TYPE_CHECKING

from shardcompat.fairscale._tree import attach

if TYPE_CHECKING:  # the objects __getattr__ resolves, for type checkers
    from shardcompat.fairscale._version import torch_version as torch_version

__getattr__, __dir__, __all__ = attach(__name__)
