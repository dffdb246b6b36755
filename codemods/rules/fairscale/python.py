"""fairscale imports to the ``shardcompat.fairscale`` facade (opt-in): a prefix swap.

The facade mirrors fairscale's module tree, so ``fairscale.`` becomes ``shardcompat.fairscale.``
and nothing else changes, for what the facade serves at that path:

- ``from fairscale.optim.oss import OSS as O`` becomes ``from shardcompat.fairscale.optim.oss
  import OSS as O``; names the facade does not serve there stay on the original import (the
  import is split) and are reported with the facade's reason; an import from a module the
  facade does not mirror (``fairscale.nn.model_parallel``) stays and is reported;
- a module bound to a name (``import fairscale.optim as optim``, ``from fairscale.nn import
  data_parallel``) keeps its form and name (``import shardcompat.fairscale.optim as optim``)
  when every use of it is a served name (``optim.OSS(...)``); otherwise the uses that stop it
  are reported;
- ``import fairscale[.x]`` used through full paths (``fairscale.optim.OSS``) becomes ``import
  shardcompat.fairscale[.x]`` and ``shardcompat.fairscale.optim.OSS``, on the same condition.

What is served where is the facade's own table (:func:`codemods.formats.pyscan.facade_resolve`),
and the whole-file analysis is :mod:`codemods.formats.pyscan`'s; this rule applies it.
"""

from __future__ import annotations

from typing import Union

import libcst as cst

from ...formats import pyscan
from ...formats.pyscan import FACADE, AliasPlan, Facts
from ...run.report import Edit, Finding
from ..base import Rule, quote

__all__ = ["FACADE", "GUARD", "RULE", "UNSERVED", "FairscaleImports", "file_findings"]

RULE = "fairscale-import"
UNSERVED = "fairscale-unsupported"
GUARD = "fairscale-guard"
_HINT = f"import it from fairscale directly or ask for it in {FACADE}"

Statement = Union[cst.SimpleStatementLine, cst.FlattenSentinel[cst.SimpleStatementLine]]


