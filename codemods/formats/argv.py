"""Argv lists by span: one implementation of :func:`~codemods.rules.sharded_ddp.flags.plan_argv` for every
written form (JSON arrays, YAML block and flow sequences, Dockerfile exec form)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..rules.sharded_ddp.flags import HINTS, plan_argv
from ..run.context import Settings
from . import jsonspan
from .spans import Issue, Rewrite, SpanEdit

__all__ = ["ArgvItem", "argv_edits", "argv_rewrite"]


@dataclass(frozen=True)
class ArgvItem:
    """One element of an argv list, by span, so that every list form shares :func:`argv_edits`.

    ``value`` is its literal text (``None``: not a literal, e.g. a variable or a mapping);
    ``quote`` is how a value is written next to it: ``'"'`` (JSON), ``"'"`` or ``""`` (plain
    YAML).  ``line`` (the whole line) and ``prefix`` (indentation and dash) are set for YAML
    block-sequence items, which add and remove whole lines instead of ``, ``-separated items.
    """

    start: int
    end: int
    value: str | None
    quote: str = '"'
    line: tuple[int, int] | None = None
    prefix: str = ""
    #: A literal that cannot be edited where it stands (a YAML anchor or tag, a block scalar,
    #: another item on its line): a step that needs to edit it is a warning instead.
    fixed: bool = False


def argv_rewrite(text: str, array: jsonspan.JArray, settings: Settings) -> Rewrite:
    """Apply :func:`~codemods.rules.sharded_ddp.flags.plan_argv` to a JSON-style array inside ``text``."""
    return argv_edits(text, [
        ArgvItem(i.start, i.end, i.value if isinstance(i, jsonspan.JScalar) and isinstance(i.value, str) else None)
        for i in array.items
    ], settings)


def argv_edits(text: str, items: list[ArgvItem], settings: Settings) -> Rewrite:
    """Span edits for the :func:`~codemods.rules.sharded_ddp.flags.plan_argv` steps of one argv list."""
    result = Rewrite()
    dropped: dict[int, str] = {}  # element -> rule
    for step in plan_argv([i.value for i in items], settings.to, settings.fsdp_form):
        touched = {step.index, *step.set, *step.drop, *(step.insert_after or ())[:1]}
        if step.problem or any(items[i].fixed for i in touched if i < len(items)):
            rule, problem = (step.rule, step.problem) if step.problem else ("argv-layout", _FIXED)
            result.issues.append(Issue(items[step.index].start, rule, problem, HINTS.get(rule, "")))
            continue
        for index, new in step.set.items():
            item = items[index]
            result.edits.append(SpanEdit(item.start, item.end, _scalar(new, item.quote), step.rule, step.note))
        if step.insert_after is not None:
            pos, new = _inserted(text, items[step.insert_after[0]], step.insert_after[1])
            result.edits.append(SpanEdit(pos, pos, new, step.rule, step.note))
        dropped.update(dict.fromkeys(step.drop, step.rule))
    runs: list[list[int]] = []  # consecutive dropped elements go in one edit, so edits never overlap
    for index in sorted(dropped):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    for first, last in runs:
        result.edits += [SpanEdit(start, end, new, dropped[first])
                         for start, end, new in _dropped(text, items, first, last)]
    return result


_FIXED = ("written with an anchor or tag, as a block scalar or next to another element, so not "
          "edited in place; left as is")
_PLAIN = re.compile(r"[\w-][\w.=/-]*(?: [\w.=/-]+)*")


def _scalar(value: str, quote: str) -> str:
    """``value`` quoted like its neighbour: double quotes (JSON), YAML single quotes, or plain
    YAML when that still reads as the same string."""
    if quote == "'":
        return "'" + value.replace("'", "''") + "'"
    if quote == "" and _PLAIN.fullmatch(value):
        import yaml

        if yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str":
            return value
    return json.dumps(value)


def _newline(text: str, line_end: int) -> str:
    if line_end and text[line_end - 1] == "\n":
        return "\r\n" if text[line_end - 2:line_end] == "\r\n" else "\n"
    return "\r\n" if "\r\n" in text else "\n"


def _inserted(text: str, item: ArgvItem, values: tuple[str, ...]) -> tuple[int, str]:
    """Where and what to insert for new elements after ``item``: ``, value`` or new lines."""
    new = [_scalar(value, item.quote) for value in values]
    if item.line is None:
        return item.end, "".join(", " + n for n in new)
    end = item.line[1]
    newline = _newline(text, end)
    if text[end - 1] == "\n":
        return end, "".join(item.prefix + n + newline for n in new)
    return end, "".join(newline + item.prefix + n for n in new)  # the last line, without a final newline


def _dropped(text: str, items: list[ArgvItem], first: int, last: int) -> list[tuple[int, int, str]]:
    """The spans that remove elements ``first..last`` (with their separators or lines)."""
    if items[first].line is None:
        if last + 1 < len(items):
            return [(items[first].start, items[last + 1].start, "")]
        if first > 0:
            return [(items[first - 1].end, items[last].end, "")]
        return [(items[first].start, items[last].end, "")]
    if first == 0 and last == len(items) - 1:  # nothing left: an empty list (as JSON), not a null
        prefix = items[first].prefix  # indented past the dash: valid even for an indentless list
        indent = " " * (len(prefix) - len(prefix.lstrip()) + 2)
        return [(items[first].start - len(prefix), items[last].end, indent + "[]")]
    spans: list[list[int]] = []  # whole lines, adjacent ones merged; comment lines between stay
    for item in items[first:last + 1]:
        assert item.line is not None
        if spans and spans[-1][1] == item.line[0]:
            spans[-1][1] = item.line[1]
        else:
            spans.append(list(item.line))
    start, end = spans[-1]
    if text[end - 1] != "\n" and start:  # the last line of the file: take the newline before it
        spans[-1][0] -= 2 if text[start - 2:start] == "\r\n" else 1
    return [(start, end, "") for start, end in spans]


