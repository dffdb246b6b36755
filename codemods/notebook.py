"""Jupyter notebooks: code cells by the Python rules, ``!`` lines and ``%%bash`` cells by the
shell rules.  Only the JSON strings of changed source lines are replaced; outputs, metadata and
every other byte stay as they are."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from . import jsonspan
from .context import Settings
from .flags import Issue, Rewrite, rewrite_commands
from .kinds import detect_kind
from .report import Edit
from .spans import SpanEdit, apply_spans
from .text import PythonHook

__all__ = ["rewrite_notebook"]

_MAGIC_LINE = re.compile(r"^([ \t]*)([!%])(?!%)", re.M)
_SHELL_CELL = re.compile(r"^%%(?:bash|sh|zsh|script[ \t]+(?:bash|sh|zsh))\b")
_WRITEFILE = re.compile(r"^%%writefile(?:[ \t]+-a)?[ \t]+(\S+)")
_MARK = "__shardcompat_magic_{}__"


def _shell(code: str, settings: Settings, start: int, first_line: int) -> tuple[str, list[Edit], Rewrite]:
    found = rewrite_commands(code, start, len(code), to=settings.to, local_scripts=settings.local_scripts)
    records = [Edit(first_line + code.count("\n", 0, e.start), e.rule, code[e.start:e.end], e.new, e.note)
               for e in found.edits]
    found.issues = [Issue(i.offset, i.rule, i.message, i.hint, first_line + code.count("\n", 0, i.offset))
                    for i in found.issues]
    return apply_spans(code, found.edits), records, found


def _python_cell(code: str, settings: Settings, python: PythonHook, first_line: int) -> tuple[str, list[Edit], Rewrite]:
    """Mask magic lines, run the Python rules, put the (shell-rewritten) magic lines back."""
    lines = code.splitlines(keepends=True)
    magic: dict[int, str] = {}
    masked = []
    records: list[Edit] = []
    result = Rewrite()
    for number, line in enumerate(lines):
        found = _MAGIC_LINE.match(line)
        if not found:
            masked.append(line)
            continue
        body, newline = line.rstrip("\r\n"), line[len(line.rstrip("\r\n")):]
        if found.group(2) == "!":
            body, shell_records, shell = _shell(body, settings, found.end(), first_line + number)
            records += shell_records
            result.issues += shell.issues
            result.review += shell.review
        magic[number] = body + newline
        masked.append(f"{found.group(1)}pass  # {_MARK.format(number)}{newline}")
    source = "".join(masked)
    new = source
    if "sharded_ddp" in source or "fairscale" in source:
        try:
            found_py = python(source, first_line)
        except Exception as error:  # not Python after all: leave the cell, say so
            result.issues.append(Issue(0, "cell-not-parsed", f"code cell not parsed as Python "
                                       f"({error.__class__.__name__}); left as is", line=first_line))
            return code, [], result
        result.issues += found_py.issues
        result.review += found_py.review
        if found_py.edits:
            new = found_py.edits[0].new
            records += [r for e in found_py.edits for r in e.records]
    for number, restored in magic.items():
        pattern = rf"^[ \t]*pass  # {_MARK.format(number)}\r?\n?"
        new = re.sub(pattern, lambda _m, r=restored: r, new, count=1, flags=re.M)  # type: ignore[misc]
    return new, records, result


def _cell_source(cell: jsonspan.JObject) -> tuple[jsonspan.JNode, list[jsonspan.JScalar]] | None:
    source = cell.get("source")
    if isinstance(source, jsonspan.JArray) and all(
        isinstance(i, jsonspan.JScalar) and isinstance(i.value, str) for i in source.items
    ):
        return source, [i for i in source.items if isinstance(i, jsonspan.JScalar)]
    if isinstance(source, jsonspan.JScalar) and isinstance(source.value, str):
        return source, [source]
    return None


def _encode_source(text: str, node: jsonspan.JNode, items: list[jsonspan.JScalar], new: str) -> list[SpanEdit]:
    dump: Callable[[str], str] = lambda s: json.dumps(s, ensure_ascii=False)  # noqa: E731
    if isinstance(node, jsonspan.JScalar):
        return [SpanEdit(node.start, node.end, dump(new), "notebook-cell")]
    old_lines = [i.value for i in items]
    new_lines = new.splitlines(keepends=True)
    if len(new_lines) == len(old_lines):
        return [SpanEdit(i.start, i.end, dump(n), "notebook-cell")
                for i, o, n in zip(items, old_lines, new_lines) if o != n]
    assert isinstance(node, jsonspan.JArray)
    lead = text[node.start + 1:items[0].start] if items else "\n"
    between = text[items[0].end:items[1].start] if len(items) > 1 else "," + lead
    tail = text[items[-1].end:node.end - 1] if items else ""
    body = between.join(dump(n) for n in new_lines)
    return [SpanEdit(node.start, node.end, "[" + lead + body + tail + "]", "notebook-cell")]


def rewrite_notebook(text: str, settings: Settings, python: PythonHook) -> Rewrite:
    """Span edits for a notebook; raises ``JSONSpanError`` on invalid JSON."""
    root = jsonspan.parse(text)
    result = Rewrite()
    cells = root.get("cells") if isinstance(root, jsonspan.JObject) else None
    if not isinstance(cells, jsonspan.JArray):
        return result
    for cell in cells.items:
        if not isinstance(cell, jsonspan.JObject):
            continue
        kind = cell.get("cell_type")
        found = _cell_source(cell)
        if not (isinstance(kind, jsonspan.JScalar) and kind.value == "code") or found is None:
            continue
        node, items = found
        code = "".join(i.value for i in items)
        if "sharded_ddp" not in code and not (settings.fairscale_imports and "fairscale" in code):
            continue
        first_line = text.count("\n", 0, items[0].start) + 1 if items else 1
        new, records, found_rewrite = _rewrite_cell(code, settings, python, first_line)
        result.issues += [Issue(node.start, i.rule, i.message, i.hint, i.line) for i in found_rewrite.issues]
        result.review += found_rewrite.review
        if new != code:
            spans = _encode_source(text, node, items, new)
            result.edits += [SpanEdit(s.start, s.end, s.new, s.rule, s.note, tuple(records) if k == 0 else ())
                             for k, s in enumerate(spans)]
    return result


def _rewrite_cell(code: str, settings: Settings, python: PythonHook, first_line: int) -> tuple[str, list[Edit], Rewrite]:
    first = code.split("\n", 1)[0]
    body_start = min(len(first) + 1, len(code))
    writefile = _WRITEFILE.match(first)
    target = detect_kind(writefile.group(1)) if writefile else None
    if _SHELL_CELL.match(first) or target == "shell":
        return _shell(code, settings, body_start, first_line)
    if target == "python":
        new, records, found = _python_cell(code[body_start:], settings, python, first_line + 1)
        return code[:body_start] + new, records, found
    if first.startswith("%%"):
        return code, [], Rewrite()
    return _python_cell(code, settings, python, first_line)
