"""Hugging Face Trainer integration: legacy ``--sharded_ddp`` scripts run, and shard, on today's Transformers.

Three ways in (``pip install 'shardcompat[transformers]'``)::

    from shardcompat.transformers import TrainingArguments, Trainer   # 1. drop-in imports
    shardcompat run --nproc 2 run_clm.py --sharded_ddp zero_dp_3 offload ...   # 2. no edit at all
    shardcompat-migrate . --write                                      # 3. move the source on

With ``sharded_ddp`` set, the Trainer wraps the model with :func:`shardcompat.prepare` (any
backend) instead of Accelerate's DDP/FSDP.  For Transformers' own FSDP instead,
:func:`to_trainer_kwargs` translates the options.  Importing this package does not import
Transformers; the classes load it on first use.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ..options import OptionsInput, parse_options

if TYPE_CHECKING:
    from ._arguments import (
        HfArgumentParser,
        Seq2SeqTrainingArguments,
        ShardedDDPArgumentError,
        ShardedDDPList,
        TrainingArguments,
        sharding_options,
    )
    from ._dropin import dropins, install, run_script
    from ._group import ProcessGroupMismatch
    from ._trainer import Seq2SeqTrainer, ShardedTrainerError, Trainer

__all__ = [
    "HfArgumentParser",
    "ProcessGroupMismatch",
    "Seq2SeqTrainer",
    "Seq2SeqTrainingArguments",
    "ShardedDDPArgumentError",
    "ShardedDDPList",
    "ShardedTrainerError",
    "Trainer",
    "TrainingArguments",
    "dropins",
    "install",
    "run_script",
    "sharding_options",
    "to_trainer_kwargs",
]

_LAZY = {
    "HfArgumentParser": "_arguments",
    "Seq2SeqTrainingArguments": "_arguments",
    "ShardedDDPArgumentError": "_arguments",
    "ShardedDDPList": "_arguments",
    "TrainingArguments": "_arguments",
    "sharding_options": "_arguments",
    "dropins": "_dropin",
    "install": "_dropin",
    "run_script": "_dropin",
    "ProcessGroupMismatch": "_group",
    "Seq2SeqTrainer": "_trainer",
    "ShardedTrainerError": "_trainer",
    "Trainer": "_trainer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'shardcompat.transformers' has no attribute {name!r}")


def to_trainer_kwargs(options: OptionsInput) -> dict[str, Any]:
    """``TrainingArguments`` keywords for Transformers' own FSDP: ``fsdp=True`` and ``fsdp_config``.

    The form current releases prefer (see :meth:`ShardingOptions.to_hf_fsdp_config
    <shardcompat.options.ShardingOptions.to_hf_fsdp_config>`, which also gives the caveats as
    data).  What has no exact equivalent there (``simple``/``zero_dp_1`` become ZeRO-2,
    ``bucket_cap_mb=``, ``backend=``...) is said in one ``UserWarning`` per caveat, so nothing
    is dropped silently.  Sharding off gives ``{}``::

        TrainingArguments(output_dir, **to_trainer_kwargs("zero_dp_3 offload auto_wrap"))
    """
    translated = parse_options(options, stacklevel=3).to_hf_fsdp_config()
    for caveat in translated.caveats:
        warnings.warn(f"to_trainer_kwargs: {caveat}", UserWarning, stacklevel=2)
    return translated.trainer_kwargs()
