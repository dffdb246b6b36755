"""A drop-in for code written against fairscale: change the import prefix, keep the code.

::

    # from fairscale.nn.data_parallel import ShardedDataParallel, FullyShardedDataParallel
    # from fairscale.optim.oss import OSS
    # from fairscale.optim.grad_scaler import ShardedGradScaler
    # from fairscale.nn.wrap import auto_wrap, enable_wrap, wrap
    from shardcompat.fairscale.nn.data_parallel import ShardedDataParallel, FullyShardedDataParallel
    from shardcompat.fairscale.optim.oss import OSS
    from shardcompat.fairscale.optim.grad_scaler import ShardedGradScaler
    from shardcompat.fairscale.nn.wrap import auto_wrap, enable_wrap, wrap

The package mirrors fairscale's public module tree (``_tree.TREE``): each path serves the
names fairscale offered there, the same object on every path (the flat names here too).  Each
class is real fairscale where the capability probe says it works (with its torch-2 traps
fixed), else native torch with fairscale's signature; :func:`describe` says which
(``shardcompat explain --fairscale``), and the choice is logged at INFO on
``shardcompat.fairscale``.  Names are resolved on first access, so importing any of these
modules imports neither fairscale nor torch's distributed modules.  A fairscale name or
module the facade does not serve says why and what to use instead: as an ``ImportError`` on
every import form, as an ``AttributeError`` on attribute access (``_unserved``).
``__version__`` is the fairscale API served (the installed fairscale's own, else 0.4.13, the
release the native classes mirror), so a gate such as the Transformers 4.x Trainer's
``version.parse(fairscale.__version__) >= version.parse("0.3")`` takes the branch it took.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._tree import attach, install

if TYPE_CHECKING:
    from ._checkpoint import checkpoint_wrapper, is_checkpointing, is_recomputing
    from ._fsdp import NativeFullyShardedDataParallel as FullyShardedDataParallel
    from ._fsdp import TrainingState
    from ._oss import NativeOSS as OSS
    from ._scaler import NativeShardedGradScaler as ShardedGradScaler
    from ._sdp import NativeShardedDataParallel as ShardedDataParallel
    from ._version import __version__ as __version__
    from ._version import __version_tuple__ as __version_tuple__
    from ._wrap import (
        auto_wrap,
        auto_wrap_bn,
        config_auto_wrap_policy,
        default_auto_wrap_policy,
        enable_wrap,
        get_fsdp_instances,
        wrap,
    )

__all__ = [  # _tree.TREE[""].served and describe (a test checks they agree)
    "OSS",
    "FullyShardedDataParallel",
    "ShardedDataParallel",
    "ShardedGradScaler",
    "TrainingState",
    "auto_wrap",
    "auto_wrap_bn",
    "checkpoint_wrapper",
    "config_auto_wrap_policy",
    "default_auto_wrap_policy",
    "describe",
    "enable_wrap",
    "get_fsdp_instances",
    "is_checkpointing",
    "is_recomputing",
    "wrap",
]

install()
__getattr__, __dir__, _ = attach(__name__)


def describe() -> list[str]:
    """Which implementation serves each class here, and why: the lines ``explain --fairscale`` prints."""
    from ._select import describe as _describe

    return _describe()

