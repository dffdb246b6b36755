"""Imports of removed Transformers 4.x names, moved to where the name lives today.

The rows are :data:`shardcompat.transformers.legacy_table.SURFACE` (each names one 4.30 spelling
and what serves it), the table ``shardcompat run`` serves them by:

- a name 4.30 re-exported from a module that still has it (``REEXPORTS``: what a removed module
  imported, ``transformers.data.processors.squad.PreTrainedTokenizerBase``), or whose value lives elsewhere
  today under another name (``transformers.trainer.ALL_LAYERNORM_LAYERS``,
  ``transformers.deepspeed.*``, ``transformers.utils.is_offline_mode``), is imported from there
  (``as`` the old name where today's differs, so the uses stay);
- ``transformers.AdamW`` is torch's ``AdamW`` with 4.30's defaults spelled out (``eps=1e-6``,
  ``weight_decay=0.0``); ``correct_bias=False`` has no torch counterpart and is reported;
- ``import transformers.deepspeed`` and its dotted uses go to ``transformers.integrations.deepspeed``;
- a removed ``datasets`` function (``from datasets import load_metric``) is imported from the
  library that took it over (``from evaluate import load as load_metric``); ``datasets.load_metric``
  read as an attribute is reported;
- 4.x's GLUE and SQuAD data layers (``GlueDataset``, ``glue_processors``, ``SquadV2Processor``,
  ``squad_evaluate``, ...), which Transformers dropped without a successor, are imported from
  ``shardcompat.transformers.glue`` and ``.squad``, which keep them;
- any other removed name (served by shardcompat's own adapter, or refused) is reported with the
  row's replacement, and the import stays.

Names of ``transformers`` and ``transformers.utils`` that the first table lists are
:mod:`.python`'s, which runs after this rule (so a ``transformers.file_utils`` name moved to
``transformers.utils`` is renamed there too); ``ShardedDDPOption`` is reported by :mod:`.overrides`.
"""

from __future__ import annotations

import ast
import fnmatch
from typing import Any, Union

import libcst as cst

from shardcompat.transformers.legacy_table import (
    GONE_MODULES,
    KEPT,
    SURFACE,
    Home,
    Kind,
    Removed,
    precise_family,
    reexport_row,
)

from ..base import Rule, dotted
from . import RULE, UNMIGRATED
from .plans import rows_named

__all__ = ["TodaysHomes", "row_for"]

_DEEPSPEED, _TODAYS_DEEPSPEED = "transformers.deepspeed", "transformers.integrations.deepspeed"
_FIRST_TABLE = {"transformers": (Kind.TOP_LEVEL,), "transformers.utils": (Kind.UTILS,)}
_ALIASES = {"transformers.file_utils": "transformers.utils"}  # 4.x's alias module
_LEFT_TO_OVERRIDES = frozenset({"ShardedDDPOption"})
_BY_SPELLING = {r.pattern: r for r in reversed(SURFACE) if not r.family}  # the first row wins
_FAMILIES = tuple(r for r in SURFACE if precise_family(r))
#: 4.30's transformers.AdamW(params, lr, betas, eps, weight_decay, correct_bias, no_deprecation_warning)
_ADAMW_ORDER = ("params", "lr", "betas", "eps", "weight_decay", "correct_bias", "no_deprecation_warning")
_ADAMW_DEFAULTS = (("eps", "1e-6"), ("weight_decay", "0.0"))

Body = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]



def row_for(module: str, name: str) -> Removed | None:
    """The table's row for ``from module import name`` (None: the name is not a removed one, or
    the first table's rule has it)."""
    kinds = _FIRST_TABLE.get(module)
    if kinds and rows_named(name, *kinds) is not None:
        return None
    spelling = f"{module}.{name}"
    exact = _BY_SPELLING.get(spelling)
    if exact is not None:
        return exact
    if module in _ALIASES:
        return row_for(_ALIASES[module], name)
    reexported = reexport_row(spelling)  # a removed module's import from a module that lives on
    if reexported is not None:
        return reexported
    return next((r for r in _FAMILIES if fnmatch.fnmatchcase(spelling, r.pattern)), None)


def _movable(row: Removed) -> tuple[str, str] | None:
    """(module, attribute) where the name lives today, when that is a real home: a library's public
    module (``shardcompat.transformers.glue`` for 4.x's GLUE layer, which Transformers dropped
    without a successor), not one of shardcompat's private adapters."""
    target = row.target_for(row.pattern)
    if row.home is not Home.IMPORT or not target or ":" not in target:
        return None
    module, attribute = target.split(":", 1)
    if module.split(".")[0] == "shardcompat" and any(part.startswith("_") for part in module.split(".")):
        return None
    return (module, attribute) if "." not in attribute else None  # a class's method is no import


