"""Parse a Python file in top-level pieces, so that a big file costs linear time and bounded memory.

``ast.parse`` of a whole 16 MB module builds a tree of about 3 GB and takes most of a minute;
the rules only look at the few statements that mention a needle.  :func:`parse_pieces` cuts the
text at lines that start at column 0 and may begin a statement, parses each piece of about
:data:`PIECE` characters on its own, and keeps the trees of the pieces the caller wants.  A cut
is exact when the piece before it parses: a piece that ends inside a string, brackets, a
continued line, a decorator or a compound statement's header does not parse, and the lines
that continue a compound statement at column 0 (``else``, ``elif``, ``except``, ``finally``)
are never cuts; a piece that does not parse grows (doubling) until it does.  So the pieces
parse exactly when the whole text does (``ast.parse`` checks no placement rule that spans
statements), and a text that does not parse raises the very error ``ast.parse(text)`` raises.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["PIECE", "Piece", "Progress", "check", "module_of", "parse_pieces"]

#: Characters per piece: small enough that a piece's tree stays a few MB, big enough that a
#: typical file is one piece (parsed exactly as before).
PIECE = 1 << 16
#: Column-0 lines that may start a statement (not a comment, a closing bracket or a string's
#: continuation, not a clause of the compound statement above).
_CUT = re.compile(r"^(?!(?:else|elif|except|finally)\b)[A-Za-z_@]", re.M)

#: What ``ast`` counts as a line break.
_NEWLINE = re.compile(r"\r\n?|\n")
#: ``(characters parsed, total)`` after each piece, for a progress line.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Piece:
    """``text[start:end]``, which begins on 1-based line ``line``."""

    start: int
    end: int
    line: int


def _pieces(text: str, size: int) -> Iterator[tuple[Piece, ast.Module]]:
    pos, line = 0, 1
    while pos < len(text):
        want = size
        while True:
            cut = _CUT.search(text, pos + want) if pos + want < len(text) else None
            end = cut.start() if cut else len(text)
            try:
                tree = ast.parse(text[pos:end])
            except (SyntaxError, ValueError):
                if end == len(text):
                    if pos == 0:
                        raise
                    ast.parse(text)  # the error as the whole file gives it
                    raise  # not reached: the pieces before parse, so the whole fails too
                want *= 2
                continue
            break
        yield Piece(pos, end, line), tree
        line += len(_NEWLINE.findall(text, pos, end))
        pos = end


def parse_pieces(text: str, keep: Callable[[str], bool], *, size: int | None = None,
                 progress: Progress | None = None) -> list[tuple[Piece, ast.Module]]:
    """Parse all of ``text`` in pieces of about ``size`` characters (default :data:`PIECE`);
    return the pieces whose text ``keep`` accepts, with their trees (line numbers already those
    of the file).  Raises what ``ast.parse(text)`` raises."""
    kept = []
    for piece, tree in _pieces(text, size or PIECE):
        if keep(text[piece.start:piece.end]):
            if piece.line > 1:
                ast.increment_lineno(tree, piece.line - 1)
            kept.append((piece, tree))
        if progress is not None:
            progress(piece.end, len(text))
    return kept


def check(text: str, *, size: int | None = None, progress: Progress | None = None) -> None:
    """Raise what ``ast.parse(text)`` raises, keeping no tree."""
    parse_pieces(text, lambda _: False, size=size, progress=progress)


def module_of(kept: list[tuple[Piece, ast.Module]]) -> ast.Module:
    """One module holding the statements of the kept pieces, in file order."""
    return ast.Module(body=[node for _, tree in kept for node in tree.body], type_ignores=[])
