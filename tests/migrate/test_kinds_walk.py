"""File kinds and discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemods.formats.kinds import detect_kind
from codemods.run.walk import iter_files


@pytest.mark.parametrize(("name", "head", "kind"), [
    ("train.py", b"", "python"),
    ("nb.ipynb", b"", "notebook"),
    ("run.sh", b"", "shell"),
    ("Makefile", b"", "makefile"),
    ("Dockerfile.gpu", b"", "dockerfile"),
    ("ci.yml", b"", "yaml"),
    ("setup.cfg", b"", "ini"),
    ("README.md", b"", "markdown"),
    ("index.rst", b"", "rst"),
    ("launch", b"#!/usr/bin/env bash\n", "shell"),
    ("tool", b"#!/usr/bin/env python3\n", "python"),
    ("data.bin", b"\x00\x01", None),
    ("notes", b"hello", None),
])
def test_detect_kind(name: str, head: bytes, kind: str | None) -> None:
    assert detect_kind(name, head) == kind


def test_walk_skips_and_excludes(tmp_path: Path) -> None:
    for rel in ("a.py", "pkg/b.py", ".venv/c.py", "env2/pyvenv.cfg", "env2/d.py", ".tox/e.py",
                "node_modules/f.sh", "pkg/__pycache__/g.py", "lib/site-packages/h.py", "gen/i.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    found = sorted(str(Path(p).relative_to(tmp_path)) for _, p in iter_files([str(tmp_path)], ["gen"]))
    assert found == ["a.py", "pkg/b.py"]
