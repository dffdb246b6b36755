"""A refusal raised in a rank before training prints once, without a traceback, and exits 2.

Real commands, 2 gloo ranks: ``shardcompat train`` resuming a checkpoint of another model, and
``shardcompat run`` of a 4.30-era Trainer script with ``--adafactor`` on FSDP1's flat shards
(``--sharded_ddp "zero_dp_2 backend=torch-fsdp1"``, refused by the backend) or a bad option
string (refused before any rank starts).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "transformers" / "scripts" / "run_clm_legacy.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcompat", *argv], capture_output=True, text=True,
                          timeout=600, env=ENV)


def _one_clean_message(done: subprocess.CompletedProcess[str], message: str) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-4000:]
    assert "Traceback" not in output and "ChildFailedError" not in output, output[-4000:]
    assert output.count(message) == 1, output[-4000:]
    assert message in done.stderr.strip().splitlines()[-1], done.stderr[-4000:]  # last


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_train_resuming_a_checkpoint_of_another_model_is_refused_once(tmp_path: Path) -> None:
    saved = _run("train", "--model", "mlp", "--steps", "2", "--save-every", "1", "--checkpoint-dir",
                 str(tmp_path), "--json")
    assert saved.returncode == 0, saved.stderr[-4000:]
    done = _run("train", "--model", "mlp", "--dim", "32", "--steps", "2", "--checkpoint-dir", str(tmp_path),
                "--resume", str(tmp_path / "step-1"))
    _one_clean_message(done, "the checkpoint is of a different model")
    assert done.stderr.strip().splitlines()[-1].startswith("shardcompat train: error: ")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_adafactor_on_flat_shards_is_refused_once_by_the_parent(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    done = _run("run", "--nproc", "2", str(SCRIPT), "--output_dir", str(tmp_path), "--do_train", "--max_steps",
                "2", "--report_to", "none", "--sharded_ddp", "zero_dp_2 backend=torch-fsdp1", "--adafactor")
    _one_clean_message(done, "cannot train Adafactor")
    assert done.stderr.strip().splitlines()[-1].startswith("shardcompat run: error: --sharded_ddp: ")


@pytest.mark.timeout(300)
def test_run_bad_option_string_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    done = _run("run", "--nproc", "2", str(SCRIPT), "--output_dir", str(tmp_path), "--sharded_ddp", "zero_dp_9")
    _one_clean_message(done, "unknown sharding option 'zero_dp_9'")
    assert "usage:" not in done.stderr and "OMP_NUM_THREADS" not in done.stderr  # nothing was launched
