"""``ShardedDDPOption``: the enum 4.x Transformers had at ``transformers.trainer_utils`` (and that
``transformers.trainer`` imported), with 4.30's values, and 4.30's readings of every sharding
attribute, for the code of that era that reads ``self.sharded_ddp``, ``args.sharded_ddp``,
``args.fsdp`` or ``args.fsdp_config``.

Plain data, no Transformers import: the legacy-names layer serves the enum at its 4.x import
paths on releases that lack it, and the Trainer integration fills the attributes from
:func:`args_value`, :func:`fsdp_config_value` and :func:`trainer_value`, as 4.30's
``TrainingArguments.__post_init__`` and ``Trainer.__init__`` did.  :data:`ATTRIBUTES` lists
every attribute those two methods set for sharding (a test derives the list from 4.30.2's
source) and how each is served.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..options import ShardingOptions, Stage

__all__ = ["ATTRIBUTES", "ShardedDDPOption", "args_value", "fsdp_config_value", "trainer_value"]


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


# 4.30's fsdp_config keys that 4.31 renamed (it dropped the "fsdp_" prefix of every key).
_PREFIXED = ("min_num_params", "transformer_layer_cls_to_wrap", "backward_prefetch")


def fsdp_config_value(given: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """``args.fsdp_config`` as 4.30's ``__post_init__`` left it: the given dict (or JSON file) with
    ``fsdp_min_num_params``, ``xla`` and ``xla_fsdp_grad_ckpt`` filled in and a single class to wrap
    made a list.  Keys in 4.31's unprefixed spelling (which the legacy ``--fsdp_min_num_params``
    and ``--fsdp_transformer_layer_cls_to_wrap`` map to) take 4.30's ``fsdp_`` prefix back."""
    loaded: Mapping[str, Any] = json.loads(Path(given).read_text(encoding="utf-8")) if isinstance(given, str) else given or {}
    config = dict(loaded)
    for key in _PREFIXED:
        if key in config:
            old = config.pop(key)
            config.setdefault(f"fsdp_{key}", old)
    config["fsdp_min_num_params"] = config.get("fsdp_min_num_params", 0)
    if isinstance(config.get("fsdp_transformer_layer_cls_to_wrap"), str):
        config["fsdp_transformer_layer_cls_to_wrap"] = [config["fsdp_transformer_layer_cls_to_wrap"]]
    config["xla"] = config.get("xla", False)
    config["xla_fsdp_grad_ckpt"] = config.get("xla_fsdp_grad_ckpt", False)
    return config


#: Every attribute 4.30.2's ``TrainingArguments.__post_init__`` and ``Trainer.__init__`` set for
#: sharding (assigned under a test of ``sharded_ddp``/``fsdp``, or named for them; derived from that
#: source by tests/transformers/test_sharding_attributes.py), and what it holds where the installed
#: release lacks it.
ATTRIBUTES: dict[tuple[str, str], str] = {
    ("TrainingArguments", "sharded_ddp"): "the list of ShardedDDPOption members ([] when off), with .options",
    ("TrainingArguments", "fsdp"): "[] while the release's own FSDP is off; with --fsdp, the release's value",
    ("TrainingArguments", "fsdp_config"): "4.30's dict (fsdp_config_value) while the release's own FSDP is off; "
                                          "with --fsdp, the release's dict, which its FSDP reads",
    ("TrainingArguments", "xla_fsdp_config"): "set only for XLA FSDP, by the release that runs it",
    ("Trainer", "sharded_ddp"): "the stage's ShardedDDPOption member, or None (trainer_value)",
    ("Trainer", "fsdp"): "None while the release's own FSDP is off; with --fsdp, its ShardingStrategy",
    ("Trainer", "backward_prefetch"): "set only with --fsdp (refused: Accelerate's FSDP plugin holds it)",
    ("Trainer", "forward_prefetch"): "set only with --fsdp (refused: Accelerate's FSDP plugin holds it)",
    ("Trainer", "limit_all_gathers"): "set only with --fsdp (refused: Accelerate's FSDP plugin holds it)",
    ("Trainer", "place_model_on_device"): "False for zero_dp_2/zero_dp_3, as 4.30 left the placement to the "
                                          "sharding; else the release's",
    ("Trainer", "use_cuda_amp"): "autocast on CUDA in a sharded run",
    ("Trainer", "use_cpu_amp"): "bf16 autocast on CPU in a sharded run",
    ("Trainer", "amp_dtype"): "the autocast dtype of a sharded run with --fp16/--bf16 (unset otherwise)",
    ("Trainer", "do_grad_scaling"): "fp16 on CUDA in a sharded run",
    ("Trainer", "scaler"): "the backend's grad scaler in a sharded --fp16 run on CUDA (unset otherwise)",
    ("Trainer", "use_apex"): "False: apex is gone",
}
