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
_LEGACY = [  # must be rewritten
    'args = TrainingArguments(output_dir="out", sharded_ddp=True)\n',
    'args = TrainingArguments(sharded_ddp=False, output_dir="out")\n',
    'argv = ["train.py", "--sharded_ddp", "--fp16"]\n',
    'parsed = parser.parse_args(["--sharded_ddp"])\n',
    'cmd = "python run.py --sharded_ddp --fp16"\n',
]
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


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[Path], dict[Path, str]]:
    _main()
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(20240601)
    injected: set[Path] = set()  # files given at least one legacy usage
    for package in _packages():
        for source in sorted(package.rglob("*.py")):
            target = root / package.name / source.relative_to(package)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            if rng.randrange(INJECT_EVERY) == 0 and _inject(target, rng):
                injected.add(target)
    before = {p: _digest(p) for p in root.rglob("*.py")}
    assert len(before) > 1000, f"the corpus is too small to mean much ({len(before)} files)"
    return root, injected, before


def _inject(path: Path, rng: random.Random) -> bool:
    """Append two usages in a function of their own after the file's code; True if one is legacy.

    One injected file in three gets modern usages only, which must stay byte-identical.
    """
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    legacy = rng.randrange(3) != 0
    lines = [rng.choice(_LEGACY), rng.choice(_MODERN)] if legacy else rng.sample(_MODERN, 2)
    body = "".join("    " + line for line in lines)
    sep = "" if text.endswith("\n") or not text else "\n"
    path.write_text(
        f"{text}{sep}\n\ndef _shardcompat_injected():\n{body}    return locals()\n",
        encoding="utf-8", errors="surrogateescape",
    )
    return legacy


def _run(root: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = _main()([str(root), *flags, "--json", "--no-progress", "--scope", "all"])
    return code, json.loads(out.getvalue())


@pytest.mark.timeout(1800)  # libcst over ~90 large torch files, twice, on a small machine
def test_migrate_touches_only_usages_and_is_idempotent(corpus: Any) -> None:
    root, injected, before = corpus
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
    leftover = [
        str(p) for p in changed
        if any(s.strip() in p.read_text(errors="replace") for s in _LEGACY)
    ]
    assert not leftover, f"legacy keyword left behind in {leftover[:5]}"

    code, again = _run(root, "--check")
    assert code == 0 and again["changed"] == 0, f"a second run wants to change {again['changed']} files"
    assert {p: _digest(p) for p in root.rglob("*.py")} == after


def _parses(path: Path) -> bool:
    try:
        ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return False
    return True
