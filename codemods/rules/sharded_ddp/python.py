"""The ``--sharded_ddp`` rules for Python, one transformer per rule family:

- :class:`Values`: ``sharded_ddp=True`` keywords, ``"sharded_ddp": False`` dict entries,
  ``x.sharded_ddp = True`` and ``x["sharded_ddp"] = False`` assignments (with ``--to fsdp``:
  ``fsdp=True`` and an ``fsdp_config`` dict, merged into a literal one already there);
- :class:`Declarations`: ``sharded_ddp: bool = field(default=False)`` and
  ``add_argument("--sharded_ddp", action="store_true")``, rewritten so that the old bare
  ``--sharded_ddp`` still parses (``nargs="?", const="simple"``);
- :class:`CommandLines`: command lines in string literals (plain, implicitly concatenated,
  f-strings) and argv lists, by the shared rules of :mod:`codemods.rules.sharded_ddp.flags`; a string that is only
  ``--sharded_ddp`` by where it is used (an argv fragment, a name, or neither: reported);
- :class:`Review`: what cannot be rewritten safely (comparisons with ``True``/``False``);
- :data:`LEGACY`: all of them, in two traversals (:class:`Definitions`, then
  :class:`CommandLines` when the module holds ``--sharded_ddp`` at all).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union

import libcst as cst

from ...formats.commands import PLACEHOLDER
from ...formats.pyscan import QUIET_KEYWORDS, quiet_call
from ...formats.spans import SpanEdit, apply_spans, one_line
from ...run.context import Target
from ...run.report import Edit
from ..base import Records, Rule, quote
from .flags import (
    FLAG,
    FSDP_FLAG,
    Meaning,
    meaning,
    plan_argv,
    rewrite_commands,
    translate,
)

__all__ = ["LEGACY", "CommandLines", "Declarations", "Definitions", "Review", "Values", "bare_flag_role"]

KEY = "sharded_ddp"
#: Names of keywords, variables and dict keys that hold command lines or argv fragments.
_ARGV_NAME = re.compile(r"args|argv|cmd|command", re.I)

StringLeaf = Union[cst.SimpleString, cst.FormattedString]


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


def _passthrough(node: cst.BaseExpression) -> bool:
    """``args.sharded_ddp``, ``sharded_ddp``, ``cfg["sharded_ddp"]``, ``getattr(x, "sharded_ddp")``:
    the option's own value passed on."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        return _name(node) == KEY
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        return isinstance(index, cst.Index) and _is_key(index.value)
    if isinstance(node, cst.Call) and _name(node.func) == "getattr" and len(node.args) >= 2:
        return _is_key(node.args[1].value)
    return False


def _string(text: str, like: cst.BaseExpression | None = None) -> cst.SimpleString:
    """A string literal for ``text``, quoted like ``like`` where that needs no escape."""
    quote: str = like.quote if isinstance(like, cst.SimpleString) and len(like.quote) == 1 else '"'
    prefix = like.prefix if isinstance(like, cst.SimpleString) and "b" not in like.prefix.lower() else ""
    prefix = prefix.replace("f", "").replace("F", "")
    if quote in text or "\\" in text:
        other = "'" if quote == '"' else '"'
        quote = other if other not in text else quote
        prefix = prefix.replace("r", "").replace("R", "")
        text = text.replace("\\", "\\\\").replace(quote, "\\" + quote)
    return cst.SimpleString(f"{prefix}{quote}{text}{quote}")


