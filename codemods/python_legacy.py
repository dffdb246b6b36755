"""libcst codemods for legacy ``sharded_ddp`` usage in Python.

One command class per rule family, all sharing the records in the codemod context:

- :class:`LegacyValues`: ``sharded_ddp=True`` keywords, ``"sharded_ddp": False`` dict entries,
  ``x.sharded_ddp = True`` and ``x["sharded_ddp"] = False`` assignments;
- :class:`LegacyDeclarations`: ``sharded_ddp: bool = field(default=False)`` and
  ``add_argument("--sharded_ddp", action="store_true")``;
- :class:`LegacyCommandLines`: command lines in string literals (plain, implicitly
  concatenated, f-strings) and argv lists, by the shared rules of :mod:`codemods.flags`;
- :class:`LegacyReview`: what cannot be rewritten safely (comparisons with ``True``/``False``);
- :class:`MigrateShardedDDP`: all of the above, in that order.

Run under libcst's runner::

    python -m libcst.tool codemod python_legacy.MigrateShardedDDP --no-format src/
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext, VisitorBasedCodemodCommand
from libcst.metadata import PositionProvider

from .context import Settings, Target
from .flags import (
    FLAG,
    FSDP_FLAG,
    HINTS,
    PLACEHOLDER,
    Meaning,
    meaning,
    plan_argv,
    rewrite_commands,
    translate,
)
from .report import Edit, Finding
from .spans import SpanEdit, apply_spans, file_skipped, marker_lines

__all__ = [
    "LegacyCommandLines",
    "LegacyDeclarations",
    "LegacyDefinitions",
    "LegacyReview",
    "LegacyValues",
    "MigrateShardedDDP",
    "PythonOutcome",
    "Records",
    "migrate_python",
]

KEY = "sharded_ddp"
_SCRATCH = "shardcompat.records"
_QUIET_CALLS = frozenset({"print", "debug", "info", "warning", "warn", "error", "exception",
                          "critical", "log", "echo", "secho", "write", "fail", "skip"})
_QUIET_KEYWORDS = frozenset({"help", "description", "epilog", "usage", "msg", "message", "doc"})

StringLeaf = Union[cst.SimpleString, cst.FormattedString]


@dataclass
class Records:
    """Edits and warnings collected by the commands of one module."""

    edits: list[Edit] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    marked: frozenset[int] | None = None
    skipped: bool = False
    has_flag: bool = True
    settings: Settings = field(default_factory=Settings)


def records_of(context: CodemodContext) -> Records:
    found = context.scratch.get(_SCRATCH)
    if not isinstance(found, Records):
        found = context.scratch[_SCRATCH] = Records()
    return found


def set_markers(records: Records, code: str) -> None:
    """Find the skip markers once per module (a marker near the top skips the whole file)."""
    records.marked = marker_lines(code)
    records.skipped = file_skipped(code, records.marked)
    records.has_flag = FLAG in code


def _name(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return ""


def _literal(node: cst.BaseExpression) -> Meaning | None:
    """The meaning of a literal ``True``/``False``/string value, or None for anything else."""
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return meaning(node.value == "True")
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return meaning(value if isinstance(value, str) else None)
    if isinstance(node, (cst.List, cst.Tuple)):
        words = [e.value.evaluated_value for e in node.elements if isinstance(e.value, cst.SimpleString)]
        if len(words) == len(node.elements) and all(isinstance(w, str) for w in words):
            found = meaning(" ".join(str(w) for w in words))
            return found if found.kind == "list" else None
    return None


def _string(text: str, like: cst.BaseExpression | None = None) -> cst.SimpleString:
    quote = like.quote if isinstance(like, cst.SimpleString) and len(like.quote) == 1 else '"'
    prefix = like.prefix if isinstance(like, cst.SimpleString) and "b" not in like.prefix.lower() else ""
    return cst.SimpleString(f"{prefix.replace('f', '')}{quote}{text}{quote}")


def _is_key(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.SimpleString) and node.evaluated_value == KEY


class _Command(VisitorBasedCodemodCommand):
    """Shared plumbing: the settings, the records, positions and the skip marker."""

    METADATA_DEPENDENCIES = (PositionProvider,)
    DESCRIPTION: str = "Migrate legacy boolean sharded_ddp usage."

    def __init__(self, context: CodemodContext, to: str = "list") -> None:
        super().__init__(context)
        self.records = records_of(context)
        target: Target = "fsdp" if to == "fsdp" else "list"
        if self.records.settings.to != target:
            self.records.settings = Settings(to=target, local_scripts=self.records.settings.local_scripts)
        self.to: Target = target

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument("--to", choices=("list", "fsdp"), default="list",
                                help="target syntax: the list syntax (default) or modern --fsdp")

    def visit_Module(self, node: cst.Module) -> bool:
        if self.records.marked is None:
            set_markers(self.records, node.code)
        return not self.records.skipped

    def line(self, node: cst.CSTNode) -> int:
        return int(self.get_metadata(PositionProvider, node).start.line)

    def blocked(self, node: cst.CSTNode) -> bool:
        """True when a skip marker sits on one of the node's lines."""
        if not self.records.marked:  # None or empty
            return False
        span = self.get_metadata(PositionProvider, node)
        return any(n in self.records.marked for n in range(span.start.line, span.end.line + 1))

    def record(self, original: cst.CSTNode, updated: cst.CSTNode, rule: str, note: str = "",
               at: cst.CSTNode | None = None) -> None:
        module = self.module
        self.records.edits.append(Edit(self.line(at or original), rule, module.code_for_node(original),
                                       module.code_for_node(updated), note))

    def flag(self, node: cst.CSTNode, rule: str, message: str, line: int = 0) -> None:
        number = line or self.line(node)
        self.records.warnings.append(Finding(number, rule, message, HINTS.get(rule, "")))
        self.warn(f"line {number}: {message}")

    def value_for(self, node: cst.BaseExpression, what: str, to: Target | None = None) -> cst.BaseExpression | None:
        """The new value expression for ``node``, or None (left as is, warned when unsafe)."""
        found = _literal(node)
        if found is None:
            if not (isinstance(node, cst.Name) and node.value == "None"):
                self.flag(node, "non-literal", f"{what}={self.module.code_for_node(node)} is not a literal; left as is")
            return None
        plan = translate(found, to or self.to)
        if plan.problem:
            self.flag(node, plan.rule, f"{what}: {plan.problem}")
            return None
        if plan.value is None:
            return None
        return _string(plan.value, node)


