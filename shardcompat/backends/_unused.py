"""Whether a ``DistributedDataParallel`` must look for parameters the loss did not use.

DDP raises at the second step when a parameter got no gradient (an untied head's bias, a
pooler the loss skips) unless told to look for them.  The Trainer tells it by default for a
Transformers model that is not checkpointing activations, so a script that ran under the
Trainer's DDP must run the same when shardcompat builds the DDP; ``prepare()``'s own default
follows that rule, and a caller's explicit answer wins.  FSDP and fairscale's ShardedDDP
tolerate unused parameters and never ask.
"""

from __future__ import annotations

from torch import nn

__all__ = ["SETTING", "find_unused"]

SETTING = "find_unused_parameters"  # the plan setting prepare() records the caller's answer in


def find_unused(model: nn.Module, asked: bool | None) -> bool:
    """``asked`` if given, else the Trainer's default for ``model``."""
    if asked is not None:
        return asked
    # 5.x renamed the property (the old name warns); 4.x has only the old one.
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            checkpointing = getattr(model, name)
            return isinstance(checkpointing, bool) and not checkpointing
    return False
