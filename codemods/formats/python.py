"""Python files and Python snippets (notebook cells, Markdown blocks) by the libcst rules.

The fast path: ``ast.parse`` the file (C, a few milliseconds; a long file in top-level pieces by
:mod:`codemods.formats.pychunks`, keeping only the trees that mention a needle), let :mod:`codemods.formats.pyscan` find
the statements a rule can act on, parse only those with libcst, run the rules of
:mod:`codemods.rules` on them and splice their new text back by offset.  Line numbers come
from the offsets; positions are resolved only for what a rule reports on a unit of several
lines.  A file whose mentions are all comments, docstrings or messages never loads libcst.
Anything the fast path cannot place exactly (a file the running Python cannot parse, a unit
whose rewrite does not round-trip) goes through the rules on the whole module instead.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..rules import python_rules
from ..run.context import Settings
from ..run.report import Edit, FileReport, Finding
from .pychunks import Piece, Progress, check, module_of, parse_pieces
from .spans import Issue, Rewrite, SpanEdit, apply_spans, file_skipped

if TYPE_CHECKING:
    from ..rules.base import Records
    from .pyscan import Facts, Unit

__all__ = ["NOT_PARSED", "NotPython", "PythonHook", "PythonResult", "migrate_module", "migrate_source", "python_hook", "rewrite_python"]

#: Rewrites a Python snippet: ``(code, first_line) -> Rewrite`` (one span edit for the snippet).
#: A snippet that does not parse gives no edit and one issue with rule :data:`NOT_PARSED`.
PythonHook = Callable[[str, int], Rewrite]
NOT_PARSED = "not-parsed"


class NotPython(ValueError):
    """The source parses neither with ``ast`` nor with libcst."""


@dataclass
class PythonResult:
    """The rewritten source (same type as given), its edits and warnings; ``whole`` is set when
    the commands ran on the whole module rather than on units."""

    code: bytes | str
    edits: list[Edit] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    whole: bool = False
    #: the fast path parsed the rewritten pieces: the new code is known to parse
    parses: bool = False

    def __post_init__(self) -> None:  # in file order, whichever path found them
        self.edits.sort(key=lambda e: e.line)
        self.warnings.sort(key=lambda w: w.line)


class _Fallback(Exception):
    """A unit the fast path cannot place exactly: run on the whole module instead."""


def _decode(source: bytes) -> tuple[str, str]:
    """The text and its encoding (the coding cookie or BOM, else UTF-8)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    return source.decode(encoding), encoding


def migrate_module(source: bytes | str, settings: Settings) -> PythonResult:
    """The rules on the whole module: the path for what ``ast`` cannot read here (libcst's
    grammar reads newer Python too), and the reference the fast path is tested against."""
    import libcst

    from ..rules.base import Records, prepare, run

    try:
        module = libcst.parse_module(source)
    except libcst.ParserSyntaxError as error:
        raise NotPython(str(error).splitlines()[0]) from error
    records = Records(settings)
    prepare(records, source.decode(module.encoding, "replace") if isinstance(source, bytes) else source)
    module = run(module, records, python_rules(settings))
    code: bytes | str = module.bytes if isinstance(source, bytes) else module.code
    return PythonResult(code, records.edits, records.warnings, whole=True)


def migrate_source(source: bytes | str, settings: Settings, progress: Progress | None = None) -> PythonResult:
    """Every Python rule on ``source``; raises :class:`NotPython` when it does not parse.
    ``progress`` hears how far the parse of a long file is."""
    try:
        text, encoding = _decode(source) if isinstance(source, bytes) else (source, "")
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        raise NotPython(str(error)) from error
    if file_skipped(text):
        return PythonResult(source)
    # the whole file is parsed, in pieces; only the pieces a rule may act on keep their tree
    # (the fairscale bindings need every use of a bound name: then every piece is kept)
    keep_all = settings.fairscale_imports and "fairscale" in text
    words = (["sharded_ddp"] if settings.legacy else []) + (["fairscale"] if settings.fairscale_imports else [])
    try:
        kept = parse_pieces(text, (lambda _: True) if keep_all else (lambda piece: any(w in piece for w in words)),
                            progress=progress)
    except (SyntaxError, ValueError):  # newer syntax than this Python's, or not Python at all
        return migrate_module(source, settings)
    tree = module_of(kept)
    if settings.transformers_legacy:
        from ..rules.transformers_legacy.python import needs_module

        if needs_module(text):  # that rule needs every use of an imported name: the whole module
            return migrate_module(source, settings)
    from .pyscan import scan

    units, facts, _ = scan(text, tree, legacy=settings.legacy, fairscale=settings.fairscale_imports)
    if not units and not facts.aliases:
        return PythonResult(source)
    try:
        edits, records = _units(text, units, facts, settings)
    except _Fallback:
        return migrate_module(source, settings)
    new = apply_spans(text, edits)
    result = PythonResult(source, records.edits, records.warnings)
    if new != text:
        result.code = new.encode(encoding) if isinstance(source, bytes) else new
        result.parses = _pieces_parse(text, [piece for piece, _ in kept], edits)
    return result


