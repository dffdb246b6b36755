"""Text spans: edits by offset, line numbers, skip markers, and byte-faithful decoding.

Every non-Python rewriter works on the decoded original text and returns span edits; the
bytes outside the spans are never touched (no re-serialisation), so encoding, BOM, CRLF and
a missing final newline survive.
"""

from __future__ import annotations

import bisect
import codecs
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SKIP_MARKER",
    "Decoded",
    "Issue",
    "LineIndex",
    "Rewrite",
    "SpanEdit",
    "apply_spans",
    "block_end",
    "decode",
    "drop_marked",
    "file_skipped",
    "gaps",
    "marker_lines",
    "one_line",
]

#: Put this in a comment (any syntax) on a line, or in the first lines of a file, to opt out.
SKIP_MARKER = "shardcompat: skip"
_TOP_LINES = 5
_MARKER = re.compile(r"shardcompat:\s*skip")


@dataclass(frozen=True)
class SpanEdit:
    """Replace ``text[start:end]`` with ``new``; ``rule`` and ``note`` go to the report."""

    start: int
    end: int
    new: str
    rule: str
    note: str = ""
    #: Ready-made report records (Python blocks report their own edits, by line).
    records: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Issue:
    """A spot left as is, with the reason."""

    offset: int
    rule: str
    message: str
    hint: str = ""
    #: Set when the issue comes with its own line number (Python blocks inside other files).
    line: int = 0


@dataclass
class Rewrite:
    """Span edits to apply, edits held back for review, and issues."""

    edits: list[SpanEdit] = field(default_factory=list)
    review: list[SpanEdit] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)

    def extend(self, other: Rewrite) -> None:
        self.edits += other.edits
        self.review += other.review
        self.issues += other.issues


def apply_spans(text: str, edits: Iterable[SpanEdit]) -> str:
    """Apply non-overlapping edits (overlapping later ones are dropped, never merged).  A deletion
    that overlaps the previous edit only in the blank joining them (two dropped flags in a row,
    each taking that blank) keeps the rest of its span."""
    out: list[str] = []
    pos = 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        start = edit.start
        if start < pos and not edit.new and edit.end > pos and not text[start:pos].strip():
            start = pos
        if start < pos:
            continue
        out.append(text[pos:start])
        out.append(edit.new)
        pos = edit.end
    out.append(text[pos:])
    return "".join(out)


def gaps(text: str, taken: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The spans of ``text`` between the (non-overlapping) ``taken`` ones."""
    pos = 0
    for a, b in sorted(taken):
        yield pos, a
        pos = b
    yield pos, len(text)


def block_end(text: str, start: int, indent: int) -> int:
    """End of the lines after ``start`` that are blank or indented deeper than ``indent``
    (a YAML block scalar, an RST directive body)."""
    pos = start
    while pos < len(text):
        newline = text.find("\n", pos)
        line_end = len(text) if newline < 0 else newline + 1
        line = text[pos:line_end]
        if line.strip() and len(line) - len(line.lstrip(" \t")) <= indent:
            break
        pos = line_end
    return pos


def one_line(code: str) -> str:
    """Source as a report quotes it: on one line, without the line breaks and indentation."""
    code = re.sub(r"([(\[{])[ \t]*\r?\n\s*", r"\1", code.strip())
    code = re.sub(r",?[ \t]*\r?\n\s*([)\]}])", r"\1", code)
    return re.sub(r"[ \t]*\r?\n\s*", " ", code)


class LineIndex:
    """Offset to 1-based line number, by bisecting the line starts."""

    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in re.finditer(r"\n", text)]

    def line(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)

    def line_span(self, offset: int, text: str) -> tuple[int, int]:
        """Start and end (before the newline) of the line holding ``offset``."""
        number = self.line(offset)
        start = self.starts[number - 1]
        end = self.starts[number] - 1 if number < len(self.starts) else len(text)
        return start, end


def marker_lines(text: str) -> frozenset[int]:
    """1-based numbers of the lines that carry the skip marker."""
    if "shardcompat" not in text:
        return frozenset()
    return frozenset(
        number for number, line in enumerate(text.splitlines(), 1) if _MARKER.search(line)
    )


_COMMENT_ONLY = re.compile(r"^\s*(#|//|<!--|\.\.|;|--|%|rem\b|/\*|\"\"\"|\"|')", re.I)


def file_skipped(text: str, marked: frozenset[int] | None = None) -> bool:
    """True when a comment line near the top of the file (first five lines) holds the marker."""
    marked = marker_lines(text) if marked is None else marked
    if not marked or min(marked) > _TOP_LINES:
        return False
    lines = text.splitlines()[:_TOP_LINES]
    return any(_COMMENT_ONLY.match(lines[n - 1]) for n in marked if n <= len(lines))


def drop_marked(edits: Sequence[SpanEdit], index: LineIndex, marked: frozenset[int]) -> list[SpanEdit]:
    """The edits that touch no marked line."""
    if not marked:
        return list(edits)
    return [
        e for e in edits
        if not any(n in marked for n in range(index.line(e.start), index.line(max(e.start, e.end - 1)) + 1))
    ]


@dataclass(frozen=True)
class Decoded:
    """Text plus how to turn it back into the same bytes."""

    text: str
    encoding: str
    bom: bytes

    def encode(self, text: str) -> bytes:
        return self.bom + text.encode(self.encoding)


def decode(data: bytes) -> Decoded:
    """Decode without newline translation; latin-1 is the lossless fallback for other 8-bit text."""
    if data.startswith(codecs.BOM_UTF8):
        return Decoded(data[3:].decode("utf-8"), "utf-8", codecs.BOM_UTF8)
    try:
        return Decoded(data.decode("utf-8"), "utf-8", b"")
    except UnicodeDecodeError:
        return Decoded(data.decode("latin-1"), "latin-1", b"")