# --------------------------------------------------------------------------- values


class LegacyValues(_Command):
    """``sharded_ddp=True`` -> ``"simple"``, ``False`` -> ``""`` in calls, dicts and assignments."""

    DESCRIPTION = "sharded_ddp=True/False keywords, dict entries and assignments to the list syntax."

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if original_node.keyword is None or original_node.keyword.value != KEY or self.blocked(original_node):
            return updated_node
        value = self.value_for(original_node.value, KEY)
        if value is None:
            return updated_node
        changes: dict[str, Any] = {"value": value}
        if self.to == "fsdp":
            changes["keyword"] = cst.Name("fsdp")
        new = updated_node.with_changes(**changes)
        self.record(original_node, new, self._rule(original_node.value, "keyword"), self._note(original_node.value))
        return new

    def leave_DictElement(self, original_node: cst.DictElement, updated_node: cst.DictElement) -> cst.DictElement:
        if not _is_key(original_node.key) or self.blocked(original_node):
            return updated_node
        value = self.value_for(original_node.value, '"sharded_ddp"')
        if value is None:
            return updated_node
        changes: dict[str, Any] = {"value": value}
        if self.to == "fsdp":
            changes["key"] = _string("fsdp", original_node.key)
        new = updated_node.with_changes(**changes)
        self.record(original_node, new, self._rule(original_node.value, "dict"), self._note(original_node.value))
        return new

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        targets = [t.target for t in original_node.targets]
        if not any(self._is_target(t) for t in targets) or self.blocked(original_node):
            return updated_node
        # an attribute keeps its name, so it gets the list syntax even with --to fsdp
        value = self.value_for(original_node.value, self.module.code_for_node(targets[0]), to="list")
        if value is None:
            return updated_node
        new = updated_node.with_changes(value=value)
        note = "kept the sharded_ddp name; rename by hand for --fsdp" if self.to == "fsdp" else ""
        self.record(original_node, new, self._rule(original_node.value, "assign"), note)
        return new

    @staticmethod
    def _is_target(node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Attribute):
            return node.attr.value == KEY
        if isinstance(node, cst.Subscript) and len(node.slice) == 1:
            index = node.slice[0].slice
            return isinstance(index, cst.Index) and _is_key(index.value)
        return False

    def _rule(self, value: cst.BaseExpression, where: str) -> str:
        if self.to == "fsdp" and where != "assign":
            return "to-fsdp"
        found = _literal(value)
        return f"{where}-{'false' if found is not None and found.kind == 'false' else 'true'}"

    def _note(self, value: cst.BaseExpression) -> str:
        found = _literal(value)
        return translate(found, self.to).note if found is not None else ""