def _py_literal(value: Any) -> str:
    """Python source for a JSON-like value (an ``fsdp_config`` dict)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_py_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_py_literal(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _is_key(node: cst.BaseExpression, key: str = KEY) -> bool:
    return isinstance(node, cst.SimpleString) and node.evaluated_value == key


class _Rule(Rule):
    """A ``--sharded_ddp`` rule: what a literal value becomes."""

    def value_for(self, node: cst.BaseExpression, what: str, to: Target | None = None) -> cst.BaseExpression | None:
        """The new value expression for ``node``, or None (left as is, warned when unsafe)."""
        found = _literal(node)
        target = to or self.to
        code = one_line(self.module.code_for_node(node))
        if found is None:
            if target == "list" and _passthrough(node) and self.facts.declares_flag:
                return None  # the option's own value, declared in this file as a string: migrated already
            if not (isinstance(node, cst.Name) and node.value == "None"):
                self.flag(node, "non-literal", f"{what}={code} is not a literal; left as is")
            return None
        plan = translate(found, target, self.form)
        if plan.problem:
            self.flag(node, plan.rule, f"{what}={code}: {plan.problem}")
            return None
        if plan.value is None:
            return None
        return _string(plan.value, node)



# --------------------------------------------------------------------------- values


def _keyword(call: cst.Call, name: str) -> int | None:
    for index, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == name:
            return index
    return None


_SPACE = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


Item = Union[cst.Arg, cst.DictElement]


def _item_key(item: cst.CSTNode) -> str | None:
    """The name of a keyword argument or the string key of a dict entry."""
    if isinstance(item, cst.Arg):
        return item.keyword.value if item.keyword is not None else None
    if isinstance(item, cst.DictElement) and isinstance(item.key, cst.SimpleString):
        key = item.key.evaluated_value
        return key if isinstance(key, str) else None
    return None


def _renamed(item: Item, name: str, value: cst.BaseExpression) -> Item:
    """``item`` under another name (keyword or dict key, quoted like the original) and value."""
    if isinstance(item, cst.Arg):
        return item.with_changes(keyword=cst.Name(name), value=value)
    return item.with_changes(key=_string(name, item.key), value=value)


def _merged(node: cst.BaseExpression, config: dict[str, Any]) -> tuple[cst.Dict | None, str]:
    """``config`` merged into a literal dict ``node``: ``(new dict, "")``, or ``(None, why not)``."""
    if not isinstance(node, cst.Dict):
        return None, "is not a literal dict"
    have: dict[str, Any] = {}
    for element in node.elements:
        if not (isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)):
            return None, "is not a literal dict"
        try:
            have[str(element.key.evaluated_value)] = ast.literal_eval(cst.Module([]).code_for_node(element.value))
        except (ValueError, SyntaxError):
            have[str(element.key.evaluated_value)] = None
    clash = [k for k, v in config.items() if k in have and have[k] != v]
    if clash:
        return None, f"sets {', '.join(clash)} differently"
    new = [cst.DictElement(cst.SimpleString(json.dumps(k)), cst.parse_expression(_py_literal(v)))
           for k, v in config.items() if k not in have]
    if not new:
        return node, ""
    elements = list(node.elements)
    separator = elements[0].comma if len(elements) > 1 and isinstance(elements[0].comma, cst.Comma) else _SPACE
    last = elements[-1].comma if elements else cst.MaybeSentinel.DEFAULT
    elements = [*(e.with_changes(comma=separator) for e in elements), *(e.with_changes(comma=separator) for e in new)]
    elements[-1] = elements[-1].with_changes(comma=last)
    return node.with_changes(elements=elements), ""


class Values(_Rule):
    """``sharded_ddp=True`` -> ``"simple"``, ``False`` -> ``""`` in calls, dicts and assignments."""

    DESCRIPTION = "sharded_ddp=True/False keywords, dict entries and assignments to the list syntax."

    @property
    def _to_config(self) -> bool:
        return self.to == "fsdp" and self.form == "config"

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if original_node.keyword is None or original_node.keyword.value != KEY or self._to_config \
                or self.blocked(original_node):
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
        if not _is_key(original_node.key) or self._to_config or self.blocked(original_node):
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

    # --to fsdp, current form: fsdp=True plus fsdp_config, next to (or merged into) the
    # fsdp_config the call or dict already has
    def _fsdp_config(self, node: cst.CSTNode, value: cst.BaseExpression, what: str) -> tuple[Any, str] | None:
        """``(fsdp value, note)`` and the config to write, or None (warned)."""
        found = _literal(value)
        code = one_line(self.module.code_for_node(value))
        if found is None:
            self.flag(node, "non-literal", f"{what}={code} is not a literal; left as is")
            return None
        plan = translate(found, "fsdp", "config")
        if plan.problem:
            self.flag(node, plan.rule, f"{what}={code}: {plan.problem}")
            return None
        return plan, plan.note

    def _to_fsdp(self, originals: Sequence[cst.CSTNode], items: list[Any], spelled: Callable[[str], str]) -> bool:
        """``sharded_ddp`` among ``items`` (a call's keywords or a dict's entries) becomes
        ``fsdp`` plus an ``fsdp_config`` next to it or merged into the one already there;
        ``items`` is edited in place.  False when there is nothing to do (or it was reported)."""
        index = next((i for i, item in enumerate(originals) if _item_key(item) == KEY), None)
        if index is None or self.blocked(originals[index]):
            return False
        original, item = originals[index], items[index]
        found = self._fsdp_config(original, item.value, spelled(KEY))
        if found is None:
            return False
        plan, note = found
        before = quote(self.module, original)
        if plan.fsdp_config is None:  # off
            items[index] = _renamed(item, "fsdp", cst.Name("False"))
            self.record(original, items[index], "to-fsdp", note, before=before)
            return True
        keys = [_item_key(i) for i in items]
        if "fsdp" in keys:
            self.flag(original, "fsdp-manual", f"{spelled('fsdp')} is already set here; merge {before} into it "
                      "by hand; left as is")
            return False
        config = _py_literal(plan.fsdp_config)
        if "fsdp_config" in keys:
            holder = items[keys.index("fsdp_config")]
            merged, problem = _merged(holder.value, plan.fsdp_config)
            if merged is None:
                self.flag(original, "fsdp-config-exists", f"{spelled('fsdp_config')}"
                          f"{one_line(self.module.code_for_node(holder.value))} {problem}; merge {config} into "
                          "it by hand; left as is")
                return False
            items[keys.index("fsdp_config")] = holder.with_changes(value=merged)
            items[index] = _renamed(item, "fsdp", cst.Name("True"))
            after = f"{spelled('fsdp')}True, {spelled('fsdp_config')}+{config}"
        else:
            items[index:index + 1] = [_renamed(item, "fsdp", cst.Name("True")).with_changes(comma=_SPACE),
                                      _renamed(item, "fsdp_config", cst.parse_expression(config))]
            after = f"{spelled('fsdp')}True, {spelled('fsdp_config')}{config}"
        self.record(original, after, "to-fsdp", note, before=before)
        return True

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        result = super().leave_Call(original_node, updated_node)  # type: ignore[safe-super]
        if not self._to_config or not isinstance(result, cst.Call):
            return result
        args: list[Any] = list(result.args)
        return result.with_changes(args=args) if self._to_fsdp(original_node.args, args, "{}=".format) else result

    def leave_Dict(self, original_node: cst.Dict, updated_node: cst.Dict) -> cst.BaseExpression:
        if not self._to_config:
            return updated_node
        elements: list[Any] = list(updated_node.elements)  # dict entries; a **spread is never the key
        changed = self._to_fsdp(original_node.elements, elements, '"{}": '.format)
        return updated_node.with_changes(elements=elements) if changed else updated_node

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
        return translate(found, self.to, self.form).note if found is not None else ""


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


#: What keeps a bare ``--sharded_ddp`` working once the option takes a value: argparse's
#: optional value, ``"simple"`` when the flag comes alone.
BARE_KEEPS_WORKING = {"nargs": "?", "const": "simple"}


def _kwarg(name: str, value: str, like: cst.Arg) -> cst.Arg:
    return cst.Arg(cst.parse_expression(value), keyword=cst.Name(name), equal=like.equal, comma=_SPACE)


class Declarations(_Rule):
    """Boolean declarations of the flag become string ones (default ``""``) that still accept
    the bare flag: ``nargs="?", const="simple"`` (for ``HfArgumentParser`` dataclass fields, in
    the field's metadata)."""

    DESCRIPTION = "sharded_ddp: bool fields and store_true arguments to str options that keep the bare flag."

    def leave_AnnAssign(self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign) -> cst.AnnAssign:
        target = original_node.target
        if not (isinstance(target, cst.Name) and target.value == KEY) or self.blocked(original_node):
            return updated_node
        if not _is_bool(original_node.annotation.annotation):
            return updated_node
        value = updated_node.value
        note = self._fsdp_note()
        if isinstance(value, cst.Call) and _name(value.func) == "field":
            value, note = self._field(value)
        elif value is not None:
            value = _bool_to_str(value) or value
            note = note or ("HfArgumentParser needs field(..., metadata={'nargs': '?', 'const': 'simple'}) "
                            "to keep accepting a bare --sharded_ddp")
        new = updated_node.with_changes(
            annotation=updated_node.annotation.with_changes(annotation=_to_str(original_node.annotation.annotation)),
            value=value,
        )
        self.record(original_node, new, "decl-field", note)
        return new

    def _field(self, call: cst.Call) -> tuple[cst.Call, str]:
        """``field(default=False, metadata={...})`` -> ``default=""``, and the metadata keys that
        make ``HfArgumentParser`` accept the bare flag."""
        args = list(call.args)
        index = _keyword(call, "default")
        new_default = _bool_to_str(args[index].value) if index is not None else None
        if new_default is not None and index is not None:
            args[index] = args[index].with_changes(value=new_default)
        note = self._fsdp_note()
        where = _keyword(call, "metadata")
        if where is None:
            last = args[-1] if args else None
            metadata = cst.Arg(cst.parse_expression(_py_literal(BARE_KEEPS_WORKING)), keyword=cst.Name("metadata"),
                               equal=last.equal if last else cst.MaybeSentinel.DEFAULT,
                               comma=last.comma if last else cst.MaybeSentinel.DEFAULT)
            if last is not None:
                args[-1] = last.with_changes(comma=_SPACE)
            args.append(metadata)
        else:
            merged, _ = _merged(args[where].value, BARE_KEEPS_WORKING)
            if merged is None:
                note = "add 'nargs': '?', 'const': 'simple' to its metadata so that a bare --sharded_ddp still parses"
            else:
                args[where] = args[where].with_changes(value=merged)
        return call.with_changes(args=args), note

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        result = super().leave_Call(original_node, updated_node)  # type: ignore[safe-super]
        if _name(original_node.func) != "add_argument" or not isinstance(result, cst.Call) \
                or self.blocked(original_node):
            return result
        names = [a.value.evaluated_value for a in original_node.args
                 if a.keyword is None and isinstance(a.value, cst.SimpleString)]
        if FLAG not in names:
            return result
        type_index = _keyword(original_node, "type")
        if type_index is not None:
            kind = self.module.code_for_node(original_node.args[type_index].value)
            if kind in ("bool", "str2bool", "strtobool") or "bool" in kind.lower():
                self.flag(original_node, "local-bool",
                          f"--sharded_ddp is declared here with type={kind}: a local boolean option, left as is")
            return result
        action_index = _keyword(original_node, "action")
        if action_index is None:
            return result
        action = original_node.args[action_index].value
        if not (isinstance(action, cst.SimpleString) and action.evaluated_value == "store_true"):
            return result
        args = list(result.args)
        old = args[action_index]
        added = [_kwarg(k, _py_literal(v), old) for k, v in BARE_KEEPS_WORKING.items()]
        default_index = _keyword(result, "default")
        before = [quote(self.module, original_node.args[action_index])]
        if default_index is None:
            added.append(_kwarg("default", '""', old))
        else:
            value = _bool_to_str(args[default_index].value)
            if value is not None:
                before.insert(0, quote(self.module, original_node.args[default_index]))
                args[default_index] = args[default_index].with_changes(value=value)
        added[-1] = added[-1].with_changes(comma=old.comma)
        args[action_index:action_index + 1] = added
        new = result.with_changes(args=args)
        after = [quote(self.module, a) for a in added]
        if default_index is not None and len(before) > 1:
            after.insert(0, quote(self.module, args[default_index]))
        note = self._fsdp_note() or (
            "a positional argument right after a bare --sharded_ddp is now read as its value"
            if self.facts.positionals else "")
        self.record(original_node, ", ".join(after), "decl-store-true", note, before=", ".join(before))
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


def _escaped(text: str, leaf: cst.BaseExpression) -> str | None:
    """``text`` written inside ``leaf``'s quotes (``None``: a raw string cannot hold it)."""
    quote: str
    if isinstance(leaf, cst.SimpleString):
        prefix, quote = leaf.prefix.lower(), leaf.quote
    elif isinstance(leaf, cst.FormattedString):
        prefix, quote = leaf.start.rstrip("'\"").lower(), leaf.start.lstrip("rRfFbBuU")
    else:
        return text
    if "\\" not in text and quote[0] not in text and not ("f" in prefix and ("{" in text or "}" in text)):
        return text
    if "r" in prefix:
        return None
    text = text.replace("\\", "\\\\").replace(quote[0], "\\" + quote[0])
    return text.replace("{", "{{").replace("}", "}}") if "f" in prefix else text


def _follower(stack: Sequence[cst.CSTNode]) -> tuple[bool, cst.BaseExpression | None]:
    """For a string on top of ``stack`` inside ``a + b + ...``: ``(concatenated, what follows
    it)``; nothing follows the last operand."""
    node = stack[-1]
    concatenated = False
    for parent in reversed(stack[:-1]):
        if not (isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Add)):
            break
        concatenated = True
        if parent.left is node:
            return True, parent.right
        node = parent
    return concatenated, None


