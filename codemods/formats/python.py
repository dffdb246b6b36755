"""Python files and Python snippets (notebook cells, Markdown blocks) by the libcst rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..context import Settings
from ..flags import Issue, Rewrite
from ..report import FileReport
from ..spans import SpanEdit

__all__ = ["NOT_PARSED", "PythonHook", "python_hook", "rewrite_python"]

#: Rewrites a Python snippet: ``(code, first_line) -> Rewrite`` (one span edit for the snippet).
#: A snippet that does not parse gives no edit and one issue with rule :data:`NOT_PARSED`.
PythonHook = Callable[[str, int], Rewrite]
NOT_PARSED = "not-parsed"


def _commands(settings: Settings) -> list[type]:
    from ..fairscale_imports import FairscaleImportsCommand
    from ..python_legacy import MigrateShardedDDP

    return ([MigrateShardedDDP] if settings.legacy else []) + (
        [FairscaleImportsCommand] if settings.fairscale_imports else [])


def python_hook(settings: Settings) -> PythonHook:
    """The Python rules for snippets inside other files (notebook cells, Markdown blocks)."""

    def hook(code: str, first_line: int) -> Rewrite:
        import libcst

        from ..python_legacy import migrate_python

        try:
            outcome = migrate_python(code, settings, _commands(settings))
        except libcst.ParserSyntaxError as error:
            return Rewrite(issues=[Issue(0, NOT_PARSED, f"Python snippet does not parse "
                                         f"({str(error).splitlines()[0]}); left as is", line=first_line)])
        shift = first_line - 1
        result = Rewrite(issues=[Issue(0, w.rule, w.message, w.hint, w.line + shift) for w in outcome.warnings])
        if outcome.code != code:
            records = tuple(replace(e, line=e.line + shift) for e in outcome.edits)
            result.edits.append(SpanEdit(0, len(code), str(outcome.code), "python", records=records))
        return result

    return hook


def rewrite_python(data: bytes, settings: Settings, report: FileReport) -> bytes | None:
    """The new bytes of a Python file (``None``: unchanged or an error, set on ``report``)."""
    import libcst

    from ..python_legacy import migrate_python

    try:
        outcome = migrate_python(data, settings, _commands(settings))
    except libcst.ParserSyntaxError as error:
        report.error = f"does not parse as Python: {str(error).splitlines()[0]}"
        return None
    report.edits += outcome.edits
    report.warnings += outcome.warnings
    new = outcome.code
    assert isinstance(new, bytes)
    if new != data:
        try:
            libcst.parse_module(new)
        except libcst.ParserSyntaxError as error:
            report.error = f"the rewrite would not parse ({error}); not written"
            return None
        return new
    return None
