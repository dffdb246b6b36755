"""``fairscale.nn.misc.flatten_params_wrapper`` mirrored: refused with the reason (see _unserved).

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""


from shardcompat.fairscale._tree import attach

__getattr__, __dir__, __all__ = attach(__name__)
