"""Rewriters for text files that hold command lines: shell scripts, Makefiles, Dockerfiles,
YAML CI steps and argv lists, Markdown and reStructuredText.

Each takes the decoded text and returns a :class:`~codemods.flags.Rewrite` of span edits;
nothing is re-serialised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from . import jsonspan
from .context import Settings
from .flags import FLAG, FSDP_FLAG, HINTS, Issue, Rewrite, plan_argv, rewrite_commands
from .spans import SpanEdit

__all__ = [
    "NOT_PARSED",
    "ArgvItem",
    "PythonHook",
    "argv_edits",
    "argv_rewrite",
    "rewrite_dockerfile",
    "rewrite_markdown",
    "rewrite_rst",
    "rewrite_shell",
    "rewrite_yaml_argv",
    "rewrite_yaml_steps",
]

#: Rewrites a Python snippet: ``(code, first_line) -> Rewrite`` (one span edit for the snippet).
#: A snippet that does not parse gives no edit and one issue with rule :data:`NOT_PARSED`.
PythonHook = Callable[[str, int], Rewrite]
NOT_PARSED = "not-parsed"

KEY = "sharded_ddp"
_SHELL_LANGS = frozenset({"", "bash", "sh", "shell", "console", "zsh", "shell-session",
                          "sh-session", "terminal", "shellsession", "ksh", "bat", "cmd", "none"})
_PYTHON_LANGS = frozenset({"python", "py", "python3", "ipython", "ipython3"})


def _commands(text: str, start: int, end: int, settings: Settings, prose_guard: bool = False) -> Rewrite:
    return rewrite_commands(text, start, end, to=settings.to, local_scripts=settings.local_scripts,
                            prose_guard=prose_guard)


def rewrite_shell(text: str, settings: Settings) -> Rewrite:
    """Shell scripts and Makefiles: every command line in the file."""
    return _commands(text, 0, len(text), settings)


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


def argv_rewrite(text: str, array: jsonspan.JArray, to: str = "list") -> Rewrite:
    """Apply :func:`~codemods.flags.plan_argv` to a JSON-style array inside ``text``."""
    return argv_edits(text, [
        ArgvItem(i.start, i.end, i.value if isinstance(i, jsonspan.JScalar) and isinstance(i.value, str) else None)
        for i in array.items
    ], to)


def argv_edits(text: str, items: list[ArgvItem], to: str = "list") -> Rewrite:
    """Span edits for the :func:`~codemods.flags.plan_argv` steps of one argv list."""
    result = Rewrite()
    dropped: dict[int, str] = {}  # element -> rule
    for step in plan_argv([i.value for i in items], "fsdp" if to == "fsdp" else "list"):
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


def _inserted(text: str, item: ArgvItem, value: str) -> tuple[int, str]:
    """Where and what to insert for a new element after ``item``: ``, value`` or a new line."""
    new = _scalar(value, item.quote)
    if item.line is None:
        return item.end, ", " + new
    end = item.line[1]
    newline = _newline(text, end)
    if text[end - 1] == "\n":
        return end, item.prefix + new + newline
    return end, newline + item.prefix + new  # the last line, without a final newline


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


_EXEC_FORM = re.compile(r"^[ \t]*(?:RUN|CMD|ENTRYPOINT)[ \t]+(?=\[)", re.M | re.I)


def _array_at(text: str, start: int) -> jsonspan.JArray | None:
    """A JSON-style array starting at ``start`` (exec-form instructions, YAML flow lists)."""
    try:
        node, _ = jsonspan.parse_at(text, start)
    except jsonspan.JSONSpanError:
        return None
    return node if isinstance(node, jsonspan.JArray) else None


def _gaps(text: str, taken: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    pos = 0
    for a, b in sorted(taken):
        yield pos, a
        pos = b
    yield pos, len(text)


def rewrite_dockerfile(text: str, settings: Settings) -> Rewrite:
    """Shell-form instructions by the shell rules, exec-form ``["..."]`` by the argv rules."""
    result = Rewrite()
    taken: list[tuple[int, int]] = []
    for match in _EXEC_FORM.finditer(text):
        array = _array_at(text, match.end())
        if array is not None and FLAG in text[array.start:array.end]:
            result.extend(argv_rewrite(text, array, settings.to))
            taken.append((array.start, array.end))
    for a, b in _gaps(text, taken):
        result.extend(_commands(text, a, b, settings))
    return result


# --------------------------------------------------------------------------- YAML steps

_STEP_KEY = re.compile(
    r"^(?P<indent>[ \t]*)(?:-[ \t]+)?(?P<key>run|script|before_script|after_script|command|cmd|"
    r"entrypoint|args)[ \t]*:[ \t]*(?P<value>[^\n]*?)[ \t]*(?:\r?\n|\Z)",
    re.M,
)
_BLOCK_SCALAR = re.compile(r"^[|>][+-]?\d*[ \t]*(#.*)?$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _block_end(text: str, start: int, indent: int) -> int:
    """End of the lines after ``start`` that are blank or indented deeper than ``indent``."""
    pos = start
    while pos < len(text):
        newline = text.find("\n", pos)
        line_end = len(text) if newline < 0 else newline + 1
        line = text[pos:line_end]
        if line.strip() and _indent(line) <= indent:
            break
        pos = line_end
    return pos


_DASH = re.compile(r" *-[ \t]+")
_LINE_REST = re.compile(r"[ \t]*(?:#.*)?\r?\n?")


def _yaml_item(text: str, node: Any, floor: int, block: bool) -> ArgvItem:
    """An element of a YAML sequence.  A scalar is editable in place only when it is a one-line
    plain or quoted scalar written right there (not an alias, anchor, tag or block scalar) and,
    in a block sequence, alone on its ``- `` line, so that lines can be added and removed."""
    import yaml

    start, end = node.start_mark.index, node.end_mark.index
    if not isinstance(node, yaml.ScalarNode) or not node.value or start < floor:
        return ArgvItem(start, end, None)  # start < floor: an alias to a node written earlier
    fixed = ArgvItem(start, end, node.value, fixed=True)
    raw = text[start:end]
    if "\n" in raw:
        return fixed
    if node.style is None and raw == node.value:
        quote = ""
    elif node.style in ("'", '"') and len(raw) > 1 and raw[0] == raw[-1] == node.style:
        quote = node.style
    else:
        return fixed
    if not block:
        return ArgvItem(start, end, node.value, quote)
    line_start = text.rfind("\n", 0, start) + 1
    newline = text.find("\n", end)
    line_end = len(text) if newline < 0 else newline + 1
    prefix = text[line_start:start]
    if not (_DASH.fullmatch(prefix) and _LINE_REST.fullmatch(text, end, line_end)):
        return fixed
    return ArgvItem(start, end, node.value, quote, (line_start, line_end), prefix)


def _is_flag(value: str | None) -> bool:
    return value is not None and (value == FLAG or value.startswith(FLAG + "="))


def rewrite_yaml_argv(text: str, settings: Settings) -> tuple[Rewrite, list[tuple[int, int]]]:
    """Every YAML sequence with a ``--sharded_ddp`` element is an argv list (Kubernetes
    ``command:``/``args:``, Argo, Kubeflow, compose): block (``- --sharded_ddp``) or flow
    (``[--sharded_ddp]``), by the argv rules.  Returns the edits and the flag elements' spans,
    which the shell rules must not see (``- --sharded_ddp`` is not a command line)."""
    import yaml

    result = Rewrite()
    taken: list[tuple[int, int]] = []
    stack: list[Any] = [doc for doc in yaml.compose_all(text) if doc is not None]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += reversed([part for pair in node.value for part in pair])  # document order
        elif isinstance(node, yaml.SequenceNode):
            stack += reversed(node.value)
            block = node.flow_style is not True
            items: list[ArgvItem] = []
            floor = node.start_mark.index
            for child in node.value:
                items.append(_yaml_item(text, child, floor, block))
                floor = max(floor, items[-1].end)
            if any(_is_flag(i.value) for i in items):
                result.extend(argv_edits(text, items, settings.to))
                taken += [(i.start, i.end) for i in items if _is_flag(i.value)]
    return result, taken


def rewrite_yaml_steps(text: str, settings: Settings) -> Rewrite:
    """Argv lists (:func:`rewrite_yaml_argv`), then CI ``run:``/``script:`` steps (inline, block
    scalars, lists of lines) and ``sh -c`` scripts by the shell rules, around the argv flags."""
    result, taken = rewrite_yaml_argv(text, settings)
    for match in _STEP_KEY.finditer(text):
        value, v0 = match.group("value"), match.start("value")
        indent = len(match.group("indent"))
        if value.startswith("["):
            continue  # a flow list: an argv list above, or none
        if value and not _BLOCK_SCALAR.match(value):
            result.extend(_commands(text, v0, match.end("value"), settings))
            continue
        end = _block_end(text, match.end(), indent)
        for a, b in _gaps(text, taken):
            a, b = max(a, match.end()), min(b, end)
            if a < b and FLAG in text[a:b]:
                result.extend(_commands(text, a, b, settings))
    return result


# --------------------------------------------------------------------------- Markdown and RST

_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*([^\s`{]*)[^\n]*\n", re.M)


def _code_block(text: str, start: int, end: int, lang: str, settings: Settings,
                python: PythonHook | None, first_line: int) -> Rewrite:
    lang = lang.lower().strip("{}.")
    if lang in _SHELL_LANGS:
        return _commands(text, start, end, settings)
    if lang in _PYTHON_LANGS and python is not None:
        found = python(text[start:end], first_line)
        found.edits = [SpanEdit(start + e.start, start + e.end, e.new, e.rule, e.note, e.records)
                       for e in found.edits]
        return found
    return Rewrite()


def _inline_code(text: str, start: int, end: int, pattern: re.Pattern[str], settings: Settings) -> Rewrite:
    result = Rewrite()
    for match in pattern.finditer(text, start, end):
        a, b = match.span("code")
        if FLAG in text[a:b] and text[a:b].strip() not in (FLAG, FSDP_FLAG):
            result.extend(_commands(text, a, b, settings, prose_guard=True))
    return result


_MD_INLINE = re.compile(r"(?<!`)(?P<ticks>`+)(?!`)(?P<code>.+?)(?<!`)(?P=ticks)(?!`)")
_RST_INLINE = re.compile(r"``(?P<code>[^`]+?)``")


def _line_no(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def rewrite_markdown(text: str, settings: Settings, python: PythonHook | None = None) -> Rewrite:
    """Fenced code blocks (shell and Python) and inline code; prose is never edited."""
    result = Rewrite()
    pos = 0
    prose: list[tuple[int, int]] = []
    while True:
        match = _FENCE.search(text, pos)
        if not match:
            break
        fence = match.group(2)
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M).search(text, match.end())
        end = close.start() if close else len(text)
        prose.append((pos, match.start()))
        if KEY in text[match.end():end]:
            result.extend(_code_block(text, match.end(), end, match.group(3), settings, python,
                                      _line_no(text, match.end())))
        pos = close.end() if close else len(text)
    prose.append((pos, len(text)))
    for a, b in prose:
        result.extend(_inline_code(text, a, b, _MD_INLINE, settings))
    return result


_RST_DIRECTIVE = re.compile(r"^([ \t]*)\.\. (?:code-block|code|sourcecode)::[ \t]*(\S*)[^\n]*\n", re.M)
_RST_LITERAL = re.compile(r"^([ \t]*)(?!\.\.)[^\n]*::[ \t]*\n", re.M)


def rewrite_rst(text: str, settings: Settings, python: PythonHook | None = None) -> Rewrite:
    """``code-block`` directives, ``::`` literal blocks and ``inline literals``."""
    result = Rewrite()
    blocks: list[tuple[int, int, str]] = []
    for match in _RST_DIRECTIVE.finditer(text):
        end = _block_end(text, match.end(), len(match.group(1)))
        blocks.append((match.end(), end, match.group(2)))
    for match in _RST_LITERAL.finditer(text):
        if any(a <= match.start() < b or a - 1 <= match.end() <= a for a, b, _ in blocks):
            continue
        end = _block_end(text, match.end(), len(match.group(1)))
        blocks.append((match.end(), end, ""))
    blocks.sort()
    for a, b, lang in blocks:
        if KEY in text[a:b]:
            result.extend(_code_block(text, a, b, lang, settings, python, _line_no(text, a)))
    for a, b in _gaps(text, [(a, b) for a, b, _ in blocks]):
        result.extend(_inline_code(text, a, b, _RST_INLINE, settings))
    return result