# --------------------------------------------------------------------------- declarations


def _is_bool(annotation: cst.BaseExpression) -> bool:
    if isinstance(annotation, cst.Name):
        return annotation.value == "bool"
    if isinstance(annotation, cst.Subscript) and _name(annotation.value) == "Optional" and len(annotation.slice) == 1:
        inner = annotation.slice[0].slice
        return isinstance(inner, cst.Index) and _is_bool(inner.value)
    return False


def _to_str(annotation: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(annotation, cst.Name):
        return annotation.with_changes(value="str")
    assert isinstance(annotation, cst.Subscript)
    element = annotation.slice[0]
    inner = element.slice
    assert isinstance(inner, cst.Index)
    return annotation.with_changes(slice=[element.with_changes(slice=inner.with_changes(value=_to_str(inner.value)))])


def _bool_to_str(node: cst.BaseExpression) -> cst.BaseExpression | None:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return _string("simple" if node.value == "True" else "")
    return None


def _keyword(call: cst.Call, name: str) -> int | None:
    for index, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == name:
            return index
    return None


class LegacyDeclarations(_Command):
    """Boolean declarations of the flag become string ones (default ``""``)."""

    DESCRIPTION = "sharded_ddp: bool fields and store_true arguments to str with default ''."

    def leave_AnnAssign(self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign) -> cst.AnnAssign:
        target = original_node.target
        if not (isinstance(target, cst.Name) and target.value == KEY) or self.blocked(original_node):
            return updated_node
        if not _is_bool(original_node.annotation.annotation):
            return updated_node
        value = updated_node.value
        if isinstance(value, cst.Call) and _name(value.func) == "field":
            index = _keyword(value, "default")
            new_default = _bool_to_str(value.args[index].value) if index is not None else None
            if new_default is not None and index is not None:
                args = list(value.args)
                args[index] = args[index].with_changes(value=new_default)
                value = value.with_changes(args=args)
        elif value is not None:
            value = _bool_to_str(value) or value
        new = updated_node.with_changes(
            annotation=updated_node.annotation.with_changes(annotation=_to_str(original_node.annotation.annotation)),
            value=value,
        )
        self.record(original_node, new, "decl-field", self._fsdp_note())
        return new

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if _name(original_node.func) != "add_argument" or self.blocked(original_node):
            return updated_node
        names = [a.value.evaluated_value for a in original_node.args
                 if a.keyword is None and isinstance(a.value, cst.SimpleString)]
        if FLAG not in names:
            return updated_node
        type_index = _keyword(original_node, "type")
        if type_index is not None:
            kind = self.module.code_for_node(original_node.args[type_index].value)
            if kind in ("bool", "str2bool", "strtobool") or "bool" in kind.lower():
                self.flag(original_node, "local-bool",
                          f"--sharded_ddp is declared here with type={kind}: a local boolean option, left as is")
            return updated_node
        action_index = _keyword(original_node, "action")
        if action_index is None:
            return updated_node
        action = original_node.args[action_index].value
        if not (isinstance(action, cst.SimpleString) and action.evaluated_value == "store_true"):
            return updated_node
        args = list(updated_node.args)
        old = args[action_index]
        default_index = _keyword(updated_node, "default")
        as_type = old.with_changes(keyword=cst.Name("type"), value=cst.Name("str"))
        if default_index is None:
            new_default = cst.Arg(_string(""), keyword=cst.Name("default"), equal=old.equal, comma=old.comma)
            args[action_index:action_index + 1] = [
                as_type.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                new_default,
            ]
        else:
            args[action_index] = as_type
            value = _bool_to_str(args[default_index].value)
            if value is not None:
                args[default_index] = args[default_index].with_changes(value=value)
        new = updated_node.with_changes(args=args)
        self.record(original_node, new, "decl-store-true", self._fsdp_note())
        return new

    def _fsdp_note(self) -> str:
        return "the declaration keeps the sharded_ddp name" if self.to == "fsdp" else ""


# --------------------------------------------------------------------------- command lines in strings


def _leaves(node: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    if isinstance(node, cst.ConcatenatedString):
        yield from _leaves(node.left)
        yield from _leaves(node.right)
    else:
        yield node


def _rebuild(node: cst.BaseExpression, new: Iterator[cst.BaseExpression]) -> cst.BaseExpression:
    if isinstance(node, cst.ConcatenatedString):
        left = _rebuild(node.left, new)
        right = _rebuild(node.right, new)
        assert isinstance(left, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString))
        assert isinstance(right, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString))
        return node.with_changes(left=left, right=right)
    return next(new)


