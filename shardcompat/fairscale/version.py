"""``fairscale.version`` mirrored: ``__version_tuple__``, the fairscale API the facade serves.

What it serves is its row of ``shardcompat.fairscale._tree.TREE``; the value is
:func:`shardcompat.fairscale._version.fairscale_api_version`'s.
"""

from typing import TYPE_CHECKING

from shardcompat.fairscale._tree import attach

if TYPE_CHECKING:  # the objects __getattr__ resolves, for type checkers
    from shardcompat.fairscale._version import __version_tuple__ as __version_tuple__

__getattr__, __dir__, __all__ = attach(__name__)