def _split(target: str) -> tuple[str, str]:
    module, _, attribute = target.partition(":")
    return module, attribute


def _is_adamw(row: Removed) -> bool:
    return row.pattern.rsplit(".", 1)[-1] == "AdamW" and (row.target or "").endswith(":AdamW")


def _adamw_calls(code: str) -> tuple[str | None, list[str]]:
    """The local name of transformers' AdamW, and why its uses cannot move (empty: they can)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None, ["the file does not parse here"]
    local = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("transformers", "transformers.optimization"):
            for alias in node.names:
                if alias.name == "AdamW":
                    local = alias.asname or alias.name
    if local is None:
        return None, []
    why: list[str] = []
    called: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == local:
            called.add(id(node.func))
            keywords = {k.arg: k.value for k in node.keywords}
            if len(node.args) > 5 or any(isinstance(a, ast.Starred) for a in node.args) or None in keywords:
                why.append(f"line {node.lineno}: arguments past weight_decay by position, or * / **")
            bias = keywords.get("correct_bias")
            if bias is not None and not (isinstance(bias, ast.Constant) and bias.value is True):
                why.append(f"line {node.lineno}: correct_bias={ast.unparse(bias)} (torch's AdamW always corrects)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == local and id(node) not in called:
            if not isinstance(node.ctx, ast.Load):
                why.append(f"line {node.lineno}: the file binds {local} itself")
            else:
                why.append(f"line {node.lineno}: {local} used other than in a call")
    return local, why


class TodaysHomes(Rule):
    """Imports of removed 4.x names to where the names live today; the rest reported."""

    DESCRIPTION = "Import removed Transformers 4.x names from where they live today."

    def __init__(self, records: Any, module: cst.Module) -> None:
        super().__init__(records, module)
        self.adamw, self.adamw_blocked = _adamw_calls(module.code) if "AdamW" in module.code else (None, [])

    # ------------------------------------------------------------------ from ... import ...
    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine,
                                  updated_node: cst.SimpleStatementLine) -> Any:
        if len(updated_node.body) != 1:
            return updated_node
        statement = updated_node.body[0]
        if isinstance(statement, cst.Import):
            return self._import(original_node, updated_node, statement)
        if not isinstance(statement, cst.ImportFrom) or statement.relative or statement.module is None \
                or isinstance(statement.names, cst.ImportStar):
            return updated_node
        module = dotted(statement.module)
        if not (module.startswith("transformers") or module == "datasets") or self.blocked(original_node):
            return updated_node
        kept: list[cst.ImportAlias] = []
        moved: dict[str, list[str]] = {}
        for alias in statement.names:
            name = dotted(alias.name)
            local = alias.evaluated_alias or name
            row = row_for(module, name)
            home = self._home(original_node, module, name, row)
            if home is None:
                kept.append(alias)
                continue
            target, attribute = home
            moved.setdefault(target, []).append(attribute if attribute == local else f"{attribute} as {local}")
        if not moved:
            return updated_node
        lines: list[cst.SimpleStatementLine] = []
        if kept:  # the last kept name ends the way the list did (a trailing comma in parentheses)
            kept[-1] = kept[-1].with_changes(comma=statement.names[-1].comma)
            lines.append(updated_node.with_changes(body=[statement.with_changes(names=kept)]))
        for target, names in moved.items():
            new = cst.parse_statement(f"from {target} import {', '.join(names)}\n")
            assert isinstance(new, cst.SimpleStatementLine)
            lines.append(new)
        lines[0] = lines[0].with_changes(leading_lines=updated_node.leading_lines)
        if not kept:
            lines[-1] = lines[-1].with_changes(trailing_whitespace=updated_node.trailing_whitespace)
        self.record(original_node.body[0], "; ".join(self.module.code_for_node(n.body[0]) for n in lines), RULE,
                    "where the names live today")
        return cst.FlattenSentinel(lines)

    def _home(self, node: cst.CSTNode, module: str, name: str, row: Removed | None) -> tuple[str, str] | None:
        """Where ``name`` moves, or None (it stays; a removed one is reported)."""
        if module == _DEEPSPEED:
            return _TODAYS_DEEPSPEED, name
        if module == "datasets":
            moved = rows_named(name, Kind.DATASETS_FUNCTION)
            if moved is not None and moved.new is None:  # no drop-in: its successor is called differently
                self.flag(node, UNMIGRATED, f"datasets.{name}: removed in {moved.removed_in}; {moved.reason}",
                          hint=f"instead: {moved.replacement}")
            return None if moved is None or moved.new is None else _split(moved.new)
        if row is None or name in _LEFT_TO_OVERRIDES:
            return None
        if _is_adamw(row):
            if self.adamw_blocked:
                self.flag(node, UNMIGRATED, f"{module}.AdamW: {'; '.join(self.adamw_blocked)}",
                          hint=f"write {row.replacement}")
                return None
            return "torch.optim", "AdamW"
        home = _movable(row)
        if home is None:
            removed = "after 4.30" if row.removed.startswith(">") else f"in Transformers {row.removed}"
            self.flag(node, UNMIGRATED, f"{module}.{name}: removed {removed}; {row.reason}",
                      hint=f"instead: {row.replacement}" if row.replacement else "remove it")
        return home

    def _import(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine,
                statement: cst.Import) -> cst.SimpleStatementLine:
        names = list(statement.names)
        for alias in names:
            gone = dotted(alias.name)
            if gone in GONE_MODULES and gone != _DEEPSPEED and not self.blocked(original):
                kept = [module for module, (homes, _) in KEPT.items() if gone in homes]
                where = f"{' or '.join(kept)}, which shardcompat keeps" if kept else "where they live today"
                self.flag(original, UNMIGRATED, f"import {gone}: a module Transformers removed",
                          hint=f"import the names you use from {where} (every name: docs/transformers-legacy.md)")
        if not any(dotted(a.name) == _DEEPSPEED and a.asname is None for a in names) or self.blocked(original):
            return updated
        new = [a.with_changes(name=cst.parse_expression(_TODAYS_DEEPSPEED)) if dotted(a.name) == _DEEPSPEED
               else a for a in names]
        line = updated.with_changes(body=[statement.with_changes(names=new)])
        self.record(original.body[0], line.body[0], RULE, "transformers.deepspeed moved to transformers.integrations")
        return line

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        spelling = dotted(original_node)
        if spelling.startswith("datasets.") and not self.blocked(original_node):
            gone = rows_named(spelling.split(".", 1)[1], Kind.DATASETS_FUNCTION)
            if gone is not None:
                self.flag(original_node, UNMIGRATED, f"{spelling}: removed in {gone.removed}; {gone.reason}",
                          hint=f"instead: {gone.replacement}")
        if not spelling.startswith("transformers.") or self.blocked(original_node):
            return updated_node
        if spelling == _DEEPSPEED:
            new = cst.parse_expression(_TODAYS_DEEPSPEED)
            self.record(original_node, new, RULE, "transformers.deepspeed moved to transformers.integrations")
            return new
        module, _, name = spelling.rpartition(".")
        row = row_for(module, name) if module == "transformers" else None
        if row is None or name in _LEFT_TO_OVERRIDES:
            return updated_node
        home = _movable(row)
        if home is not None and home[0] == "transformers":  # transformers.BertTokenizerFast -> .BertTokenizer
            renamed = updated_node.with_changes(attr=cst.Name(home[1]))
            self.record(original_node, renamed, RULE, row.reason)
            return renamed
        self.flag(original_node, UNMIGRATED, f"{spelling}: removed from Transformers; {row.reason}",
                  hint=f"instead: {row.replacement}" if row.replacement else "remove it")
        return updated_node

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False  # the import statements are handled whole

    # ------------------------------------------------------------------ AdamW(...) calls
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.adamw is None or self.adamw_blocked or dotted(updated_node.func) != self.adamw:
            return updated_node
        given = {_ADAMW_ORDER[i] for i, a in enumerate(updated_node.args) if a.keyword is None}
        given |= {a.keyword.value for a in updated_node.args if a.keyword is not None}
        args = [a for a in updated_node.args
                if a.keyword is None or a.keyword.value not in ("correct_bias", "no_deprecation_warning")]
        added = [cst.Arg(cst.parse_expression(value), keyword=cst.Name(name),
                         equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                               whitespace_after=cst.SimpleWhitespace("")))
                 for name, value in _ADAMW_DEFAULTS if name not in given]
        if not added and len(args) == len(updated_node.args):
            return updated_node
        if args and added:
            last = args[-1]
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
                                         whitespace_after_arg=cst.SimpleWhitespace(""))
            added[-1] = added[-1].with_changes(whitespace_after_arg=last.whitespace_after_arg)
        elif args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new = updated_node.with_changes(args=[*args, *added])
        self.record(original_node, new, RULE, "torch's AdamW with 4.30's defaults (eps=1e-6, weight_decay=0.0)")
        return new
