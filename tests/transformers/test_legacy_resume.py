"""``--overwrite_output_dir`` means under ``shardcompat run`` what it meant to a 4.30 example script.

Transformers 4.30's run_clm.py (and its siblings) decided from ``training_args.overwrite_output_dir``:
without it, an ``output_dir`` holding a checkpoint resumes from the last one, and a non-empty
``output_dir`` without one is refused ("Use --overwrite_output_dir to overcome."); with it, training
starts fresh.  5.x dropped the field; the legacy layer keeps it readable, so the unmodified
``scripts/run_clm_datasets_legacy.py`` must do all three, sharded (``zero_dp_3 auto_wrap``): the
resumed run's later steps and weights equal those of one uninterrupted run.  One process by
default; ``SHARDCOMPAT_TRANSFORMERS_GRID=full`` runs it on 2 ranks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ._grid import FULL
from .test_legacy_scripts import LEGACY_RELEASE, SCRIPT_ASSETS, SCRIPTS, _clm_assets, _run

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
pytestmark = pytest.mark.skipif("run_clm_datasets_legacy.py" not in SCRIPT_ASSETS,
                                reason="the script loads its data with `datasets` (in the test extra), not importable here")

SCRIPT = SCRIPTS / "run_clm_datasets_legacy.py"
NPROC = 2 if FULL else 1
ARGS = [
    "--do_train", "--per_gpu_train_batch_size", "2", "--gradient_accumulation_steps", "2", "--logging_steps", "1",
    "--learning_rate", "5e-3", "--lr_scheduler_type", "constant", "--report_to", "none", "--disable_tqdm", "true",
    "--seed", "0", "--save_strategy", "steps", "--save_steps", "2", "--no_cuda", "--log_level", "info",
    "--sharded_ddp", "zero_dp_3 auto_wrap",
]


def _command(data: list[str], out: Path, steps: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "shardcompat", "run", "--nproc", str(NPROC), str(SCRIPT), *data, *ARGS,
            "--max_steps", str(steps), "--output_dir", str(out), *extra]


def _losses(out: Path) -> dict[int, float]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return {e["step"]: e["loss"] for e in history if "loss" in e}


def _weights(out: Path) -> dict[str, Any]:
    return dict(transformers.AutoModelForCausalLM.from_pretrained(out).state_dict())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("resume")
    data = _clm_assets(root)
    out = root / "out"
    found: dict[str, Any] = {"out": out}
    found["first"] = _run(_command(data, out, 2), out)  # stops at step 2, with checkpoint-2
    found["first_losses"] = _losses(out) if found["first"]["code"] == 0 else {}
    found["second"] = _run(_command(data, out, 4), out)  # the same command line, 4 steps: resumes
    if found["second"]["code"] == 0:
        found["second_losses"], found["second_weights"] = _losses(out), _weights(out)
    found["fresh"] = _run(_command(data, out, 4, "--overwrite_output_dir"), out)  # starts over
    stray = root / "not-a-run"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    found["stray"] = stray
    found["refused"] = _run(_command(data, stray, 4), stray)
    return found


def _ok(run: dict[str, Any]) -> str:
    assert run["code"] == 0, run["output"][-6000:]
    output: str = run["output"]
    return output


def test_without_overwrite_output_dir_it_resumes_from_the_last_checkpoint(runs: dict[str, Any]) -> None:
    _ok(runs["first"])
    output = _ok(runs["second"])
    assert f"Checkpoint detected, resuming training at {runs['out'] / 'checkpoint-2'}." in output
    if not LEGACY_RELEASE:  # the legacy flags were served (a 4.3x release has them itself)
        assert "FutureWarning: TrainingArguments --per_gpu_train_batch_size" in output
    first, second = runs["first_losses"], runs["second_losses"]
    assert list(first) == [1, 2] and list(second) == [1, 2, 3, 4]
    assert [second[s] for s in (1, 2)] == [first[s] for s in (1, 2)]  # steps 1-2 are the checkpoint's history


def test_with_overwrite_output_dir_it_starts_fresh_and_the_resumed_run_equals_it(runs: dict[str, Any]) -> None:
    output = _ok(runs["fresh"])
    assert "Checkpoint detected" not in output
    fresh, resumed = _losses(runs["out"]), runs["second_losses"]
    assert list(fresh) == [1, 2, 3, 4]
    # Trained again from step 1 (same seed: the same first steps), and the resumed run's steps
    # 3-4 and final weights are those of this uninterrupted run.
    assert max(abs(fresh[s] - runs["first_losses"][s]) for s in (1, 2)) <= 1e-4
    assert max(abs(fresh[s] - resumed[s]) for s in (3, 4)) <= 1e-4, (fresh, resumed)
    a, b = _weights(runs["out"]), runs["second_weights"]
    assert a.keys() == b.keys() and max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-5


def test_a_non_empty_output_dir_without_checkpoint_is_refused_as_4_30_did(runs: dict[str, Any]) -> None:
    run = runs["refused"]
    assert run["code"] != 0
    assert "already exists and is not empty. Use --overwrite_output_dir to overcome." in run["output"]
    assert sorted(p.name for p in runs["stray"].iterdir()) == ["notes.txt"]  # nothing written, nothing removed
