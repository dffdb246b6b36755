"""Rewrite fairscale imports to the ``shardcompat.fairscale`` facade (opt-in).

``from fairscale.optim import OSS`` becomes ``from shardcompat.fairscale import OSS`` with the
same names and aliases.  Names the facade does not export stay on the original import (the
import is split) and are reported.  Run with ``shardcompat-migrate --fairscale-imports`` or::

    python -m libcst.tool codemod fairscale_imports.FairscaleImportsCommand --no-format src/
"""

from __future__ import annotations

from typing import Union

import libcst as cst
from libcst.codemod import CodemodContext, VisitorBasedCodemodCommand
from libcst.helpers import get_full_name_for_node
from libcst.metadata import PositionProvider

from .report import Edit, Finding

__all__ = ["FACADE", "FACADE_NAMES", "FAIRSCALE_MODULES", "FairscaleImportsCommand"]

FACADE = "shardcompat.fairscale"
#: What the facade exports.
FACADE_NAMES = frozenset({
    "ShardedDataParallel", "FullyShardedDataParallel", "OSS", "ShardedGradScaler",
    "auto_wrap", "enable_wrap", "wrap", "default_auto_wrap_policy",
})
#: The fairscale modules whose imports are rewritten.
FAIRSCALE_MODULES = frozenset({
    "fairscale.nn", "fairscale.nn.data_parallel", "fairscale.nn.data_parallel.sharded_ddp",
    "fairscale.nn.data_parallel.fully_sharded_data_parallel", "fairscale.optim",
    "fairscale.optim.oss", "fairscale.optim.grad_scaler", "fairscale.nn.wrap",
    "fairscale.nn.wrap.auto_wrap",
})

Statement = Union[cst.SimpleStatementLine, cst.FlattenSentinel[cst.SimpleStatementLine]]


class FairscaleImportsCommand(VisitorBasedCodemodCommand):
    """``from fairscale.X import A, B as C`` -> ``from shardcompat.fairscale import A, B as C``."""

    DESCRIPTION = "Rewrite fairscale imports to the shardcompat.fairscale facade."
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, context: CodemodContext, to: str = "list") -> None:
        super().__init__(context)
        from .python_legacy import records_of

        self.records = records_of(context)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> Statement:
        if len(updated_node.body) != 1 or not isinstance(updated_node.body[0], cst.ImportFrom):
            return updated_node
        node = updated_node.body[0]
        module = get_full_name_for_node(node.module) if node.module is not None else None
        if node.relative or module not in FAIRSCALE_MODULES:
            return updated_node
        line = self.get_metadata(PositionProvider, original_node).start.line
        if self.records.marked and line in self.records.marked:
            return updated_node
        if isinstance(node.names, cst.ImportStar):
            self._warn(line, f"from {module} import *: the facade names cannot be told apart; left as is")
            return updated_node
        moved = [a for a in node.names if get_full_name_for_node(a.name) in FACADE_NAMES]
        kept = [a for a in node.names if get_full_name_for_node(a.name) not in FACADE_NAMES]
        if not moved:
            return updated_node
        for alias in kept:
            self._warn(line, f"{get_full_name_for_node(alias.name)} is not exported by {FACADE}; "
                       f"left on 'from {module} import'")
        facade = cst.parse_expression(FACADE)
        assert isinstance(facade, (cst.Attribute, cst.Name))
        new_import = node.with_changes(module=facade, names=_tidy(moved, node))
        first = updated_node.with_changes(body=[new_import])
        self.records.edits.append(Edit(line, "fairscale-import", self.module.code_for_node(original_node).strip(),
                                       self.module.code_for_node(first).strip()))
        if not kept:
            return first
        rest = cst.SimpleStatementLine(body=[node.with_changes(names=_tidy(kept, node))],
                                       leading_lines=[])
        return cst.FlattenSentinel([first, rest])

    def _warn(self, line: int, message: str) -> None:
        self.records.warnings.append(Finding(line, "fairscale-unsupported", message,
                                             f"import it from fairscale directly or ask for it in {FACADE}"))
        self.warn(f"line {line}: {message}")


def _tidy(aliases: list[cst.ImportAlias], node: cst.ImportFrom) -> list[cst.ImportAlias]:
    """The aliases, the last one ending the way the original last one did."""
    names = node.names
    if not aliases or isinstance(names, cst.ImportStar):
        return aliases
    return [*aliases[:-1], aliases[-1].with_changes(comma=names[-1].comma)]
