"""``shardcompat-migrate`` over a large real corpus: every Python file of the installed torch
(and fairscale) packages, copied, some with legacy usages injected.  No file without a usage
changes by a byte, every rewritten file still parses, a second run changes nothing."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import io
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.reliability

INJECT_EVERY = 25  # one file in 25 gets a legacy usage (~90 of torch's ~2300 files)
_LEGACY = {  # must be rewritten, to exactly this
    'args = TrainingArguments(output_dir="out", sharded_ddp=True)\n':
        'args = TrainingArguments(output_dir="out", sharded_ddp="simple")\n',
    'args = TrainingArguments(sharded_ddp=False, output_dir="out")\n':
        'args = TrainingArguments(sharded_ddp="", output_dir="out")\n',
    'argv = ["train.py", "--sharded_ddp", "--fp16"]\n': 'argv = ["train.py", "--sharded_ddp", "simple", "--fp16"]\n',
    'parsed = parser.parse_args(["--sharded_ddp"])\n': 'parsed = parser.parse_args(["--sharded_ddp", "simple"])\n',
    'cmd = "python run.py --sharded_ddp --fp16"\n': 'cmd = "python run.py --sharded_ddp simple --fp16"\n',
    'run(extra_args_str="--sharded_ddp")\n': 'run(extra_args_str="--sharded_ddp simple")\n',
    'parser.add_argument("--sharded_ddp", action="store_true")\n':
        'parser.add_argument("--sharded_ddp", nargs="?", const="simple", default="")\n',
}
_MODERN = [  # usages already in the current spelling: must not change by a byte
    'args = TrainingArguments(output_dir="out", sharded_ddp="zero_dp_2 offload")\n',
    'argv = ["--sharded_ddp", "zero_dp_3", "--output_dir", "o"]\n',
    'config = dict(sharded_ddp=["zero_dp_3", "auto_wrap"], seed=1)\n',
]


def _main() -> Any:
    try:
        from codemods.cli import main
    except ImportError as error:
        pytest.skip(f"codemods.cli is not importable yet: {error}")
    return main


def _packages() -> list[Path]:
    roots = []
    for name in ("torch", "fairscale"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            roots.append(Path(next(iter(spec.submodule_search_locations))))
    return roots


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


Corpus = tuple[Path, set[Path], dict[Path, str], dict[Path, bytes], dict[Path, bytes]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    _main()
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(20240601)
    injected: set[Path] = set()  # files given at least one legacy usage
    expected: dict[Path, bytes] = {}  # every injected file (legacy or modern only): its exact bytes after
    for package in _packages():
        for source in sorted(package.rglob("*.py")):
            target = root / package.name / source.relative_to(package)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            if rng.randrange(INJECT_EVERY) == 0:
                legacy, expected[target] = _inject(target, rng)
                if legacy:
                    injected.add(target)
    before = {p: _digest(p) for p in root.rglob("*.py")}
    assert len(before) > 1000, f"the corpus is too small to mean much ({len(before)} files)"
    originals = {p: p.read_bytes() for p in expected}
    return root, injected, before, expected, originals


def _inject(path: Path, rng: random.Random) -> tuple[bool, bytes]:
    """Append two usages in a function of their own after the file's code.

    Returns whether one is legacy, and the bytes the migration must leave: the file's own code
    as it was, each legacy usage rewritten exactly, each modern one unchanged.  One injected file
    in three gets modern usages only, which must stay byte-identical.
    """
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    legacy = rng.randrange(3) != 0
    lines = [rng.choice(list(_LEGACY)), rng.choice(_MODERN)] if legacy else rng.sample(_MODERN, 2)
    sep = "" if text.endswith("\n") or not text else "\n"

    def source(usages: list[str]) -> str:
        body = "".join("    " + line for line in usages)
        return f"{text}{sep}\n\ndef _shardcompat_injected():\n{body}    return locals()\n"

    path.write_text(source(lines), encoding="utf-8", errors="surrogateescape")
    return legacy, source([_LEGACY.get(line, line) for line in lines]).encode("utf-8", "surrogateescape")


def _run(root: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = _main()([str(root), *flags, "--json", "--no-progress", "--scope", "all"])
    return code, json.loads(out.getvalue())


@pytest.mark.timeout(1800)  # libcst over ~90 large torch files, twice, on a small machine
def test_migrate_touches_only_usages_and_is_idempotent(corpus: Any) -> None:
    root, injected, before, expected, _ = corpus
    parse_before = {p for p in injected if _parses(p)}
    code, report = _run(root, "--write")
    assert code == 0, f"exit code {code}: {[f for f in report['files'] if f['error']][:5]}"
    after = {p: _digest(p) for p in root.rglob("*.py")}
    untouched = [p for p in before if p not in injected and after[p] != before[p]]
    assert not untouched, f"files without a legacy usage changed: {[str(p) for p in untouched[:10]]}"
    changed = [p for p in injected if after[p] != before[p]]
    missed = sorted(str(p) for p in injected - set(changed))
    assert not missed, f"{len(missed)} injected files were not rewritten, e.g. {missed[:5]}"
    broken = [str(p) for p in changed if p in parse_before and not _parses(p)]
    assert not broken, f"rewritten files no longer parse: {broken[:10]}"
    # Exact, not just "changed": the modern usage next to a legacy one and the file's own code
    # must survive byte for byte, and the legacy usage must become exactly its rewrite.
    wrong = [str(p) for p in expected if p.read_bytes() != expected[p]]
    assert not wrong, f"{len(wrong)} injected files differ from their expected rewrite, e.g. {wrong[:5]}"

    code, again = _run(root, "--check")
    assert code == 0 and again["changed"] == 0, f"a second run wants to change {again['changed']} files"
    assert {p: _digest(p) for p in root.rglob("*.py")} == after


@pytest.mark.timeout(1800)
def test_fast_path_matches_the_rules_on_whole_modules(corpus: Any) -> None:
    """Every injected file, as it was before the migration: the units path (ast finds the
    statements, libcst parses those) gives what the rules give on the whole module."""
    from codemods.formats.python import migrate_module, migrate_source
    from codemods.run.context import Settings

    originals = corpus[4]
    for settings in (Settings(), Settings(to="fsdp")):
        differ = []
        for path, data in originals.items():
            fast, whole = migrate_source(data, settings), migrate_module(data, settings)
            if (fast.code, fast.edits, [(w.line, w.rule) for w in fast.warnings]) != (
                    whole.code, whole.edits, [(w.line, w.rule) for w in whole.warnings]):
                differ.append(str(path))
        assert not differ, f"{len(differ)} files differ between the two paths ({settings.to}), e.g. {differ[:5]}"


def _parses(path: Path) -> bool:
    try:
        ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return False
    return True