def _dotted(node: cst.CSTNode | None) -> str | None:
    """``a.b.c`` for a name or an attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr.value}"
    return None


def _facade(module: str) -> cst.Attribute:
    """``fairscale.x.y`` -> the expression ``shardcompat.fairscale.x.y``."""
    node = cst.parse_expression(f"shardcompat.{module}")
    assert isinstance(node, cst.Attribute)
    return node


def _why(dotted: str, module: bool = False) -> str:
    """Why the facade does not take ``dotted``, for a report."""
    kind, reason = pyscan.facade_resolve(dotted, module=module)
    if kind == "unserved":
        return reason
    return f"{dotted} is not served by {FACADE}"


def file_findings(facts: Facts) -> list[Finding]:
    """The file-level warnings: each fairscale binding that stays on fairscale (at its import,
    with the uses that keep it there), and each check for an installed fairscale that would now
    skip the facade imports it guards."""
    found = [Finding(line, GUARD, f"{call}: passes only where fairscale is installed, so what it guards skips "
                     f"{FACADE} wherever fairscale is not", f"drop the check: {FACADE} is always importable")
             for line, call in facts.guards]
    for plan in facts.aliases.values():
        bound = f"{plan.local} ({plan.module})"
        if plan.rewrite:
            continue
        kind, reason = pyscan.facade_resolve(plan.module, module=True)
        if kind == "unserved":
            found.append(Finding(plan.line, UNSERVED, f"{bound}: {reason}; the import stays on fairscale", _HINT))
            continue
        if not plan.blockers:  # bound but never used: an availability check, perhaps
            found.append(Finding(plan.line, UNSERVED, f"{bound}: nothing here uses it through a name "
                                 f"{FACADE} serves; the import stays on fairscale", _HINT))
            continue
        names = list(dict.fromkeys(dotted for _, dotted in plan.blockers))
        lines = sorted({line for line, _ in plan.blockers})
        where = ("line " if len(lines) == 1 else "lines ") + ", ".join(map(str, lines[:6])) + (
            ", ..." if len(lines) > 6 else "")
        if names == [plan.local]:
            message = f"{bound}: not served by {FACADE}; the import stays on fairscale (used on {where})"
        else:
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            message = (f"{bound}: {shown} not served by {FACADE} ({where}), so the import stays on "
                       "fairscale; its served names are left on it too")
        found.append(Finding(plan.line, UNSERVED, message, _HINT))
    return found


class FairscaleImports(Rule):
    """fairscale imports and module uses to the ``shardcompat.fairscale`` facade."""

    DESCRIPTION = "Rewrite fairscale imports to the shardcompat.fairscale facade."

    @property
    def aliases(self) -> dict[str, AliasPlan]:
        return self.facts.aliases

    def _skipped(self, line: int) -> bool:
        return line in self.records.marked

    def _record(self, line: int, rule: str, before: cst.CSTNode, after: cst.CSTNode | str) -> None:
        new = after if isinstance(after, str) else quote(self.module, after)
        self.records.edits.append(Edit(line, rule, quote(self.module, before), new))

    def _warn(self, line: int, message: str) -> None:
        self.records.warnings.append(Finding(line, UNSERVED, message, _HINT))

    # import fairscale.optim as optim / import fairscale
    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        names = list(updated_node.names)
        changed = False
        for index, alias in enumerate(names):
            module = _dotted(alias.name) or ""
            local = alias.evaluated_alias or module.split(".", 1)[0]
            if pyscan.import_moves(module, local, self.aliases):
                names[index] = alias.with_changes(name=_facade(module))
                changed = True
        if not changed:
            return updated_node
        line = self.line(original_node)
        if self._skipped(line):
            return updated_node
        new = updated_node.with_changes(names=names)
        self._record(line, RULE, original_node, new)
        return new

    # fairscale.optim.OSS, when ``import fairscale`` moves to the facade
    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        plan = self.aliases.get("fairscale")
        if plan is None or not plan.rewrite or not plan.chains:
            return updated_node
        dotted = _dotted(original_node)
        target = plan.chains.get(dotted or "")
        if target is None:
            return updated_node
        line = self.line(original_node)
        if self._skipped(line):
            return updated_node
        new = cst.parse_expression(target)
        assert isinstance(new, cst.Attribute)
        new = new.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        self._record(line, "fairscale-use", original_node, new)
        return new

    # from fairscale.X import A, B as C, submodule
    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> Statement:
        if len(updated_node.body) != 1 or not isinstance(updated_node.body[0], cst.ImportFrom):
            return updated_node
        node = updated_node.body[0]
        module = _dotted(node.module) if node.module is not None else None
        if node.relative or not pyscan.is_fairscale(module):
            return updated_node
        line = self.line(original_node)
        if self._skipped(line):
            return updated_node
        if isinstance(node.names, cst.ImportStar):
            self._warn(line, f"from {module} import *: the facade names cannot be told apart; left as is")
            return updated_node
        assert module is not None
        if pyscan.facade_resolve(module, module=True)[0] != "module":
            self._warn(line, f"{_why(module, module=True)}; left on 'from {module} import'")
            return updated_node
        moved, kept = [], []
        for alias in node.names:
            name = _dotted(alias.name) or ""
            if pyscan.from_import_moves(module, name, alias.evaluated_alias or name, self.aliases):
                moved.append(alias)
                continue
            kept.append(alias)
            if pyscan.facade_resolve(f"{module}.{name}")[0] != "module":  # a module binding: reported with its uses
                self._warn(line, f"{_why(f'{module}.{name}')}; left on 'from {module} import'")
        if not moved:
            return updated_node
        moved_import = node.with_changes(module=_facade(module), names=_tidy(moved, node))
        new = updated_node.with_changes(body=[moved_import])
        # the statement, not its line: a trailing comment is the line's, on both parse paths
        self._record(line, RULE, original_node.body[0], moved_import)
        if not kept:
            return new
        return cst.FlattenSentinel([new, cst.SimpleStatementLine(body=[node.with_changes(names=_tidy(kept, node))])])


def _tidy(aliases: list[cst.ImportAlias], node: cst.ImportFrom) -> list[cst.ImportAlias]:
    """The aliases, the last one ending the way the original last one did."""
    names = node.names
    if not aliases or isinstance(names, cst.ImportStar):
        return aliases
    return [*aliases[:-1], aliases[-1].with_changes(comma=names[-1].comma)]