def _text_of(node: cst.BaseExpression | None) -> str | None:
    """The literal text at the start of ``node`` (a string or the left end of a sum)."""
    while isinstance(node, cst.BinaryOperation):
        node = node.left
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(node, cst.ConcatenatedString):
        return _text_of(node.left)
    if isinstance(node, cst.FormattedString):
        first = node.parts[0] if node.parts else None
        return first.value if isinstance(first, cst.FormattedStringText) else None
    return None


_ONE_WORD = "the fsdp_config JSON is one shell word: run this command through a shell or shlex.split, not str.split"
_SPLIT = "the fsdp_config JSON is written without spaces or quotes for this .split()"
_LABEL_METHODS = frozenset({"remove", "index", "count", "startswith", "endswith", "replace", "find",
                            "get", "pop", "discard", "__contains__", "add_argument", "split"})


def bare_flag_role(stack: Sequence[cst.CSTNode]) -> str:
    """Where a string that is exactly ``--sharded_ddp`` (top of ``stack``) is used: ``argv`` (a
    command-line fragment: passed as ``*args*``/``*argv*``/``*cmd*``, concatenated into a
    command, ``.split()``), ``element`` (appended to an argv list as one element), ``label``
    (the option's name: a dict key, a comparison, ``add_argument``'s name, a subscript) or
    ``unknown``."""
    node, parent = stack[-1], stack[-2] if len(stack) > 1 else None
    concatenated, follower = _follower(stack)
    if concatenated:
        text = _text_of(follower) if follower is not None else ""
        if text is None:
            return "unknown"  # "--sharded_ddp " + mode: the value may follow
        return "argv" if not text.strip() or text.lstrip().startswith("-") else "unknown"
    if isinstance(parent, cst.Attribute) and parent.value is node:
        return "argv" if parent.attr.value == "split" else "unknown"
    if isinstance(parent, cst.Arg):
        if parent.keyword is not None:
            return "argv" if _ARGV_NAME.search(parent.keyword.value) else "unknown"
        call = stack[-3] if len(stack) > 2 else None
        if isinstance(call, cst.Call):
            method = _name(call.func)
            receiver = _name(call.func.value) if isinstance(call.func, cst.Attribute) else ""
            if method in _LABEL_METHODS:
                return "label"
            if method == "append" and _ARGV_NAME.search(receiver) and len(call.args) == 1:
                return "element"  # one argv element: the call becomes .extend([flag, value])
        return "unknown"
    if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
        targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
        return "argv" if any(_ARGV_NAME.search(_name(t)) for t in targets) else "unknown"
    if isinstance(parent, (cst.Comparison, cst.ComparisonTarget, cst.Index, cst.SubscriptElement)):
        return "label"
    if isinstance(parent, cst.DictElement):
        if parent.key is node:
            return "label"
        key = parent.key.evaluated_value if isinstance(parent.key, cst.SimpleString) else ""
        return "argv" if isinstance(key, str) and _ARGV_NAME.search(key) else "unknown"
    return "unknown"


