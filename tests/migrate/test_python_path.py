"""The fast Python path (ast finds the units, libcst parses only those) against the rules on the
whole module: the same bytes, edits and warnings; libcst not loaded when nothing needs it;
line numbers from offsets; the fallback for syntax this Python cannot read."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from codemods.cli import pool_size
from codemods.formats.python import migrate_module, migrate_source
from codemods.run.context import Settings
from codemods.run.engine import Job

from .fixtures import cases

REPO = Path(__file__).resolve().parents[2]
PYTHON_CASES = [c for c in cases() if c.before.suffix == ".py"]

SNIPPETS = [
    # multi-line units: the line numbers of edits inside them
    'x = 1\nargs = TrainingArguments(\n    output_dir="o",\n    sharded_ddp=True,\n)\n',
    'cmd = (\n    "python t.py "\n    "--sharded_ddp --fp16"\n)\n',
    # header expressions of compound statements
    '@pytest.mark.parametrize("argv", [["--sharded_ddp", "--fp16"]])\ndef test(argv):\n    pass\n',
    'for argv in (["--sharded_ddp"], ["--fp16"]):\n    run(argv)\n',
    'if args.sharded_ddp == True:\n    pass\nelif args.sharded_ddp is False:\n    pass\n',
    'with launch(cmd="python t.py --sharded_ddp true"):\n    pass\n',
    'class A(Base, flags=["--sharded_ddp"]):\n    pass\n',
    # quiet places and skip markers
    'print("python t.py --sharded_ddp")\nlogger.info(TrainingArguments(sharded_ddp=True))\n',
    'args = TrainingArguments(\n    sharded_ddp=True,  # shardcompat: skip\n)\nb = dict(sharded_ddp=False)\n',
    'a = 1; b = TrainingArguments(sharded_ddp=True); c = "x --sharded_ddp"\n',
    # non-ASCII before the edit on the same line (ast columns are UTF-8 bytes)
    'note = "é"; args = TrainingArguments(sharded_ddp=True)\n',
    # CRLF line endings, a tab-indented body
    'def f():\r\n\tcmd = "python t.py --sharded_ddp"\r\n\treturn cmd\r\n',
]


def _same(fast_source: str | bytes, settings: Settings) -> None:
    fast, whole = migrate_source(fast_source, settings), migrate_module(fast_source, settings)
    assert fast.code == whole.code
    assert [asdict(e) for e in fast.edits] == [asdict(e) for e in whole.edits]
    assert sorted((w.line, w.rule) for w in fast.warnings) == sorted((w.line, w.rule) for w in whole.warnings)
    # the Transformers-legacy rule needs every use of an imported name: it takes the whole module
    assert fast.whole is settings.transformers_legacy and whole.whole


@pytest.mark.parametrize("case", PYTHON_CASES, ids=[c.name for c in PYTHON_CASES])
def test_fixtures_same_on_both_paths(case: object) -> None:
    _same(case.before.read_bytes(), case.settings)  # type: ignore[attr-defined]


@pytest.mark.parametrize("source", SNIPPETS)
@pytest.mark.parametrize("to", ["list", "fsdp"])
def test_snippets_same_on_both_paths(source: str, to: str) -> None:
    _same(source, Settings(to=to))  # type: ignore[arg-type]


def test_lines_inside_a_multiline_unit() -> None:
    result = migrate_source(SNIPPETS[0], Settings())
    assert [(e.line, e.before, e.after) for e in result.edits] == [(4, "sharded_ddp=True", 'sharded_ddp="simple"')]
    result = migrate_source(SNIPPETS[1], Settings())
    assert [(e.line, e.rule) for e in result.edits] == [(3, "flag-bare")]


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return done.stdout.strip()


def test_mentions_only_never_load_libcst(tmp_path: Path) -> None:
    path = tmp_path / "trainer.py"
    path.write_text(
        '"""Shard with --sharded_ddp."""\n'
        "# --sharded_ddp: a comment\n"
        "def setup(args, logger):\n"
        '    """Use --sharded_ddp true."""\n'
        "    if args.sharded_ddp:\n"
        '        logger.info("--sharded_ddp %s", args.sharded_ddp)\n'
        '        raise ValueError("python t.py --sharded_ddp is not for one GPU")\n'
        "    return args.sharded_ddp\n")
    code = ("import sys; from codemods.formats.python import migrate_source; from codemods.run.context import "
            f"Settings; r = migrate_source(open({str(path)!r}, 'rb').read(), Settings()); "
            "print(r.code == open(" + repr(str(path)) + ", 'rb').read(), 'libcst' in sys.modules)")
    assert _run(code) == "True False"


def test_libcst_only_for_the_units_that_need_it(tmp_path: Path) -> None:
    """A file that needs an edit loads libcst; libcst.codemod and libcst.matchers stay unloaded."""
    path = tmp_path / "train.py"
    path.write_text("args = TrainingArguments(sharded_ddp=True)\n")
    code = ("import sys, json; from codemods.formats.python import migrate_source; from codemods.run.context import "
            f"Settings; r = migrate_source(open({str(path)!r}, 'rb').read(), Settings()); "
            "print(json.dumps([r.code.decode(), sorted(m for m in ('libcst', 'libcst.codemod', 'libcst.matchers') "
            "if m in sys.modules)]))")
    assert json.loads(_run(code)) == ['args = TrainingArguments(sharded_ddp="simple")\n', ["libcst"]]


def test_syntax_this_python_cannot_read_goes_through_libcst() -> None:
    source = "type Args = dict[str, int]\nargs = TrainingArguments(sharded_ddp=True)\n"
    if sys.version_info >= (3, 12):
        pytest.skip("this Python reads PEP 695 aliases; the fallback is for older ones")
    result = migrate_source(source, Settings())
    assert result.whole and result.code == source.replace("sharded_ddp=True", 'sharded_ddp="simple"')


def test_latin1_file_keeps_its_bytes() -> None:
    source = '# -*- coding: latin-1 -*-\nname = "caf\xe9"; cmd = "python t.py --sharded_ddp"\n'.encode("latin-1")
    result = migrate_source(source, Settings())
    assert result.code == source.replace(b"--sharded_ddp", b"--sharded_ddp simple")


@pytest.mark.parametrize(("kinds", "limit", "expected"), [
    (["python"] * 10, 8, 1),      # a few files: no pool, its start-up would cost more than it saves
    (["python"] * 127, 8, 1),
    (["python"] * 128, 8, 2),
    (["python"] * 500, 2, 2),     # never more than asked for
    (["shell"] * 500, 8, 1),      # text files are cheap: they do not count
])
def test_pool_size_by_files_to_parse(kinds: list[str], limit: int, expected: int) -> None:
    jobs = [Job(f"f{i}", f"f{i}", kind, Settings()) for i, kind in enumerate(kinds)]
    assert pool_size(jobs, limit) == expected
