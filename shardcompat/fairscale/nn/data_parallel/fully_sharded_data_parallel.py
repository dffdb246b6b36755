"""``fairscale.nn.data_parallel.fully_sharded_data_parallel`` mirrored: FullyShardedDataParallel and its helpers.

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from shardcompat.fairscale._tree import attach

__getattr__, __dir__, __all__ = attach(__name__)
