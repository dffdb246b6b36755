"""Every fixture pair: the rewrite gives ``after`` byte for byte, a second run changes nothing,
``after`` parses, and no-op fixtures stay byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codemods.formats.config import validate
from codemods.formats.kinds import detect_kind
from codemods.formats.spans import decode

from .fixtures import Case, cases, rewrite

CASES = cases()


def _parses(path: Path, data: bytes) -> None:
    kind = detect_kind(path.name.replace("after", "before"), data[:200])
    if kind == "python":
        import libcst

        libcst.parse_module(data)
    elif kind in ("json", "notebook", "yaml", "toml", "ini"):
        validate(kind, decode(data).text)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture(case: Case, tmp_path: Path) -> None:
    expected = case.after.read_bytes()
    data, report = rewrite(case.before, case.settings, tmp_path)
    assert report.error is None
    assert data == expected, f"{case.name}: rewrite differs from {case.after.name}"
    if case.noop:
        assert report.new_data is None and not report.edits
    else:
        assert report.edits, "a changing fixture reports its edits"
        assert all(e.line >= 1 and e.rule for e in report.edits)
    if case.warnings is not None:
        assert [w.rule for w in report.warnings] == list(case.warnings)
    again, second = rewrite(case.after, case.settings, tmp_path)
    assert again == expected and second.new_data is None, "a second run changes nothing"
    _parses(case.after, expected)


def test_every_kind_has_a_fixture() -> None:
    kinds = {detect_kind(c.before.name, c.before.read_bytes()[:200]) for c in CASES}
    assert kinds >= {"python", "notebook", "shell", "makefile", "dockerfile", "yaml", "json",
                     "toml", "ini", "markdown", "rst"}


def test_notebook_outputs_untouched() -> None:
    case = next(c for c in CASES if c.name == "notebook")
    before, after = (json.loads(p.read_text(encoding="utf-8")) for p in (case.before, case.after))
    assert [c.get("outputs") for c in before["cells"]] == [c.get("outputs") for c in after["cells"]]
    assert before["metadata"] == after["metadata"]
    assert before["cells"][0] == after["cells"][0]  # markdown cell: prose
    assert after["cells"][4] == before["cells"][4]  # %%time: Python; a string that is only the flag stays


def test_notebook_magics_left_alone_are_byte_identical() -> None:
    case = next(c for c in CASES if c.name == "notebook_magics")
    before, after = (json.loads(p.read_text(encoding="utf-8")) for p in (case.before, case.after))
    assert [c.get("outputs") for c in before["cells"]] == [c.get("outputs") for c in after["cells"]]
    unread = [i for i, c in enumerate(before["cells"])
              if c["source"][0].startswith(("%%html", "%%script perl", "%%writefile args.txt"))
              or "if ok else" in c["source"][0]]
    assert len(unread) == 4
    assert all(after["cells"][i] == before["cells"][i] for i in unread)
    changed = [i for i, (b, a) in enumerate(zip(before["cells"], after["cells"])) if a != b]
    assert changed == [1, 2, 3, 4, 5, 6, 7]  # !, %run, %time lines; %%script bash|sh; %%capture; %%time; %%timeit