class CommandLines(_Rule):
    """Command lines in string literals and argv lists, by the shared flag rules."""

    DESCRIPTION = "--sharded_ddp in command-line strings and argv lists to the list syntax."

    NEEDS_FLAG = True

    def __init__(self, records: Records, module: cst.Module) -> None:
        super().__init__(records, module)
        self.quiet = 0
        self.handled: set[int] = set()
        self.roots: set[int] = set()
        self.stack: list[cst.CSTNode] = []

    # the path from the module to the node being left, for the bare-flag rule
    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        result = super().on_leave(original_node, updated_node)
        self.stack.pop()
        return result

    # quiet contexts: docstrings and bare strings, help= and friends, print/log/raise calls
    def visit_Expr(self, node: cst.Expr) -> None:
        self.quiet += isinstance(node.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> cst.Expr:
        self.quiet -= isinstance(original_node.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
        return updated_node

    def visit_Arg(self, node: cst.Arg) -> None:
        self.quiet += node.keyword is not None and node.keyword.value in QUIET_KEYWORDS

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        self.quiet -= original_node.keyword is not None and original_node.keyword.value in QUIET_KEYWORDS
        return updated_node

    def visit_Call(self, node: cst.Call) -> None:
        self.quiet += quiet_call(_name(node.func))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self.quiet -= quiet_call(_name(original_node.func))
        if self.quiet or not (isinstance(updated_node.func, cst.Attribute) and len(original_node.args) == 1):
            return updated_node
        arg = original_node.args[0].value
        if updated_node.func.attr.value != "append" or not _ARGV_NAME.search(_name(updated_node.func.value)) \
                or not (isinstance(arg, cst.SimpleString) and arg.evaluated_value == FLAG) or self.blocked(original_node):
            return updated_node
        # args.append("--sharded_ddp") -> args.extend(["--sharded_ddp", "simple"]): still one flag, one value
        steps = plan_argv([FLAG], self.to, self.form)
        if not steps or steps[0].problem:
            return updated_node
        elements = [steps[0].set.get(0, FLAG), *(steps[0].insert_after or (0, ()))[1]]
        new = updated_node.with_changes(
            func=updated_node.func.with_changes(attr=cst.Name("extend")),
            args=[updated_node.args[0].with_changes(value=cst.List([
                cst.Element(_string(e, arg), comma=_SPACE if i < len(elements) - 1 else cst.MaybeSentinel.DEFAULT)
                for i, e in enumerate(elements)]))])
        self.record(original_node, new, steps[0].rule, steps[0].note)
        return new

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
        inserts: dict[int, list[cst.Element]] = {}
        done = []
        for step in plan_argv(values, self.to, self.form):
            if step.problem:
                self.flag(original.elements[step.index], step.rule, f"argv list: {step.problem}")
                continue
            like = original.elements[step.index].value
            for index, text in step.set.items():
                elements[index] = elements[index].with_changes(value=_string(text, like))
            if step.insert_after is not None:
                index, texts = step.insert_after
                new = [cst.Element(_string(text, like), comma=_SPACE) for text in texts]
                new[-1] = new[-1].with_changes(comma=elements[index].comma)
                inserts[index] = new
                elements[index] = elements[index].with_changes(comma=_SPACE)
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
            result.extend(inserts.get(index, ()))
        if len(result) == 1 and isinstance(updated, cst.Tuple):
            result[-1] = result[-1].with_changes(comma=cst.Comma())  # ("--fp16",) stays a tuple
        new_node = updated.with_changes(elements=result)
        for step in done:
            touched = sorted({step.index, *step.set, *step.drop, *(step.insert_after or ())[:1]})
            before = ", ".join(quote(self.module, original.elements[i]) for i in touched if i < len(original.elements))
            after = []
            for i in touched:
                if i not in drops and i < len(elements):
                    after.append(quote(self.module, elements[i]))
                after += [quote(self.module, e) for e in inserts.get(i, ())]
            self.record(original, ", ".join(after), step.rule, step.note, at=original.elements[step.index],
                        before=before)
        return new_node

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

    def _bare(self, original: cst.BaseExpression) -> bool:
        """Decide for a string that is exactly the flag: True to rewrite it as a command line."""
        role = bare_flag_role(self.stack)
        if role == "unknown" and not self.quiet:
            self.flag(original, "bare-flag", f"{one_line(self.module.code_for_node(original))} alone: "
                      "a command-line fragment or the option's name? left as is")
        return role == "argv"

    def _rewrite_leaves(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        if self.quiet:
            return updated
        leaves = list(_leaves(updated))
        pieces = _pieces(leaves)
        if pieces is None:
            return updated
        joined = "".join(p.view for p in pieces)
        if FLAG not in joined or joined.strip() == FSDP_FLAG or self.blocked(original):
            return updated
        if joined.strip() == FLAG and not self._bare(original):
            return updated
        parent = self.stack[-2] if len(self.stack) > 1 else None
        split = isinstance(parent, cst.Attribute) and parent.value is original and parent.attr.value == "split"
        found = rewrite_commands(joined, to=self.to, quote=_other_quote(leaves[0]), prose_guard=True,
                                 local_scripts=self.records.settings.local_scripts, form=self.form,
                                 split_words=split)
        line_at = self._line_at(original, pieces)
        first_line = line_at(0)
        for issue in found.issues:
            self.flag(original, issue.rule, issue.message, line_at(issue.offset))
        for edit in found.review:
            self.flag(original, "review-local", f"{joined[edit.start:edit.end]!r}: the command runs a script "
                      "with its own boolean --sharded_ddp; left as is", first_line)
        if not found.edits:
            return updated
        texts = self._split_edits(leaves, pieces, found.edits, original)
        if texts is None:
            return updated
        for edit in found.edits:
            note = edit.note
            if "--fsdp_config" in edit.new:
                note = "; ".join(filter(None, [note, _SPLIT if split else _ONE_WORD]))
            self.records.edits.append(Edit(line_at(edit.start), edit.rule,
                                           joined[edit.start:edit.end], edit.new, note))
        return _rebuild(updated, iter(self._new_leaves(leaves, pieces, texts)))

    def _line_at(self, original: cst.BaseExpression, pieces: list[_Piece]) -> Callable[[int], int]:
        """The line of an offset into the joined text of ``original``'s string parts: the line
        of the part that holds it, plus the line breaks inside the part before it."""
        originals = list(_leaves(original))
        starts: dict[int, int] = {}
        pos = 0
        for piece in pieces:
            starts.setdefault(piece.leaf, pos)
            pos += len(piece.text)
        joined = "".join(p.view for p in pieces)
        lines: dict[int, int] = {}

        def line_at(offset: int) -> int:
            leaf = max((i for i, start in starts.items() if start <= offset), default=0)
            if leaf not in lines:
                lines[leaf] = self.line(originals[leaf])
            return lines[leaf] + joined.count("\n", starts[leaf], offset)

        return line_at

    def _split_edits(self, leaves: list[cst.BaseExpression], pieces: list[_Piece], edits: list[SpanEdit],
                     node: cst.CSTNode) -> list[str] | None:
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
            new = _escaped(edit.new, leaves[pieces[owner].leaf])
            if new is None:
                self.flag(node, "split-string", f"{edit.new!r} cannot be written inside this raw string; left as is")
                return None
            a = bounds[owner][0]
            per_piece[owner].append(SpanEdit(edit.start - a, edit.end - a, new, edit.rule))
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


class Review(_Rule):
    """Report what cannot be rewritten safely: ``x.sharded_ddp == True``, ``is False``..."""

    DESCRIPTION = "Warn about comparisons of sharded_ddp with True/False (left as is)."

    def visit_Comparison(self, node: cst.Comparison) -> None:
        sides = [node.left, *(t.comparator for t in node.comparisons)]
        bools = [s for s in sides if isinstance(s, cst.Name) and s.value in ("True", "False")]
        if bools and any(_mentions_key(s) for s in sides) and not self.blocked(node):
            self.flag(node, "comparison", f"{one_line(self.module.code_for_node(node))}: sharded_ddp is a string "
                      "of options now; comparing it with a bool is always False")


# --------------------------------------------------------------------------- all together


class Definitions(Values, Declarations, Review):
    """Values, declarations and review in one traversal (their ``leave_Call`` methods chain)."""

    DESCRIPTION = "sharded_ddp values, declarations and bool comparisons in one pass."


#: Every ``--sharded_ddp`` rule, in the order they run.
LEGACY: tuple[type[Rule], ...] = (Definitions, CommandLines)
