"""``fairscale.nn.wrap.auto_wrap`` mirrored: the wrap helpers and ConfigAutoWrap.

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from typing import TYPE_CHECKING

from shardcompat.fairscale._tree import attach

if TYPE_CHECKING:  # the objects __getattr__ resolves, for type checkers
    from shardcompat.fairscale import auto_wrap as auto_wrap
    from shardcompat.fairscale import config_auto_wrap_policy as config_auto_wrap_policy
    from shardcompat.fairscale import default_auto_wrap_policy as default_auto_wrap_policy
    from shardcompat.fairscale import enable_wrap as enable_wrap
    from shardcompat.fairscale import wrap as wrap
    from shardcompat.fairscale._wrap import ConfigAutoWrap as ConfigAutoWrap

__getattr__, __dir__, __all__ = attach(__name__)
