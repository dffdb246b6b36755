"""``ShardedDDPOption``: the enum 4.x Transformers had at ``transformers.trainer_utils`` (and that
``transformers.trainer`` imported), with 4.30's values, for the code of that era that compares
``self.sharded_ddp`` or ``args.sharded_ddp`` against it.

Plain data, no Transformers import: the legacy-names layer serves it at its 4.x import paths on
releases that lack it, and the Trainer integration fills ``self.sharded_ddp`` from
:func:`trainer_value`, as 4.30's ``Trainer.__init__`` did.
"""

from __future__ import annotations

import enum
from typing import Any

from ..options import ShardingOptions, Stage

__all__ = ["ShardedDDPOption", "args_value", "trainer_value"]


class ShardedDDPOption(str, enum.Enum):
    """4.30's ``transformers.trainer_utils.ShardedDDPOption`` (an ``ExplicitEnum``: a ``str``, and a
    bad value is a ``ValueError`` listing the valid ones)."""

    SIMPLE = "simple"
    ZERO_DP_2 = "zero_dp_2"
    ZERO_DP_3 = "zero_dp_3"
    OFFLOAD = "offload"
    AUTO_WRAP = "auto_wrap"

    @classmethod
    def _missing_(cls, value: Any) -> Any:
        raise ValueError(
            f"{value} is not a valid {cls.__name__}, please select one of {list(cls._value2member_map_)}"
        )


# What each of shardcompat's stages was called in 4.30's enum (zero_dp_1 shards less than simple
# did, so code that branches on SIMPLE builds the same OSS optimizer for it).
_STAGE = {
    Stage.SIMPLE: ShardedDDPOption.SIMPLE,
    Stage.ZERO_DP_1: ShardedDDPOption.SIMPLE,
    Stage.ZERO_DP_2: ShardedDDPOption.ZERO_DP_2,
    Stage.ZERO_DP_3: ShardedDDPOption.ZERO_DP_3,
}


def args_value(options: ShardingOptions) -> list[ShardedDDPOption]:
    """``args.sharded_ddp`` as 4.30 held it: the list of the enum's members the options name."""
    out = [_STAGE[options.stage]] if options.stage in _STAGE else []
    out += [m for m, on in ((ShardedDDPOption.OFFLOAD, options.offload),
                            (ShardedDDPOption.AUTO_WRAP, options.auto_wrap)) if on]
    return out


def trainer_value(options: ShardingOptions) -> ShardedDDPOption | None:
    """``trainer.sharded_ddp`` as 4.30's ``Trainer.__init__`` set it: the stage's member, or None."""
    return _STAGE.get(options.stage) if options.stage is not None else None
