"""Rewrite one file: run its format's rewriter, check the result parses, build the diff.

Runs in worker processes; libcst is imported only when a Python file or notebook needs it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

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


def _diff(path: str, old: bytes, new: bytes) -> str:
    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    lines = []
    for line in difflib.unified_diff(a, b, f"a/{path}", f"b/{path}"):
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


def _rewrite(job: Job, data: bytes, settings: Settings, report: FileReport) -> bytes | None:
    if job.kind == "python":
        from ..formats.python import rewrite_python

        return rewrite_python(data, settings, report)
    return _text(replace(job, settings=settings), data, report)


def process_file(job: Job) -> FileReport:
    """Everything for one file; never raises for a bad file (the error is in the report).

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
        new = _rewrite(job, data, job.settings, report)
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
