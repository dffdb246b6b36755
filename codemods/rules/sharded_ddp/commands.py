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

import argparse
from typing import ClassVar

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext

from ...run.context import Settings, fsdp_form_for
from ..base import Records, Rule, prepare, run
from .python import LEGACY, CommandLines, Declarations, Review, Values

__all__ = [
    "LegacyCommandLines",
    "LegacyDeclarations",
    "LegacyReview",
    "LegacyValues",
    "MigrateShardedDDP",
    "RuleCommand",
]


class RuleCommand(CodemodCommand):
    """Runs :attr:`RULES` on each module libcst's runner gives it; findings become its warnings."""

    RULES: ClassVar[tuple[type[Rule], ...]] = ()
    DESCRIPTION = "shardcompat rules"
    LEGACY: ClassVar[bool] = True

    def __init__(self, context: CodemodContext, to: str = "list", transformers: str | None = None) -> None:
        super().__init__(context)
        self.settings = Settings(to="fsdp" if to == "fsdp" else "list", fsdp_form=fsdp_form_for(transformers),
                                 legacy=self.LEGACY, fairscale_imports=not self.LEGACY)

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument("--to", choices=("list", "fsdp"), default="list",
                                help="target syntax: the list syntax (default) or Transformers' FSDP arguments")
        arg_parser.add_argument("--transformers", default=None, metavar="VERSION",
                                help="with --to fsdp: the Transformers release to target; before 5.0 the "
                                "4.x --fsdp words, else fsdp=True with fsdp_config (default)")

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        records = Records(self.settings)
        prepare(records, tree.code)
        tree = run(tree, records, self.RULES)
        for finding in records.warnings:
            self.warn(f"line {finding.line}: {finding.message}")
        return tree


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
