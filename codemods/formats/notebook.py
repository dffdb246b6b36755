"""Jupyter notebooks: each code cell by the rules of what it holds.

Python cells (and the Python bodies of ``%%capture``/``%%time``/``%%timeit``/``%%prun``/
``%%python``, and of ``%time``/``%timeit``/``%prun`` lines) by the Python rules; ``!`` lines,
``%run``/``%sx``/``%system`` lines and ``%%bash``/``%%sh``/``%%script bash`` cells by the shell
rules; ``%%writefile x.sh|x.py`` by the rules of that file kind.  Other magics are left as is
with an ``unknown-magic`` warning rather than guessed at, and a cell that does not parse is left
as is whole.  Only the JSON strings of changed source lines are replaced; outputs, metadata and
every other byte stay as they are."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from ..run.context import Settings, legacy_names_in, needles
from ..run.report import Edit
from . import jsonspan
from .kinds import detect_kind
from .python import NOT_PARSED, PythonHook
from .shell import commands
from .spans import Issue, Rewrite, SpanEdit, apply_spans

__all__ = ["rewrite_notebook"]

#: ``!cmd``, ``%magic args``, also assigned (``out = !cmd``): indent, assignment, sigil, name.
_MAGIC_LINE = re.compile(r"^([ \t]*)((?:[\w.]+(?:[ \t]*,[ \t]*[\w.]+)*[ \t]*=[ \t]*)?)([!%])(?!%)(\w*)[ \t]*")
#: Line magics whose arguments are a shell command line or a Python statement.
_LINE_MAGICS = {"run": "shell", "sx": "shell", "system": "shell",
                "time": "python", "timeit": "python", "prun": "python"}
_SHELL_CELL = re.compile(r"^%%(?:bash|sh|zsh|shell|sx|system|!|script[ \t]+(?:\S*/)?(?:bash|sh|zsh))(?![\w-])")
_PYTHON_CELL = re.compile(r"^%%(?:capture|time|timeit|prun|python[23]?|script[ \t]+(?:\S*/)?python[\d.]*)(?![\w-])")
_WRITEFILE = re.compile(r"^%%writefile(?:[ \t]+-a)?[ \t]+(\S+)")
_MARK = "__shardcompat_magic_{}__"
_RESTORE = re.compile(r"^([ \t]*)(.*)  # __shardcompat_magic_(\d+)__(\r?\n)?", re.M)
_UNKNOWN_HINT = "edit it by hand if it passes --sharded_ddp on"


def _shell(code: str, settings: Settings, start: int, first_line: int) -> tuple[str, list[Edit], Rewrite]:
    found = commands(code, start, len(code), settings)
    records = [Edit(first_line + code.count("\n", 0, e.start), e.rule, code[e.start:e.end], e.new, e.note)
               for e in found.edits]
    found.issues = [Issue(i.offset, i.rule, i.message, i.hint, first_line + code.count("\n", 0, i.offset))
                    for i in found.issues]
    return apply_spans(code, found.edits), records, found


def _python_cell(code: str, settings: Settings, python: PythonHook, first_line: int) -> tuple[str, list[Edit], Rewrite]:
    """Mask magic lines, run the Python rules, put the magic lines back (shell ones rewritten,
    Python statements as the Python rules left them).  A cell that does not parse stays as is."""
    lines = code.splitlines(keepends=True)
    magic: dict[int, tuple[str, str | None]] = {}  # line -> (magic prefix, restored line or None)
    masked = []
    records: list[Edit] = []
    result = Rewrite()
    for number, line in enumerate(lines):
        found = _MAGIC_LINE.match(line)
        if not found:
            masked.append(line)
            continue
        body, newline = line.rstrip("\r\n"), line[len(line.rstrip("\r\n")):]
        indent, _, sigil, name = found.groups()
        kind = "shell" if sigil == "!" else _LINE_MAGICS.get(name, "")
        mark = f"  # {_MARK.format(number)}{newline}"
        if kind == "python" and found.end() < len(body) and body[found.end()] != "-":
            magic[number] = (body[len(indent):found.end()], None)
            masked.append(indent + body[found.end():] + mark)
            continue
        if kind == "shell":
            start = found.start(3) + 1 if sigil == "!" else found.end(4)
            body, shell_records, shell = _shell(body, settings, start, first_line + number)
            records += shell_records
            result.issues += shell.issues
            result.review += shell.review
        elif "sharded_ddp" in body:
            result.issues.append(Issue(0, "unknown-magic", f"%{name} line left as is: only !, %run, "
                                       "%sx, %system and option-less %time/%timeit/%prun lines are "
                                       "rewritten", _UNKNOWN_HINT, first_line + number))
        magic[number] = ("", body + newline)
        masked.append(f"{indent}pass{mark}")
    source = "".join(masked)
    try:  # cells without a usage are not parsed: cheap, and no warning about IPython syntax there
        found_py = python(source, first_line) if (
            "sharded_ddp" in code or "fairscale" in code or legacy_names_in(code, settings)) else Rewrite()
    except Exception as error:  # not Python after all: leave the cell, say so
        result.issues.append(Issue(0, "cell-not-parsed", f"code cell not parsed as Python "
                                   f"({error.__class__.__name__}); left as is", line=first_line))
        return code, [], result
    if any(i.rule == NOT_PARSED for i in found_py.issues):
        return code, [], Rewrite(issues=found_py.issues)
    result.issues += found_py.issues
    result.review += found_py.review
    new = found_py.edits[0].new if found_py.edits else source
    records += [r for e in found_py.edits for r in e.records]

    def restore(match: re.Match[str]) -> str:
        prefix, line = magic.pop(int(match.group(3)), ("", None))
        if line is not None:
            return line
        return match.group(1) + prefix + match.group(2) + (match.group(4) or "")

    new = _RESTORE.sub(restore, new)
    if magic:  # a marker did not survive the Python rules: change nothing rather than guess
        result.issues.append(Issue(0, "cell-not-parsed", "magic lines could not be put back; left as is",
                                   line=first_line))
        return code, [], result
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
        if not any(n.decode() in code for n in needles(settings)):
            continue
        first_line = text.count("\n", 0, items[0].start) + 1 if items else 1
        new, records, found_rewrite = _rewrite_cell(code, settings, python, first_line)
        result.issues += [Issue(node.start, i.rule, i.message, i.hint, i.line) for i in found_rewrite.issues]
        result.review += found_rewrite.review
        if new != code:
            spans = _encode_source(text, node, items, new)
            # Each source line's span carries the records of its line (the first, any others), so
            # that a cell with several changed lines reports each edit once.
            lines = [text.count("\n", 0, s.start) + 1 for s in spans]
            placed = [tuple(r for r in records if r.line == line) for line in lines]
            placed[0] += tuple(r for r in records if r.line not in lines)
            result.edits += [SpanEdit(s.start, s.end, s.new, s.rule, s.note, p) for s, p in zip(spans, placed)]
    return result


def _rewrite_cell(code: str, settings: Settings, python: PythonHook, first_line: int) -> tuple[str, list[Edit], Rewrite]:
    """Dispatch on the cell magic in the first line; Python bodies may hold magics again."""
    first = code.split("\n", 1)[0]
    body_start = min(len(first) + 1, len(code))
    writefile = _WRITEFILE.match(first)
    target = detect_kind(writefile.group(1)) if writefile else None
    if _SHELL_CELL.match(first) or target == "shell":
        return _shell(code, settings, body_start, first_line)
    if target == "python":
        new, records, found = _python_cell(code[body_start:], settings, python, first_line + 1)
        return code[:body_start] + new, records, found
    if _PYTHON_CELL.match(first):
        new, records, found = _rewrite_cell(code[body_start:], settings, python, first_line + 1)
        return code[:body_start] + new, records, found
    if first.startswith("%%"):
        what = " ".join(first.split()[:2 if writefile or first.startswith("%%script") else 1])
        return code, [], Rewrite(issues=[Issue(0, "unknown-magic", f"{what} cell left as is: its body "
                                               "is neither shell nor Python", _UNKNOWN_HINT, first_line)])
    return _python_cell(code, settings, python, first_line)
