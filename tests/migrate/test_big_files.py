"""Long files: the Python reader parses in top-level pieces, the diff covers the changed lines.

Pieces must be invisible: with pieces of one statement each, every fixture migrates to the same
bytes, report and warnings as with one piece, real modules give the very tree ``ast.parse``
gives, and a file that does not parse fails with the very error.  Time and memory against size
are measured by ``benchmarks/migrate_big_files.py``, not here.
"""

from __future__ import annotations

import ast
import difflib
import inspect
from pathlib import Path

import pytest

from codemods.formats import pychunks
from codemods.run import engine

from .fixtures import cases, rewrite

PYTHON_CASES = [c for c in cases() if c.before.suffix == ".py"]


def _real_modules() -> list[Path]:
    import argparse
    import dataclasses
    import difflib as stdlib_difflib

    import transformers.training_args as training_args

    return [Path(inspect.getfile(m)) for m in (argparse, dataclasses, stdlib_difflib, training_args)]


@pytest.mark.parametrize("path", _real_modules(), ids=lambda p: p.name)
def test_pieces_give_the_tree_of_the_whole_file(path: Path) -> None:
    text = path.read_text()
    kept = pychunks.parse_pieces(text, lambda _: True, size=1)
    assert len(kept) > 10  # really cut
    whole = ast.dump(ast.parse(text), include_attributes=True)
    assert ast.dump(pychunks.module_of(kept), include_attributes=True) == whole
    assert "".join(text[p.start:p.end] for p, _ in kept) == text


@pytest.mark.parametrize("broken", [
    "def f(x):\n    return x\n\nif x:\n    y = (\n\nz = 1\n",          # an open bracket in the middle
    "x = 1\ns = '''\nabc\ndef g(): pass\n",                          # an unterminated string
    "x = 1\n\ndef f():\n  pass\n\n  return (]\n",                    # an error in the last piece
    "x = 1\ny = 2\0\n",                                              # a null byte
])
def test_a_broken_file_fails_as_the_whole_file_does(broken: str) -> None:
    with pytest.raises((SyntaxError, ValueError)) as whole:
        ast.parse(broken)
    with pytest.raises((SyntaxError, ValueError)) as pieces:
        pychunks.check(broken, size=1)
    assert type(pieces.value) is type(whole.value) and str(pieces.value) == str(whole.value)


def test_clauses_at_column_zero_are_never_cuts() -> None:
    text = "if a:\n    x = 1\nelif b:\n    x = 2\nelse:\n    x = 3\ntry:\n    y\nexcept E:\n    z\nfinally:\n    w\n@d\ndef f(): pass\n"
    kept = pychunks.parse_pieces(text, lambda _: True, size=1)
    assert [text[p.start:p.end].split("\n", 1)[0] for p, _ in kept] == ["if a:", "try:", "@d"]


@pytest.mark.parametrize("case", PYTHON_CASES, ids=lambda c: c.name)
def test_fixtures_migrate_the_same_in_pieces_of_one_statement(case, tmp_path, monkeypatch) -> None:
    (tmp_path / "whole").mkdir()
    (tmp_path / "pieces").mkdir()
    expected, report = rewrite(case.before, case.settings, tmp_path / "whole")
    monkeypatch.setattr(pychunks, "PIECE", 1)
    got, pieces = rewrite(case.before, case.settings, tmp_path / "pieces")
    assert got == expected
    assert (pieces.edits, pieces.warnings, pieces.error) == (report.edits, report.warnings, report.error)


def _hunks(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if not line.startswith(("---", "+++"))]


def test_the_diff_of_a_long_file_is_the_diff_of_its_changed_lines(monkeypatch) -> None:
    lines = [f"line {i}\n" for i in range(3000)]
    old = "".join(lines).encode()
    changed = list(lines)
    changed[1500] = "changed\n"
    changed.insert(2990, "added\n")
    new = "".join(changed).encode()
    expected = "".join(difflib.unified_diff(lines, changed, "a/f.py", "b/f.py"))
    monkeypatch.setattr(engine, "_LONG_DIFF", 0)  # trim even this small file
    got = engine._diff("f.py", old, new)
    assert got == expected
    assert _hunks(got)[0] == "@@ -1498,7 +1498,7 @@"
