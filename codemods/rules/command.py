"""The libcst codemod command every rule table shares: its rules on each module libcst's own
runner gives it (``python -m libcst.tool codemod``, see ``.libcst.codemod.yaml``).

Kept apart from :mod:`codemods.rules.base` because ``libcst.codemod`` is costly to import and
``shardcompat-migrate`` never needs it.
"""

from __future__ import annotations

import argparse
from typing import ClassVar

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext

from ..run.context import Settings, fsdp_form_for
from .base import Records, Rule, prepare, run

__all__ = ["RuleCommand"]


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
