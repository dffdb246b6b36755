"""``fairscale.nn.data_parallel.fully_sharded_data_parallel`` mirrored: FullyShardedDataParallel and its helpers.

What it serves and refuses is its row of ``shardcompat.fairscale._tree.TREE``.
"""

from typing import TYPE_CHECKING

from shardcompat.fairscale._tree import attach

if TYPE_CHECKING:  # the objects __getattr__ resolves, for type checkers
    from shardcompat.fairscale import FullyShardedDataParallel as FullyShardedDataParallel
    from shardcompat.fairscale import TrainingState as TrainingState
    from shardcompat.fairscale import auto_wrap_bn as auto_wrap_bn
    from shardcompat.fairscale import get_fsdp_instances as get_fsdp_instances

__getattr__, __dir__, __all__ = attach(__name__)
