"""The legacy Transformers names in Python, by the plans of :mod:`.plans`.

- keywords: ``TrainingArguments``-like calls (any callee ending in ``TrainingArguments``) take
  the field rows, ``...Trainer(...)`` the Trainer rows, ``.from_pretrained(...)`` the
  ``from_pretrained`` rows, ``datasets.load_dataset(...)`` (however the file imports it) the
  ``datasets`` rows;
- imports from ``transformers`` / ``transformers.utils``: a renamed function is imported under
  today's name and its uses follow (when the file binds the name nowhere else); a function
  whose answer today is a constant (``is_tf_available``) is dropped from the import and each
  ``name()`` becomes the constant; a no-op (``send_example_telemetry``) is dropped with its call
  statements, the comments above them kept; any other use is reported and the import stays;
- attribute reads of a field row on an arguments object (``training_args.evaluation_strategy``)
  are renamed, and so are the 3.x members 4.0 renamed on an object named for their class
  (``trainer.is_world_master()``, ``tokenizer.max_len``); a read with no exact counterpart is
  reported; names the file declares itself (a dataclass field, an ``add_argument("--name")``)
  are the script's own and left alone.

The rule works on the whole module (it needs every use of an imported name), so the Python
path gives it the whole file when the table's names occur (:func:`needs_module`).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Union

import libcst as cst

from shardcompat.transformers.legacy_table import Kind, LegacyName, Served, loader_callees

from ..base import NodeSet, Rule, dotted
from . import RULE, UNMIGRATED
from .ownfield import OWN_ROWS, OwnField, own_field
from .plans import (
    MEMBER_RENAMES,
    NAMES,
    NOT_LITERAL,
    REMOVED_TOP_LEVEL,
    Plan,
    plan_field,
    plan_name,
    rows_named,
)

__all__ = ["RULE", "UNMIGRATED", "TransformersLegacy", "needs_module"]

_MODULES = {"transformers": (Kind.TOP_LEVEL,), "transformers.utils": (Kind.UTILS,)}
#: ``tokenizer`` is everywhere in Transformers code (``tokenizer = AutoTokenizer...``); only
#: the keyword form inside a call counts.
_NEEDLE = re.compile(r"\b(?:" + "|".join(sorted((set(NAMES) | set(REMOVED_TOP_LEVEL) | set(MEMBER_RENAMES))
                                                 - {"tokenizer"})) + r")\b"
                     r"|[(,]\s*tokenizer\s*=(?!=)"
                     r"|Trainer\b|\btransformers\.\w|\b(?:AdamW|ShardedDDPOption|as_target_tokenizer|prepare_seq2seq_batch)\b"
                     r"|\b(?:TF|Flax)[A-Z0-9]\w*|_PRETRAINED_|\bresume_from_checkpoint\s*=")

Body = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]


def needs_module(text: str) -> bool:
    """Whether ``text`` may hold a name of the table where this rule acts."""
    return _NEEDLE.search(text) is not None



@dataclass
class _Uses:
    """How the file uses one imported legacy name (from ``ast``)."""

    calls: int = 0  # name() with no arguments
    statements: int = 0  # name(...) as a statement of its own
    other: list[int] = field(default_factory=list)  # lines of any other use
    rebound: bool = False


def _file_facts(code: str) -> tuple[dict[str, _Uses], set[str], OwnField | None, set[str]]:
    """Uses of every bare name, the names the file declares as its own options, where the
    fields it reads itself go (:mod:`.ownfield`), and how it calls ``datasets``' loaders."""
    tree = ast.parse(code)
    uses: dict[str, _Uses] = {}
    declared: set[str] = set()
    handled: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            uses.setdefault(node.value.func.id, _Uses()).statements += 1
            handled.add(id(node.value.func))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args and not node.keywords:
            if id(node.func) not in handled:
                uses.setdefault(node.func.id, _Uses()).calls += 1
                handled.add(id(node.func))
        elif isinstance(node, ast.ClassDef):
            declared.update(s.target.id for s in node.body
                            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            uses.setdefault(node.name, _Uses()).rebound = True
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            declared.update(a.value.lstrip("-") for a in node.args
                            if isinstance(a, ast.Constant) and isinstance(a.value, str))
        if isinstance(node, ast.Name) and id(node) not in handled:
            entry = uses.setdefault(node.id, _Uses())
            if isinstance(node.ctx, ast.Load):
                entry.other.append(node.lineno)
            else:
                entry.rebound = True
        elif isinstance(node, ast.arg):
            uses.setdefault(node.arg, _Uses()).rebound = True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                if not (isinstance(node, ast.ImportFrom) and node.module in _MODULES and alias.asname is None):
                    uses.setdefault(local, _Uses()).rebound = True
    return uses, declared, own_field(tree), set(loader_callees(tree))


def _literal(module: cst.Module, node: cst.BaseExpression) -> Any:
    try:
        return ast.literal_eval(module.code_for_node(node).strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return NOT_LITERAL


def _expression(value: Any) -> cst.BaseExpression:
    text = repr(value) if isinstance(value, (bool, float)) or value is None else json.dumps(value)
    return cst.parse_expression(text)


def _tidy(kept: list[Any], original: list[Any]) -> list[Any]:
    """``kept`` items, the last ending the way the original last one did."""
    if not kept or not original or kept[-1] is original[-1]:
        return kept
    return [*kept[:-1], kept[-1].with_changes(comma=original[-1].comma)]


def _joined(carried: list[cst.EmptyLine], leading: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """A removed statement's leading lines before the next one's, one blank line where they meet."""
    while carried and leading and carried[-1].comment is None and leading[0].comment is None:
        carried = carried[:-1]
    return [*carried, *leading]


class TransformersLegacy(Rule):
    """4.x Transformers names of the legacy table to today's spelling."""

    DESCRIPTION = "Rewrite the Transformers 4.x names shardcompat run serves to today's spelling."

    def __init__(self, records: Any, module: cst.Module) -> None:
        super().__init__(records, module)
        self.own: OwnField | None = None
        self.loaders: set[str] = set()  # callee spellings of datasets.load_dataset & co.
        try:
            self.uses, self.declared, self.own, self.loaders = _file_facts(module.code)
        except (SyntaxError, ValueError):  # newer syntax than this Python's ast: no whole-file facts
            self.uses, self.declared = {}, set()
        self.renames: dict[str, str] = {}  # local name -> today's name
        self.questions: set[str] = set()  # local names of mapped functions: today's asks the question bare
        self.constants: dict[str, bool] = {}  # local name -> its answer today
        self.dropped: set[str] = set()  # local names whose call statements go
        self.removed = NodeSet()  # statements to take out (their comments kept)
        self.skip_names: set[int] = set()
        self.emptied = NodeSet()  # imports left with no name

    # ------------------------------------------------------------------ helpers
    def _warn(self, node: cst.CSTNode, plan: Plan, what: str) -> None:
        self.flag(node, UNMIGRATED, f"{what}: {plan.message}; left as is", hint=plan.hint)

    def _import_plan(self, row: LegacyName, local: str, aliased: bool) -> Plan:
        """The plan for an imported name, given how the file uses it (a report if it cannot follow)."""
        plan = plan_name(row)
        uses = self.uses.get(local, _Uses())
        if plan.action == "rename":
            if not aliased and uses.rebound:
                return Plan("report", message=f"{row.name}: the file also binds the name itself",
                            hint=f"rename it by hand to {row.new}")
            return plan
        if uses.rebound:
            return Plan("report", message=f"{row.name}: the file also binds the name itself", hint=plan.hint)
        if plan.action == "set" and (uses.other or uses.statements):
            return Plan("report", message=f"{row.name}: used other than as {row.name}() (line "
                        f"{(uses.other or [0])[0]}); today it answers {plan.value}", hint=f"write {plan.value}")
        if plan.action == "drop" and (uses.other or uses.calls):
            return Plan("report", message=f"{row.name}: used other than as a statement of its own; "
                        f"{plan.note}", hint="remove it")
        return plan

    # ------------------------------------------------------------------ imports
    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> Any:
        module = dotted(updated_node.module) if updated_node.module is not None else ""
        kinds = _MODULES.get(module)
        if updated_node.relative or kinds is None or isinstance(updated_node.names, cst.ImportStar):
            return updated_node
        if self.blocked(original_node):
            return updated_node
        kept: list[cst.ImportAlias] = []
        changed = False
        for alias in updated_node.names:
            name = alias.name.value if isinstance(alias.name, cst.Name) else ""
            row = rows_named(name, *kinds)
            if row is None:
                kept.append(alias)
                continue
            local = alias.evaluated_alias or name
            plan = self._import_plan(row, local, alias.asname is not None)
            if plan.action == "report":
                self._warn(original_node, plan, f"from {module} import {name}")
                kept.append(alias)
                continue
            changed = True
            if plan.action == "rename":
                kept.append(alias.with_changes(name=cst.Name(plan.name)))
                if alias.asname is None:
                    self.renames[name] = plan.name
                if row.served is Served.MAPPED:
                    self.questions.add(local)
            elif plan.action == "set":
                self.constants[local] = bool(plan.value)
            else:
                self.dropped.add(local)
        if not changed:
            return updated_node
        names = _tidy(kept, list(updated_node.names))
        if not names:  # the statement goes (an import needs a name): see leave_SimpleStatementLine
            self.record(original_node, "", RULE, "nothing left to import")
            self.emptied.add(updated_node)
            return updated_node
        new = updated_node.with_changes(names=names)
        self.record(original_node, new, RULE, "today's names")
        return new

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine,
                                  updated_node: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
        body = updated_node.body
        if len(body) == 1 and body[0] in self.emptied:
            self.removed.add(updated_node)
            return updated_node
        if len(body) != 1 or not isinstance(body[0], cst.Expr) or not isinstance(body[0].value, cst.Call):
            return updated_node
        func = dotted(body[0].value.func)
        if func in self.dropped or (func.startswith("transformers.utils.")
                                    and self._module_plan(func).action == "drop"):
            if self.blocked(original_node):
                return updated_node
            self.record(original_node.body[0], "", RULE, plan_name(self._row(func)).note)
            self.removed.add(updated_node)
        return updated_node

    def _asks_bare(self, old: str) -> bool:
        """Whether ``old`` (the callee as written) is a mapped function, whose call today takes no arguments."""
        if old in self.questions:
            return True
        receiver, _, name = old.rpartition(".")
        row = rows_named(name, *_MODULES[receiver]) if receiver in _MODULES else None
        return row is not None and row.served is Served.MAPPED and row.new is not None

    def _row(self, func: str) -> LegacyName:
        name = func.rsplit(".", 1)[-1]
        row = rows_named(name, Kind.UTILS, Kind.TOP_LEVEL)
        assert row is not None
        return row

    def _module_plan(self, dotted: str) -> Plan:
        module, _, name = dotted.rpartition(".")
        kinds = _MODULES.get(module)
        row = rows_named(name, *kinds) if kinds else None
        return plan_name(row) if row is not None else Plan("report")

    def _without_removed(self, body: list[Any]) -> tuple[list[Any], list[cst.EmptyLine]]:
        """``body`` without the removed statements; their leading lines (comments) go to the
        next statement, or are returned when none follows."""
        out: list[Any] = []
        carry: list[cst.EmptyLine] = []
        for statement in body:
            if statement in self.removed:
                carry += list(statement.leading_lines)
                continue
            if carry:
                statement = statement.with_changes(leading_lines=_joined(carry, list(statement.leading_lines)))
                carry = []
            out.append(statement)
        return out, carry

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        if not any(s in self.removed for s in updated_node.body):
            return updated_node
        body, carry = self._without_removed(list(updated_node.body))
        if not body:
            return updated_node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()], leading_lines=carry)])
        return updated_node.with_changes(body=body, footer=[*carry, *updated_node.footer])

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not any(s in self.removed for s in updated_node.body):
            return updated_node
        body, carry = self._without_removed(list(updated_node.body))
        return updated_node.with_changes(body=body, footer=[*carry, *updated_node.footer])

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        own = self.own
        if own is None or original_node.name.value != own.cls or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        added = []
        for name in own.names:
            row = OWN_ROWS[name]
            kind = row.type.__name__
            help_text = json.dumps(f"{row.flag} of Transformers 4.x TrainingArguments, read by this script")
            value = (f'field(default={row.default!r}, metadata={{"help": {help_text}}})'
                     if own.field_call else repr(row.default))
            added.append(cst.parse_statement(f"{name}: {kind} = {value}\n"))
            self.record(original_node.name, f"{name}: {kind} = {value}", RULE,
                        f"{name} moves to the script's own {own.cls}", before="")
        body = updated_node.body
        return updated_node.with_changes(body=body.with_changes(body=[*body.body, *added]))

    # ------------------------------------------------------------------ names and calls
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.skip_names.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.skip_names.add(id(node.keyword))

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        new = self.renames.get(updated_node.value)
        if new is None or id(original_node) in self.skip_names or self.blocked(original_node):
            return updated_node
        renamed = updated_node.with_changes(value=new)
        self.record(original_node, renamed, RULE, "today's name")
        return renamed

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        spelling = dotted(original_node)
        receiver, _, name = spelling.rpartition(".")
        if receiver in _MODULES:
            plan = self._module_plan(spelling)
            if plan.action == "rename" and not self.blocked(original_node):
                new = updated_node.with_changes(attr=cst.Name(plan.name))
                self.record(original_node, new, RULE, plan.note)
                return new
            return updated_node
        name = original_node.attr.value
        target = receiver.rsplit(".", 1)[-1] if receiver else dotted(original_node.value).rsplit(".", 1)[-1]
        renamed = MEMBER_RENAMES.get(name)
        if renamed is not None and target.lower().endswith(renamed[0]) and not self.blocked(original_node):
            new_member = updated_node.with_changes(attr=cst.Name(renamed[1]))
            self.record(original_node, new_member, RULE, f"today's name ({name} was 3.x's; 4.0 removed it)")
            return new_member
        row = rows_named(name, Kind.FIELD)
        if row is None or name in self.declared or "args" not in target or self.blocked(original_node):
            return updated_node
        own = self.own
        if own is not None and name in own.names and receiver == own.source:
            new_read = updated_node.with_changes(value=cst.Name(own.target))
            self.record(original_node, new_read, RULE, f"a field of {own.cls} now: {row.reason}")
            return new_read
        plan = plan_name(row)
        if plan.action == "rename":
            new = updated_node.with_changes(attr=cst.Name(plan.name))
            self.record(original_node, new, RULE, plan.note)
            return new
        self._warn(original_node, plan, f"{target}.{name}")
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = dotted(updated_node.func)
        if updated_node.args and self._asks_bare(dotted(original_node.func)) and not self.blocked(original_node):
            # 4.x's arguments (is_torch_tpu_available(check_device=False)) have no counterpart in
            # today's function; shardcompat run answers it without them too.
            new_call = updated_node.with_changes(args=[])
            self.record(original_node, new_call, RULE, "today's function asks the same question, without 4.x's arguments")
            return new_call
        if not updated_node.args:
            constant = self.constants.get(func)
            if constant is None and func.startswith("transformers."):
                plan = self._module_plan(func)
                constant = bool(plan.value) if plan.action == "set" else None
            if constant is not None and not self.blocked(original_node):
                new = cst.Name(str(constant))
                self.record(original_node, new, RULE, f"{func}() answers {constant} today")
                return new.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        last = func.rsplit(".", 1)[-1]
        if last.endswith("TrainingArguments"):
            kind = Kind.FIELD
        elif last.endswith("Trainer"):
            kind = Kind.TRAINER
        elif last == "from_pretrained":
            kind = Kind.FROM_PRETRAINED
        elif func in self.loaders:
            kind = Kind.DATASETS
        else:
            return updated_node
        return self._keywords(original_node, updated_node, kind)

    def _keywords(self, original: cst.Call, updated: cst.Call, kind: Kind) -> cst.Call:
        given = {a.keyword.value for a in updated.args if a.keyword is not None}
        args: list[cst.Arg] = []
        changed = False
        for arg, before in zip(updated.args, original.args):
            row = rows_named(arg.keyword.value, kind) if arg.keyword is not None else None
            if row is None or self.blocked(before):
                args.append(arg)
                continue
            plan = plan_field(row, _literal(self.module, arg.value)) if kind is Kind.FIELD else plan_name(row)
            if plan.action in ("rename", "set") and plan.name in given:
                plan = Plan("report", message=f"{row.name}: {plan.name} is given too", hint=f"keep only {plan.name}")
            if plan.action == "report":
                self._warn(before, plan, f"{row.name}=")
                args.append(arg)
                continue
            changed = True
            if plan.action == "drop":
                self.record(before, "", RULE, plan.note)
                continue
            new = arg.with_changes(keyword=cst.Name(plan.name))
            if plan.action == "set":
                new = new.with_changes(value=_expression(plan.value))
            self.record(before, new, RULE, plan.note)
            args.append(new)
            given.add(plan.name)
        if not changed:
            return updated
        return updated.with_changes(args=_tidy(args, list(updated.args)))
