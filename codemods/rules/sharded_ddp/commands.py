"""libcst codemod commands for legacy ``sharded_ddp`` usage: the rules of
:mod:`codemods.rules.sharded_ddp.python` for libcst's own runner (``.libcst.codemod.yaml``)::

    python -m libcst.tool codemod sharded_ddp.commands.MigrateShardedDDP --no-format src/
    python -m libcst.tool codemod sharded_ddp.commands.MigrateShardedDDP --no-format --to fsdp src/

Each rule family is a command of its own too (:class:`LegacyValues`, :class:`LegacyDeclarations`,
:class:`LegacyCommandLines`, :class:`LegacyReview`).  Under libcst's runner there is no scope
evidence: every file given is edited.  ``shardcompat-migrate`` runs the same rules without
this module (see :mod:`codemods.formats.python`).
"""

from __future__ import annotations

from ..command import RuleCommand
from .python import LEGACY, CommandLines, Declarations, Review, Values

__all__ = [
    "LegacyCommandLines",
    "LegacyDeclarations",
    "LegacyReview",
    "LegacyValues",
    "MigrateShardedDDP",
]


class MigrateShardedDDP(RuleCommand):
    """Every rule for legacy ``sharded_ddp`` usage, in two traversals at most."""

    DESCRIPTION = "Migrate legacy boolean --sharded_ddp/sharded_ddp=True usage to the list syntax."
    RULES = LEGACY


class LegacyValues(RuleCommand):
    DESCRIPTION = Values.__doc__ or ""
    RULES = (Values,)


class LegacyDeclarations(RuleCommand):
    DESCRIPTION = Declarations.__doc__ or ""
    RULES = (Declarations,)


class LegacyCommandLines(RuleCommand):
    DESCRIPTION = CommandLines.__doc__ or ""
    RULES = (CommandLines,)


class LegacyReview(RuleCommand):
    DESCRIPTION = Review.__doc__ or ""
    RULES = (Review,)
