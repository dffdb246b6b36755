"""Rewriters for text files that hold command lines: shell scripts, Makefiles, Dockerfiles,
YAML CI steps, Markdown and reStructuredText.

Each takes the decoded text and returns a :class:`~codemods.flags.Rewrite` of span edits;
nothing is re-serialised.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from . import jsonspan
from .context import Settings
from .flags import FLAG, FSDP_FLAG, Issue, Rewrite, plan_argv, rewrite_commands
from .spans import SpanEdit

__all__ = [
    "PythonHook",
    "argv_rewrite",
    "rewrite_dockerfile",
    "rewrite_markdown",
    "rewrite_rst",
    "rewrite_shell",
    "rewrite_yaml_steps",
]

#: Rewrites a Python snippet: ``(code, first_line) -> Rewrite`` (one span edit for the snippet).
PythonHook = Callable[[str, int], Rewrite]

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


def argv_rewrite(text: str, array: jsonspan.JArray, to: str = "list") -> Rewrite:
    """Apply :func:`~codemods.flags.plan_argv` to a JSON-style array inside ``text``."""
    import json

    items = array.items
    values: list[str | None] = [
        i.value if isinstance(i, jsonspan.JScalar) and isinstance(i.value, str) else None for i in items
    ]
    result = Rewrite()
    for step in plan_argv(values, "fsdp" if to == "fsdp" else "list"):
        if step.problem:
            result.issues.append(Issue(items[step.index].start, step.rule, step.problem))
            continue
        for index, new in step.set.items():
            node = items[index]
            result.edits.append(SpanEdit(node.start, node.end, json.dumps(new), step.rule, step.note))
        if step.insert_after is not None:
            node = items[step.insert_after[0]]
            result.edits.append(SpanEdit(node.end, node.end, ", " + json.dumps(step.insert_after[1]),
                                         step.rule, step.note))
        if step.drop:
            first, last = step.drop[0], step.drop[-1]
            if last + 1 < len(items):
                start, end = items[first].start, items[last + 1].start
            elif first > 0:
                start, end = items[first - 1].end, items[last].end
            else:
                start, end = items[first].start, items[last].end
            result.edits.append(SpanEdit(start, end, "", step.rule))
    return result


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


def rewrite_yaml_steps(text: str, settings: Settings) -> Rewrite:
    """CI ``run:``/``script:`` steps (inline, block scalars, lists of lines) and
    ``command:``/``args:`` flow lists, by the shell and argv rules."""
    result = Rewrite()
    for match in _STEP_KEY.finditer(text):
        value, v0 = match.group("value"), match.start("value")
        indent = len(match.group("indent"))
        if value.startswith("["):
            array = _array_at(text, v0)
            if array is not None:
                result.extend(argv_rewrite(text, array, settings.to))
        elif value and not _BLOCK_SCALAR.match(value):
            result.extend(_commands(text, v0, match.end("value"), settings))
        else:
            end = _block_end(text, match.end(), indent)
            if FLAG in text[match.end():end]:
                result.extend(_commands(text, match.end(), end, settings))
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