@dataclass
class _Piece:
    text: str
    leaf: int
    part: int | None  # index in FormattedString.parts, None for a SimpleString
    editable: bool
    view: str = ""  # what the shell rules read (same length as text)

    def __post_init__(self) -> None:
        self.view = self.view or self.text


_ESCAPES = {"\\": " \\", "n": " \n", "t": "  ", '"': ' "', "'": " '"}


def _shell_view(raw: str, prefix: str) -> str:
    """The source text of a string as the shell would see its value, at the same offsets.

    ``\\\\`` + newline in the source is a line continuation once evaluated, ``\\n`` a newline:
    two-character escapes map to two characters that mean the same to the shell rules.
    """
    if "r" in prefix.lower() or "\\" not in raw:
        return raw
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), raw)


_ESCAPE = re.compile(r"\\(.)", re.S)


def _pieces(leaves: Sequence[cst.BaseExpression]) -> list[_Piece] | None:
    pieces: list[_Piece] = []
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, cst.SimpleString):
            pieces.append(_Piece(leaf.raw_value, index, None, True, _shell_view(leaf.raw_value, leaf.prefix)))
        elif isinstance(leaf, cst.FormattedString):
            prefix = leaf.start.rstrip("'\"")
            for part_index, part in enumerate(leaf.parts):
                if isinstance(part, cst.FormattedStringText):
                    pieces.append(_Piece(part.value, index, part_index, True, _shell_view(part.value, prefix)))
                else:
                    pieces.append(_Piece(PLACEHOLDER, index, part_index, False))
        else:
            return None
    return pieces


def _other_quote(leaf: cst.BaseExpression) -> str:
    quote: str = '"'
    if isinstance(leaf, cst.SimpleString):
        quote = leaf.quote
    elif isinstance(leaf, cst.FormattedString):
        quote = leaf.start.lstrip("rRfFbBuU")
    return "'" if '"' in quote else '"'


