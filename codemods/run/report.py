"""Edit, warning and error records, and the human and JSON renderings of a run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Edit", "FileReport", "Finding", "RunReport"]


@dataclass(frozen=True)
class Edit:
    """One change: where, which rule, the text before and after, and a note for the reader."""

    line: int
    rule: str
    before: str
    after: str
    note: str = ""


@dataclass(frozen=True)
class Finding:
    """Something left as is that a human should look at (``rule`` says why)."""

    line: int
    rule: str
    message: str
    hint: str = ""


@dataclass
class FileReport:
    """What happened to one file.

    ``edits`` were applied when ``written`` is set (else they would be: without ``--write``, or
    for a file ``--write`` had to leave alone); ``review`` holds edits that were
    found but not made: the file is out of ``scope`` (``review``: no evidence of Transformers;
    ``foreign``: another framework's own flag) or the command runs a script with a local
    boolean flag; ``error`` is set when the file could not be read, parsed, or its rewrite did
    not parse again.
    """

    path: str
    kind: str
    edits: list[Edit] = field(default_factory=list)
    review: list[Edit] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    error: str | None = None
    scope: str = "edit"
    new_data: bytes | None = None
    diff: str = ""
    skipped: str | None = None  # why --write left this changed file alone, where that is no error
    #: set once ``--write`` wrote the file: ``"atomic"`` (beside it, then renamed over it), else why
    #: it was written in place (a hard-linked file, an owner this user cannot give a new file)
    written: str | None = None

    @property
    def changed(self) -> bool:
        return self.new_data is not None and self.error is None and self.skipped is None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "scope": self.scope,
            "changed": self.changed,
            "edits": [asdict(e) for e in self.edits],
            "review": [asdict(e) for e in self.review],
            "warnings": [asdict(w) for w in self.warnings],
            "error": self.error,
            "skipped": self.skipped,
            "written": self.written is not None,
            "written_in_place": None if self.written in (None, "atomic") else self.written,
        }


@dataclass
class RunReport:
    """All file reports of one run plus counts; ``exit_code`` applies the CLI contract."""

    files: list[FileReport] = field(default_factory=list)
    scanned: int = 0
    mode: str = "diff"

    @property
    def changed(self) -> list[FileReport]:
        return [f for f in self.files if f.changed]

    @property
    def errors(self) -> list[FileReport]:
        return [f for f in self.files if f.error]

    @property
    def legacy_found(self) -> bool:
        """Legacy usage found: an edit, an edit held for lack of evidence, or a warning.  What
        counter-evidence holds (another framework's own flag, a script's local boolean) is
        listed but is not legacy usage."""
        return any(
            f.edits or (f.scope == "review" and f.review)
            or (f.scope != "foreign" and any(w.rule != "review-local" for w in f.warnings))
            for f in self.files
        )

    def exit_code(self) -> int:
        """2 a file could not be read or parsed; 1 ``--check`` found legacy usage, edited or
        not; else 0."""
        if self.errors:
            return 2
        if self.mode == "check" and self.legacy_found:
            return 1
        return 0

    def to_json(self) -> str:
        import json

        return json.dumps(
            {
                "mode": self.mode,
                "scanned": self.scanned,
                "changed": len(self.changed),
                "errors": len(self.errors),
                "exit_code": self.exit_code(),
                "files": [f.to_json() for f in sorted(self.files, key=lambda f: f.path)],
            },
            indent=2,
        )

    def summary(self) -> str:
        """A short table: one row per file with anything to say, then the totals."""
        rows: list[str] = []
        for report in sorted(self.files, key=lambda f: f.path):
            rows.extend(_rows(report, self.mode))
        verb = "changed" if self.mode == "write" else "would change"
        totals = ", ".join([
            _count(self.scanned, "file") + " scanned",
            f"{len(self.changed)} {verb}",
            _count(sum(len(f.review) for f in self.files), "finding") + " for review",
            _count(sum(len(f.warnings) for f in self.files), "warning"),
            _count(len(self.errors), "error"),
        ])
        if self.mode == "diff" and self.changed:
            totals += "; nothing was written: run again with --write to apply these changes"
        return "\n".join([*rows, totals])


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _at(path: str, line: int) -> str:
    """``path:line``, or the path alone for what concerns the whole file."""
    return f"{path}:{line}" if line else path


def _rows(report: FileReport, mode: str) -> Iterable[str]:
    if report.error:
        yield f"{report.path}: error: {report.error}"
    if report.skipped:
        yield f"{report.path}: skipped: {report.skipped}"
    if report.written not in (None, "atomic"):
        yield f"{report.path}: {report.written}"
    # what was written reads as done; what was not (--check, --diff, or a file --write had to
    # leave alone) says so on every line
    if report.written is not None:
        done = ""
    elif mode == "write":
        done = "not changed: would "
    else:
        done = "would "
    for edit in report.edits:
        note = f" (not equivalent: {edit.note})" if edit.note and edit.rule == "to-fsdp" else (
            f" ({edit.note})" if edit.note else "")
        yield f"{_at(report.path, edit.line)}: {done}{edit.rule}: {edit.before!r} -> {edit.after!r}{note}"
    for edit in report.review:
        yield (
            f"{_at(report.path, edit.line)}: review: {edit.rule}: {edit.before!r} -> {edit.after!r} "
            "(not edited; --scope all applies it)"
        )
    for warning in report.warnings:
        hint = f"; hint: {warning.hint}" if warning.hint else ""
        yield f"{_at(report.path, warning.line)}: warning: {warning.rule}: {warning.message}{hint}"
