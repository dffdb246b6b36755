"""Issue 22 §3: the 4.30-era scripts, migrated by ``shardcompat-migrate --transformers-legacy``,
hold no legacy name of the table but what the tool reported for a hand edit (none, for these),
and a migrated script run on stock Transformers trains as the unmigrated one does under
``shardcompat run``.

The scripts are globbed from ``scripts/*_legacy.py`` (a new one is checked without a change
here); the assets, command line and comparison are those of :mod:`.test_legacy_scripts`.
"""

from __future__ import annotations

import ast
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from codemods.cli import build_parser, run
from codemods.rules.transformers_legacy import UNMIGRATED
from shardcompat.transformers.legacy_table import ROWS, Kind, Served

from ._grid import FULL, LEAN
from ._stock import TORCHRUN
from .test_legacy_scripts import (
    EVAL_LOSSES,
    LEGACY_RELEASE,
    MODEL_CLASSES,
    RUN_FLAGS,
    SCRIPT_ASSETS,
    SCRIPTS,
    _history,
    _run,
    flags,
)

transformers = pytest.importorskip("transformers")

LEGACY_SCRIPTS = sorted(SCRIPTS.glob("*_legacy.py"))
_BY_KIND = {kind: {r.name for r in ROWS if r.kind is kind} for kind in Kind}
_MODULES = {"transformers": Kind.TOP_LEVEL, "transformers.utils": Kind.UTILS}
#: The rows whose migration is a hand edit the table names (the tool reports them, never guesses).
HAND_EDITS = {r.name for r in ROWS if r.served is Served.REFUSED or (r.served is Served.NO_OP and r.replacement)}


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def legacy_uses(code: str) -> set[str]:
    """The table's names this code uses as 4.x API (keywords, imports, attribute reads), not in
    prose; a field the script's own dataclasses declare is the script's, not the table's."""
    found: set[str] = set()
    tree = ast.parse(code)
    own = {s.target.id for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for s in c.body
           if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _callee(node)
            kind = (Kind.FIELD if name.endswith("TrainingArguments") else Kind.TRAINER if name.endswith("Trainer")
                    else Kind.FROM_PRETRAINED if name == "from_pretrained" else None)
            if kind is not None:
                found |= {k.arg for k in node.keywords if k.arg in _BY_KIND[kind]}
        elif isinstance(node, ast.ImportFrom) and node.module in _MODULES:
            found |= {a.name for a in node.names if a.name in _BY_KIND[_MODULES[node.module]]}
        elif isinstance(node, ast.Attribute):
            receiver = ast.unparse(node.value)
            served = (_BY_KIND[_MODULES[receiver]] if receiver in _MODULES
                      else _BY_KIND[Kind.FIELD] - own if "args" in receiver.rsplit(".", 1)[-1] else set())
            if node.attr in served:
                found.add(node.attr)
    return found


def migrate(paths: list[Path]) -> Any:
    return run(build_parser().parse_args([*map(str, paths), "--transformers-legacy", "--no-legacy", "--write",
                                          "--no-progress"]))


@pytest.mark.skipif(LEGACY_RELEASE, reason="this release still has the 4.30 API")
def test_migrated_scripts_hold_no_legacy_name_but_the_reported_hand_edits(tmp_path: Path) -> None:
    assert LEGACY_SCRIPTS
    copies = [Path(shutil.copy(script, tmp_path / script.name)) for script in LEGACY_SCRIPTS]
    before = {p.name: legacy_uses(p.read_text()) for p in copies}
    report = migrate(copies)
    assert not [f.error for f in report.files if f.error]
    for copy in copies:
        left = legacy_uses(copy.read_text())
        warned = [w.message for f in report.files if Path(f.path).name == copy.name for w in f.warnings
                  if w.rule == UNMIGRATED]
        assert left <= HAND_EDITS, f"{copy.name}: {left - HAND_EDITS} left without a hand edit the table names"
        if copy.name in SCRIPT_ASSETS:  # the scripts of the run test: nothing left at all
            assert not left, (copy.name, left)
        for name in left:
            assert any(m.startswith(f"{name}") or f" {name}:" in m or f".{name}:" in m for m in warned), (name, warned)
    assert sum(len(before[p.name] - legacy_uses(p.read_text())) for p in copies) >= 5  # the scripts were 4.x
    again = migrate(copies)
    assert not again.changed, "a second run changes nothing"


# GLUE in the lean grid; the other scripts in the full grid (about a minute each, see _grid).
MIGRATED_RUNS = [s for s in SCRIPT_ASSETS
                 if (LEAN and s == "run_glue_legacy.py") or (FULL and s != "run_glue_legacy.py")]


@pytest.mark.slow
@pytest.mark.skipif(LEGACY_RELEASE, reason="this release still has the 4.30 API")
@pytest.mark.parametrize("script", MIGRATED_RUNS)
def test_a_migrated_script_trains_as_the_unmigrated_one_under_shardcompat_run(tmp_path: Path, script: str) -> None:
    data = SCRIPT_ASSETS[script](tmp_path)
    legacy_line = [*RUN_FLAGS, *flags(script)[0], "--evaluation_strategy", "steps"]
    legacy_line += [] if "--no_cuda" in legacy_line else ["--no_cuda"]
    migrated = tmp_path / "migrated" / script
    migrated.parent.mkdir()
    shutil.copy(SCRIPTS / script, migrated)
    command = tmp_path / "migrated" / "train.sh"
    command.write_text(f"torchrun --nproc_per_node 2 {script} {shlex.join(legacy_line)}\n")
    report = migrate([migrated.parent])
    assert not [f.error for f in report.files if f.error]
    assert not legacy_uses(migrated.read_text())  # overwrite_output_dir moved to its own dataclass
    words = shlex.split(command.read_text())[4:]
    assert "--eval_strategy" in words and "--use_cpu" in words and "--evaluation_strategy" not in words

    stock = _run([*TORCHRUN,
                  str(migrated), *data, *words, "--output_dir", str(tmp_path / "stock")], tmp_path / "stock")
    legacy = _run([sys.executable, "-m", "shardcompat", "run", "--nproc", "2", str(SCRIPTS / script), *data,
                   *legacy_line, "--output_dir", str(tmp_path / "legacy"), "--sharded_ddp", "zero_dp_2"],
                  tmp_path / "legacy")
    assert stock["code"] == 0, stock["output"][-6000:]
    assert legacy["code"] == 0, legacy["output"][-6000:]
    assert "is Transformers 4.x API" not in stock["output"]  # nothing of the layer was needed
    # exit 0 without the Trainer's state, printing nothing: the migration had turned the script's closing
    # main() into pass, now and then (test_a_dropped_statement_never_takes_another_with_it)
    for done in (stock, legacy):
        assert (done["out"] / "trainer_state.json").is_file(), (sorted(p.name for p in done["out"].glob("*")),
                                                                done["output"][-6000:])
    (a_losses, a_evals), (b_losses, b_evals) = _history(tmp_path / "stock"), _history(tmp_path / "legacy")
    assert len(a_losses) == len(b_losses) == 4 and len(a_evals) == len(b_evals) == EVAL_LOSSES.get(script, 2)
    assert max(abs(a - b) for a, b in zip(a_losses, b_losses)) <= 1e-4, (a_losses, b_losses)
    assert max((abs(a - b) for a, b in zip(a_evals, b_evals)), default=0.0) <= 1e-4, (a_evals, b_evals)
    model_class = getattr(transformers, MODEL_CLASSES[script])
    a, b = (model_class.from_pretrained(tmp_path / name).state_dict() for name in ("stock", "legacy"))
    assert max(float((a[k].float() - b[k].float()).abs().max()) for k in a) <= 1e-5