def _pieces_parse(text: str, pieces: list[Piece], edits: list[SpanEdit]) -> bool:
    """Whether every piece an edit changed still parses: the other pieces parsed as they are,
    and pieces that parse alone parse together (see :mod:`codemods.formats.pychunks`)."""
    edits = sorted(edits, key=lambda e: e.start)
    at = 0
    for piece in pieces:
        inside = []
        while at < len(edits) and edits[at].start < piece.end:
            edit = edits[at]
            inside.append(replace(edit, start=edit.start - piece.start, end=edit.end - piece.start))
            at += 1
        if not inside:
            continue
        try:
            ast.parse(apply_spans(text[piece.start:piece.end], inside))
        except (SyntaxError, ValueError):
            return False  # the whole file is checked again, for the error as it gives it
    return True


def _units(text: str, units: list[Unit], facts: Facts, settings: Settings) -> tuple[list[SpanEdit], Records]:
    from ..rules.base import Records, prepare, run

    records = Records(settings)
    prepare(records, text, facts)
    if not units:
        return [], records
    import libcst as cst

    rules = python_rules(settings)
    newline = "\r\n" if "\r\n" in text else "\n"
    edits = []
    for unit in units:
        snippet = text[unit.start:unit.end]
        head, tail = ("", newline) if unit.kind == "stmt" else ("(", ")" + newline)
        wrapped = head + snippet + tail
        try:
            module = cst.parse_module(wrapped)
        except cst.ParserSyntaxError as error:
            raise _Fallback from error
        records.line_offset = unit.line - 1
        code = run(module, records, rules).code
        if code == wrapped:
            continue
        if not (code.startswith(head) and code.endswith(tail)):
            raise _Fallback
        edits.append(SpanEdit(unit.start, unit.end, code[len(head):len(code) - len(tail)], "python"))
    return edits, records


def rewrite_python(data: bytes, settings: Settings, report: FileReport,
                   progress: Progress | None = None) -> bytes | None:
    """The new bytes of a Python file (``None``: unchanged or an error, set on ``report``)."""
    try:
        result = migrate_source(data, settings, progress)
    except NotPython as error:
        report.error = f"does not parse as Python: {error}"
        return None
    report.edits += result.edits
    report.warnings += result.warnings
    new = result.code
    assert isinstance(new, bytes)
    if new == data:
        return None
    problem = "" if result.parses else _unparsable(new, result.whole)
    if problem:
        report.error = f"the rewrite would not parse ({problem}); not written"
        return None
    return new


def _unparsable(code: bytes | str, whole: bool) -> str:
    """Why the rewrite does not parse, or ""."""
    if whole:  # the source needed libcst's grammar: check with it
        import libcst

        try:
            libcst.parse_module(code)
        except libcst.ParserSyntaxError as error:
            return str(error).splitlines()[0]
        return ""
    try:
        check(_decode(code)[0] if isinstance(code, bytes) else code)
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError) as error:
        return str(error)
    return ""


def python_hook(settings: Settings) -> PythonHook:
    """The Python rules for snippets inside other files (notebook cells, Markdown blocks)."""

    def hook(code: str, first_line: int) -> Rewrite:
        try:
            outcome = migrate_source(code, settings)
        except NotPython as error:
            return Rewrite(issues=[Issue(0, NOT_PARSED, f"Python snippet does not parse ({error}); left as is",
                                         line=first_line)])
        shift = first_line - 1
        result = Rewrite(issues=[Issue(0, w.rule, w.message, w.hint, w.line + shift) for w in outcome.warnings])
        if outcome.code != code:
            records = tuple(replace(e, line=e.line + shift) for e in outcome.edits)
            result.edits.append(SpanEdit(0, len(code), str(outcome.code), "python", records=records))
        return result

    return hook