def _common(a: str, b: str) -> int:
    """Length of the common prefix."""
    size = 0
    for x, y in zip(a, b):
        if x != y:
            break
        size += 1
    return size


def _narrow(pieces: list[_Piece]) -> Callable[[SpanEdit], SpanEdit]:
    """Shrink an edit to what really changes (so ``"--sharded_ddp " "true"`` edits one part)."""
    joined = "".join(p.view for p in pieces)

    def narrow(edit: SpanEdit) -> SpanEdit:
        old, new = joined[edit.start:edit.end], edit.new
        head = _common(old, new)
        tail = _common(old[head:][::-1], new[head:][::-1])
        return SpanEdit(edit.start + head, edit.end - tail, new[head:len(new) - tail], edit.rule)

    return narrow


class LegacyCommandLines(_Command):
    """Command lines in string literals and argv lists, by the shared flag rules."""

    DESCRIPTION = "--sharded_ddp in command-line strings and argv lists to the list syntax."

    def __init__(self, context: CodemodContext, to: str = "list") -> None:
        super().__init__(context, to)
        self.quiet = 0
        self.handled: set[int] = set()
        self.roots: set[int] = set()

    # quiet contexts: docstrings and bare strings, help= and friends, print/log/raise calls
    def visit_Expr(self, node: cst.Expr) -> None:
        self.quiet += isinstance(node.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> cst.Expr:
        self.quiet -= isinstance(original_node.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
        return updated_node

    def visit_Arg(self, node: cst.Arg) -> None:
        self.quiet += node.keyword is not None and node.keyword.value in _QUIET_KEYWORDS

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        self.quiet -= original_node.keyword is not None and original_node.keyword.value in _QUIET_KEYWORDS
        return updated_node

    @staticmethod
    def _quiet_call(node: cst.Call) -> bool:
        name = _name(node.func)
        return name in _QUIET_CALLS or name.endswith(("Error", "Exception", "Warning"))

    def visit_Call(self, node: cst.Call) -> None:
        self.quiet += self._quiet_call(node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self.quiet -= self._quiet_call(original_node)
        return updated_node

    # argv lists
    def _visit_sequence(self, node: cst.List | cst.Tuple) -> None:
        for element in node.elements:
            value = element.value
            if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str) \
                    and value.evaluated_value.startswith(FLAG):
                self.handled.update(id(e.value) for e in node.elements)
                return

    def visit_List(self, node: cst.List) -> None:
        self._visit_sequence(node)

    def visit_Tuple(self, node: cst.Tuple) -> None:
        self._visit_sequence(node)

    def leave_List(self, original_node: cst.List, updated_node: cst.List) -> cst.BaseExpression:
        return self._leave_sequence(original_node, updated_node)

    def leave_Tuple(self, original_node: cst.Tuple, updated_node: cst.Tuple) -> cst.BaseExpression:
        return self._leave_sequence(original_node, updated_node)

    def _leave_sequence(self, original: cst.List | cst.Tuple, updated: cst.List | cst.Tuple) -> cst.BaseExpression:
        if not original.elements or id(original.elements[0].value) not in self.handled:
            return updated
        if self.quiet or self.blocked(original):
            return updated
        values: list[str | None] = []
        for element in original.elements:
            value = element.value
            literal = value.evaluated_value if isinstance(value, cst.SimpleString) else None
            values.append(literal if isinstance(literal, str) else None)
        elements = list(updated.elements)
        drops: set[int] = set()
        inserts: dict[int, cst.Element] = {}
        done = []
        for step in plan_argv(values, self.to):
            if step.problem:
                self.flag(original.elements[step.index], step.rule, f"argv list: {step.problem}")
                continue
            for index, text in step.set.items():
                elements[index] = elements[index].with_changes(value=_string(text, original.elements[step.index].value))
            if step.insert_after is not None:
                index, text = step.insert_after
                inserts[index] = cst.Element(_string(text, original.elements[index].value), comma=elements[index].comma)
                elements[index] = elements[index].with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            drops.update(i for i in step.drop if i < len(elements))
            done.append(step)
        if not done:
            return updated
        result: list[cst.BaseElement] = []
        for index, element in enumerate(elements):
            if index in drops:
                if index == len(elements) - 1 and result:
                    result[-1] = result[-1].with_changes(comma=element.comma)
                continue
            result.append(element)
            if index in inserts:
                result.append(inserts[index])
        if len(result) == 1 and isinstance(updated, cst.Tuple):
            result[-1] = result[-1].with_changes(comma=cst.Comma())  # ("--fp16",) stays a tuple
        new = updated.with_changes(elements=result)
        for step in done:
            self.record(original, new, step.rule, step.note, at=original.elements[step.index])
        return new

    # strings
    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.BaseExpression:
        return self._strings(original_node, updated_node)

    def leave_FormattedString(self, original_node: cst.FormattedString, updated_node: cst.FormattedString) -> cst.BaseExpression:
        return self._strings(original_node, updated_node)

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> None:
        if id(node) not in self.handled:
            self.handled.update(id(leaf) for leaf in _leaves(node))
            self.handled.update(id(n) for n in (node.left, node.right))
            self.roots.add(id(node))

    def leave_ConcatenatedString(self, original_node: cst.ConcatenatedString, updated_node: cst.ConcatenatedString) -> cst.BaseExpression:
        if id(original_node) not in self.roots:
            return updated_node
        self.roots.discard(id(original_node))
        return self._rewrite_leaves(original_node, updated_node)

    def _strings(self, original: StringLeaf, updated: StringLeaf) -> cst.BaseExpression:
        if id(original) in self.handled:
            return updated
        return self._rewrite_leaves(original, updated)

    def _rewrite_leaves(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        if self.quiet:
            return updated
        leaves = list(_leaves(updated))
        pieces = _pieces(leaves)
        if pieces is None:
            return updated
        joined = "".join(p.view for p in pieces)
        if FLAG not in joined or joined.strip() in (FLAG, FSDP_FLAG) or self.blocked(original):
            return updated
        found = rewrite_commands(joined, to=self.to, quote=_other_quote(leaves[0]), prose_guard=True,
                                 local_scripts=self.records.settings.local_scripts)
        first_line = self.line(original)
        for issue in found.issues:
            self.flag(original, issue.rule, issue.message, first_line + joined.count("\n", 0, issue.offset))
        for edit in found.review:
            self.flag(original, "review-local", f"{joined[edit.start:edit.end]!r}: the command runs a script "
                      "with its own boolean --sharded_ddp; left as is", first_line)
        if not found.edits:
            return updated
        texts = self._split_edits(pieces, found.edits, original)
        if texts is None:
            return updated
        for edit in found.edits:
            self.records.edits.append(Edit(first_line + joined.count("\n", 0, edit.start), edit.rule,
                                           joined[edit.start:edit.end], edit.new, edit.note))
        return _rebuild(updated, iter(self._new_leaves(leaves, pieces, texts)))

    def _split_edits(self, pieces: list[_Piece], edits: list[SpanEdit], node: cst.CSTNode) -> list[str] | None:
        bounds, pos = [], 0
        for piece in pieces:
            bounds.append((pos, pos + len(piece.text)))
            pos += len(piece.text)
        per_piece: list[list[SpanEdit]] = [[] for _ in pieces]
        for edit in map(_narrow(pieces), edits):
            owner = next((i for i, (a, b) in enumerate(bounds)
                          if pieces[i].editable and a <= edit.start and edit.end <= b), None)
            if owner is None:
                self.flag(node, "split-string", "an edit would cross the parts of a concatenated or "
                          "f-string; left as is")
                return None
            a = bounds[owner][0]
            per_piece[owner].append(SpanEdit(edit.start - a, edit.end - a, edit.new, edit.rule))
        return [apply_spans(p.text, e) if e else p.text for p, e in zip(pieces, per_piece)]

    @staticmethod
    def _new_leaves(leaves: list[cst.BaseExpression], pieces: list[_Piece], texts: list[str]) -> list[cst.BaseExpression]:
        new = list(leaves)
        for piece, text in zip(pieces, texts):
            if text == piece.text:
                continue
            leaf = new[piece.leaf]
            if isinstance(leaf, cst.SimpleString):
                new[piece.leaf] = leaf.with_changes(value=f"{leaf.prefix}{leaf.quote}{text}{leaf.quote}")
            elif isinstance(leaf, cst.FormattedString) and piece.part is not None:
                parts = list(leaf.parts)
                part = parts[piece.part]
                assert isinstance(part, cst.FormattedStringText)
                parts[piece.part] = part.with_changes(value=text)
                new[piece.leaf] = leaf.with_changes(parts=parts)
        return new


# --------------------------------------------------------------------------- review only


def _mentions_key(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.Name, cst.Attribute)):
        return _name(node) == KEY
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        return isinstance(index, cst.Index) and _is_key(index.value)
    return False


class LegacyReview(_Command):
    """Report what cannot be rewritten safely: ``x.sharded_ddp == True``, ``is False``..."""

    DESCRIPTION = "Warn about comparisons of sharded_ddp with True/False (left as is)."

    def visit_Comparison(self, node: cst.Comparison) -> None:
        sides = [node.left, *(t.comparator for t in node.comparisons)]
        bools = [s for s in sides if isinstance(s, cst.Name) and s.value in ("True", "False")]
        if bools and any(_mentions_key(s) for s in sides) and not self.blocked(node):
            self.flag(node, "comparison", f"{self.module.code_for_node(node)}: sharded_ddp is a string "
                      "of options now; comparing it with a bool is always False")


# --------------------------------------------------------------------------- all together


class LegacyDefinitions(LegacyValues, LegacyDeclarations, LegacyReview):
    """Values, declarations and review in one traversal (their visitor methods do not overlap)."""

    DESCRIPTION = "sharded_ddp values, declarations and bool comparisons in one pass."


class MigrateShardedDDP(CodemodCommand):
    """Every Python rule for legacy ``sharded_ddp`` usage: two traversals at most.

    Values, declarations and review share one traversal; command lines in strings get a second
    one, only when the module holds ``--sharded_ddp`` at all.
    """

    DESCRIPTION = "Migrate legacy boolean --sharded_ddp/sharded_ddp=True usage to the list syntax."
    PASSES: ClassVar[tuple[type[_Command], ...]] = (LegacyDefinitions, LegacyCommandLines)

    def __init__(self, context: CodemodContext, to: str = "list") -> None:
        super().__init__(context)
        self.to = to

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        _Command.add_args(arg_parser)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        records = records_of(self.context)
        if records.marked is None:
            set_markers(records, tree.code)
        for command in self.PASSES:
            if records.skipped:
                break
            if command is LegacyCommandLines and not records.has_flag:
                continue
            tree = command(self.context, to=self.to).transform_module(tree)
        return tree


@dataclass
class PythonOutcome:
    """The rewritten source (same type as given), its edits and warnings."""

    code: bytes | str
    edits: list[Edit]
    warnings: list[Finding]


def migrate_python(source: bytes | str, settings: Settings,
                   commands: Sequence[type[CodemodCommand]] = (MigrateShardedDDP,)) -> PythonOutcome:
    """Run ``commands`` on ``source``; raises ``libcst.ParserSyntaxError`` if it does not parse."""
    module = cst.parse_module(source)
    context = CodemodContext()
    records = records_of(context)
    records.settings = settings
    set_markers(records, source.decode(module.encoding, "replace") if isinstance(source, bytes) else source)
    for command in commands:
        if records.skipped:
            break
        module = command(context, to=settings.to).transform_module(module)  # type: ignore[call-arg]
    code: bytes | str = module.bytes if isinstance(source, bytes) else module.code
    return PythonOutcome(code, records.edits, records.warnings)
