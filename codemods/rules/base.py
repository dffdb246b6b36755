"""The plumbing every Python rule shares: plain libcst transformers with one :class:`Records`.

They run on a whole module (libcst's runner through :mod:`codemods.rules.sharded_ddp.commands` and
:mod:`codemods.rules.fairscale.commands`; files this Python cannot parse) or on the small units
:mod:`codemods.formats.pyscan` finds (:mod:`codemods.formats.python`).  They are ``CSTTransformer``
subclasses, not codemod commands, so that running one costs a traversal of what it is given
and nothing more (no ``libcst.codemod``/``libcst.matchers`` import, no per-instance method
inspection); positions are resolved only when a rule reports a node on a unit of several
lines.  The rules themselves live with their tables (:mod:`codemods.rules.sharded_ddp.python`,
:mod:`codemods.rules.fairscale.python`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import libcst as cst

from ..formats.pyscan import Facts, facts_of
from ..formats.spans import file_skipped, marker_lines, one_line
from ..run.context import Settings
from ..run.report import Edit, Finding
from .sharded_ddp.flags import FLAG, HINTS

__all__ = ["NodeSet", "Records", "Rule", "dotted", "prepare", "quote", "run"]


class NodeSet:
    """Nodes of the tree a rule is rebuilding, by identity, each held while it is in the set.

    libcst frees the nodes a transform replaces, and a node made later may get a freed one's
    ``id``: a set of ids once took a script's ``main()`` call for a removed statement.  Original
    nodes need none of this (the original tree lives through the traversal); new ones do.
    """

    def __init__(self) -> None:
        self._nodes: dict[int, cst.CSTNode] = {}

    def add(self, node: cst.CSTNode) -> None:
        self._nodes[id(node)] = node

    def __contains__(self, node: object) -> bool:
        return self._nodes.get(id(node)) is node


@dataclass
class Records:
    """What the rules of one file found, and what they know about the file.

    ``line_offset`` is added to every line number (a unit starts on line ``offset + 1``).
    """

    settings: Settings = field(default_factory=Settings)
    edits: list[Edit] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    marked: frozenset[int] = frozenset()
    skipped: bool = False
    has_flag: bool = True
    facts: Facts = field(default_factory=Facts)
    line_offset: int = 0


def prepare(records: Records, code: str, facts: Facts | None = None) -> None:
    """Skip markers, the file facts (from ``ast``, unless given) and the file-level findings."""
    records.marked = marker_lines(code)
    records.skipped = file_skipped(code, records.marked)
    records.has_flag = FLAG in code
    if facts is None:
        settings = records.settings
        try:
            facts = facts_of(ast.parse(code), code, legacy=settings.legacy, fairscale=settings.fairscale_imports)
        except (SyntaxError, ValueError):  # newer syntax than this Python reads: no facts
            facts = Facts()
    records.facts = facts
    if facts.aliases or facts.guards:
        from .fairscale.python import file_findings

        records.warnings += file_findings(facts)


def dotted(node: cst.BaseExpression | None) -> str:
    """``a.b.c`` for a name or attribute chain, ``""`` for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr.value}" if inner else ""
    return ""


def quote(module: cst.Module, node: cst.CSTNode) -> str:
    """The source of ``node`` as a report quotes it: without its separator, the whitespace
    around it or line breaks."""
    if isinstance(node, (cst.Arg, cst.DictElement, cst.Element)):
        node = node.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return one_line(module.code_for_node(node))


class Rule(cst.CSTTransformer):
    """Shared plumbing: the settings, the records, lines and the skip marker."""

    DESCRIPTION: ClassVar[str] = ""
    #: Skip modules without ``--sharded_ddp`` in them.
    NEEDS_FLAG: ClassVar[bool] = False

    def __init__(self, records: Records, module: cst.Module) -> None:
        super().__init__()
        self.records, self.module = records, module
        self.to, self.form = records.settings.to, records.settings.fsdp_form
        self._positions: Any = None
        self._one_line: bool | None = None

    @property
    def facts(self) -> Facts:
        return self.records.facts

    def _span(self, node: cst.CSTNode) -> tuple[int, int]:
        """First and last line of ``node`` in the module (positions resolved once, lazily)."""
        if self._one_line is None:
            self._one_line = "\n" not in self.module.code.rstrip("\r\n")
        if self._one_line:
            return 1, 1
        if self._positions is None:
            from libcst.metadata import MetadataWrapper, PositionProvider

            self._positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
        span = self._positions[node]
        return span.start.line, span.end.line

    def line(self, node: cst.CSTNode) -> int:
        return self._span(node)[0] + self.records.line_offset

    def blocked(self, node: cst.CSTNode) -> bool:
        """True when a skip marker sits on one of the node's lines."""
        if not self.records.marked:
            return False
        first, last = self._span(node)
        shift = self.records.line_offset
        return any(n + shift in self.records.marked for n in range(first, last + 1))

    def record(self, original: cst.CSTNode, updated: cst.CSTNode | str, rule: str, note: str = "",
               at: cst.CSTNode | None = None, before: str | None = None) -> None:
        after = updated if isinstance(updated, str) else quote(self.module, updated)
        self.records.edits.append(Edit(self.line(at or original), rule,
                                       quote(self.module, original) if before is None else before, after, note))

    def flag(self, node: cst.CSTNode, rule: str, message: str, line: int = 0,
             hint: str | None = None) -> None:
        number = line or self.line(node)
        self.records.warnings.append(Finding(number, rule, message, HINTS.get(rule, "") if hint is None else hint))

    def rename_keyword(self, original: cst.Call, updated: cst.Call, old: str, new: str, rules: tuple[str, str],
                       note: str, both: str) -> cst.Call:
        """``f(old=x)`` to ``f(new=x)``, recorded under ``rules[0]`` with ``note``; a call that gives
        both is left as written and flagged under ``rules[1]`` with the message ``both``: which
        of the two the author meant is theirs to say."""
        given = {a.keyword.value for a in updated.args if a.keyword is not None}
        if old not in given or self.blocked(original):
            return updated
        if new in given:
            self.flag(original, rules[1], both, hint=f"keep only {new}=")
            return updated
        renamed = updated.with_changes(args=[a.with_changes(keyword=cst.Name(new))
                                             if a.keyword is not None and a.keyword.value == old else a
                                             for a in updated.args])
        self.record(original, renamed, rules[0], note)
        return renamed


def run(module: cst.Module, records: Records, rules: Sequence[type[Rule]]) -> cst.Module:
    """Each rule over ``module`` in turn (nothing when the file opts out)."""
    for rule in rules:
        if records.skipped:
            break
        if rule.NEEDS_FLAG and not records.has_flag:
            continue
        module = module.visit(rule(records, module))
    return module
