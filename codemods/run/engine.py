"""Rewrite one file: run its format's rewriter, check the result parses, build the diff.

Runs in worker processes; libcst is imported only when a Python file or notebook needs it.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace

from ..formats.pychunks import Progress
from ..formats.spans import (
    LineIndex,
    Rewrite,
    SpanEdit,
    apply_spans,
    decode,
    drop_marked,
    file_skipped,
    marker_lines,
    one_line,
)
from .context import Settings, needles
from .report import Edit, FileReport, Finding

__all__ = ["Job", "process_file"]


@dataclass(frozen=True)
class Job:
    """One file to process, with what the driver decided for it."""

    path: str
    display: str
    kind: str
    settings: Settings
    scope: str = "edit"
    reason: str = ""


#: Above this many bytes, the diff is taken of the lines between the common head and tail
#: only (with their context), so that one edit in a long file costs a few lines of difflib.
_LONG_DIFF = 1 << 20
_CONTEXT = 3
_HUNK = re.compile(r"^@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@$")
#: The line breaks of ``str.splitlines``, which numbers difflib's lines.
_BREAKS = ("\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _common_head(a: bytes, b: bytes) -> int:
    """How many leading bytes ``a`` and ``b`` share."""
    n, i, step = min(len(a), len(b)), 0, 1 << 16
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_tail(a: bytes, b: bytes, limit: int) -> int:
    """How many trailing bytes ``a`` and ``b`` share, at most ``limit``."""
    i, step = 0, 1 << 16
    while i + step <= limit and a[len(a) - i - step:len(a) - i] == b[len(b) - i - step:len(b) - i]:
        i += step
    while i < limit and a[len(a) - i - 1] == b[len(b) - i - 1]:
        i += 1
    return i


def _trim(old: bytes, new: bytes) -> tuple[int, int, int]:
    """``(head, old_end, new_end)``: the bytes before ``head`` and from the ends on are the same
    in both and cut at line starts, leaving :data:`_CONTEXT` lines of each around the change."""
    head = _common_head(old, new)
    limit = min(len(old), len(new)) - head
    tail = _common_tail(old, new, limit)
    cut = old.rfind(b"\n", 0, head) + 1
    for _ in range(_CONTEXT):
        cut = old.rfind(b"\n", 0, max(cut - 1, 0)) + 1 if cut else 0
    end = len(old) - tail
    for _ in range(_CONTEXT + 1):
        found = old.find(b"\n", end)
        end = len(old) if found < 0 else found + 1
    return cut, end, len(new) - (len(old) - end)


def _lines(text: str) -> int:
    return sum(text.count(c) for c in _BREAKS) - text.count("\r\n")


def _diff(path: str, old: bytes, new: bytes) -> str:
    shift = 0
    if len(old) > _LONG_DIFF:
        start, old_end, new_end = _trim(old, new)
        shift = _lines(old[:start].decode("utf-8", "replace"))
        old, new = old[start:old_end], new[start:new_end]
    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    lines = []
    for line in difflib.unified_diff(a, b, f"a/{path}", f"b/{path}"):
        if shift and line.startswith("@@"):
            found = _HUNK.match(line.rstrip("\n"))
            assert found is not None
            line = (f"@@ -{int(found[1]) + shift}{found[2]} +{int(found[3]) + shift}{found[4]} @@\n")
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(lines)


def _text_rewrite(job: Job, text: str) -> Rewrite:
    from ..formats import config, markdown, notebook, python, shell

    settings, kind = job.settings, job.kind
    if kind in ("shell", "makefile"):
        return shell.rewrite_shell(text, settings)
    if kind == "dockerfile":
        return shell.rewrite_dockerfile(text, settings)
    if kind == "markdown":
        return markdown.rewrite_markdown(text, settings, python.python_hook(settings))
    if kind == "rst":
        return markdown.rewrite_rst(text, settings, python.python_hook(settings))
    if kind == "notebook":
        return notebook.rewrite_notebook(text, settings, python.python_hook(settings))
    if kind == "json":
        return config.rewrite_json(text, settings)
    if kind == "yaml":
        return config.rewrite_yaml(text, settings)
    return config.rewrite_keys(text, kind, settings)


def _records(edits: list[SpanEdit], text: str, index: LineIndex) -> list[Edit]:
    out: list[Edit] = []
    for edit in edits:
        if edit.records:
            out += [r for r in edit.records if isinstance(r, Edit)]
        else:
            out.append(Edit(index.line(edit.start), edit.rule, one_line(text[edit.start:edit.end]),
                            one_line(edit.new), edit.note))
    return out


def _text(job: Job, data: bytes, report: FileReport) -> bytes | None:
    from ..formats import config, jsonspan

    decoded = decode(data)
    text = decoded.text
    if file_skipped(text):
        return None
    try:
        if job.kind in ("json", "notebook", "yaml", "toml", "ini"):
            config.validate(job.kind, text)
        found = _text_rewrite(job, text)
    except (ValueError, jsonspan.JSONSpanError) as error:
        report.error = f"does not parse as {job.kind}: {error}"
        return None
    except Exception as error:  # yaml.YAMLError, configparser.Error, tomllib errors
        report.error = f"does not parse as {job.kind}: {error.__class__.__name__}: {error}"
        return None
    index = LineIndex(text)
    marked = marker_lines(text)
    edits = drop_marked(found.edits, index, marked)
    report.edits += _records(edits, text, index)
    report.review += _records(drop_marked(found.review, index, marked), text, index)
    report.warnings += [Finding(i.line or index.line(i.offset), i.rule, i.message, i.hint)
                        for i in found.issues if (i.line or index.line(i.offset)) not in marked]
    if not edits:
        return None
    new_text = apply_spans(text, edits)
    try:
        config.validate(job.kind, new_text)
    except Exception as error:
        report.error = f"the rewrite would not parse as {job.kind} ({error}); not written"
        return None
    return decoded.encode(new_text)


def _rewrite(job: Job, data: bytes, settings: Settings, report: FileReport,
             progress: Progress | None = None) -> bytes | None:
    if job.kind == "python":
        from ..formats.python import rewrite_python

        return rewrite_python(data, settings, report, progress)
    return _text(replace(job, settings=settings), data, report)


def process_file(job: Job, progress: Progress | None = None) -> FileReport:
    """Everything for one file; never raises for a bad file (the error is in the report).
    ``progress`` hears ``(characters parsed, total)`` while a Python file is parsed.

    A file held for review (``job.scope != "edit"``) keeps its ``--sharded_ddp`` edits as
    review findings; its fairscale imports and Transformers-legacy names, which are their own
    evidence, are still rewritten.
    """
    report = FileReport(job.display, job.kind, scope=job.scope)
    try:
        with open(job.path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        report.error = f"cannot read: {error.strerror or error}"
        return report
    if not any(n in data for n in needles(job.settings)):
        return report
    if job.scope == "edit":
        new = _rewrite(job, data, job.settings, report, progress)
    else:
        new = None
        if job.settings.fairscale_imports or job.settings.transformers_legacy:
            new = _rewrite(job, data, replace(job.settings, legacy=False), report)
        held = FileReport(job.display, job.kind)
        _rewrite(job, data, replace(job.settings, fairscale_imports=False, transformers_legacy=False), held)
        report.review += held.edits
        report.warnings += held.warnings
        report.error = report.error or held.error
        if job.reason and report.review:
            report.warnings.insert(0, Finding(0, "scope", f"not edited: {job.reason}",
                                              "rerun with --scope all to edit it"))
    if new is not None and new != data and report.error is None:
        report.new_data = new
        report.diff = _diff(job.display, data, new)
    return report
