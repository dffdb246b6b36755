"""Observing never changes training: ``shardcompat run``'s sharding block is read-only on every rank.

``scripts/observe_dropin.py`` is a user's drop-in script (it imports ``shardcompat.transformers``
itself) training a tiny GPT-2 with its default dropout through ``Trainer.train()``; it records
on every rank the torch CPU (CUDA once initialised), NumPy and Python random states around each
optimizer step, each micro-batch's loss, and digests of the gradients, parameter shards and
optimizer state the rank holds.  It runs under ``shardcompat run --nproc 2`` (the block prints
after the first optimizer step) and, as the run without the report, under plain ``torchrun``.

Asserted: the block prints once, inside step 1's record (its hook runs before the script's
post-hook); every rank's random states after each step, block included, equal those before it;
and everything recorded is bit-identical with and without the report.  No tolerance: both runs
do the same arithmetic in the same process layout, so any difference is a real one.
The default suite runs ``simple`` (DDP + ZeRO-1) and ``zero_dp_3 auto_wrap`` (FSDP2), four launches;
``SHARDCOMPAT_TRANSFORMERS_GRID=full`` adds ``zero_dp_2`` (FSDP2 again, the same block).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

from tests.transformers._grid import FULL
from tests.transformers._stock import TORCHRUN

SCRIPT = Path(__file__).parent / "scripts" / "observe_dropin.py"
STEPS = 3
MODES = ["simple", "zero_dp_3-auto_wrap", *(["zero_dp_2"] if FULL else [])]
ARGS = [
    "--max_steps", str(STEPS), "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2",
    "--logging_steps", "1", "--learning_rate", "5e-3", "--report_to", "none", "--disable_tqdm", "true",
    "--save_strategy", "no", "--seed", "0",
]


def _launch(launcher: list[str], mode: str, out: Path) -> dict[str, Any]:
    import subprocess

    import torch

    flags = ["--use_cpu", "true"] if torch.cuda.device_count() < 2 else []  # one device per rank, or the CPU
    command = [*launcher, str(SCRIPT), *ARGS, *flags, "--output_dir", str(out), "--sharded_ddp", *mode.split("-")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    ranks = [json.loads((out / f"observed-rank{r}.json").read_text()) for r in range(2)]
    return {"output": output, "ranks": ranks}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    root = tmp_path_factory.mktemp("observing")
    found = {}
    for mode in MODES:
        found[mode, "run"] = _launch([sys.executable, "-m", "shardcompat", "run", "--nproc", "2"], mode,
                                     root / f"{mode}-run")
        found[mode, "torchrun"] = _launch(TORCHRUN, mode, root / f"{mode}-torchrun")
    return found


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", MODES)
def test_the_block_leaves_every_random_stream_where_it_was_on_every_rank(runs: Any, mode: str) -> None:
    run = runs[mode, "run"]
    output = run["output"]
    assert output.count("***** shardcompat: ") == 1, output[-4000:]
    block_end = output.index("\n*****\n", output.index("***** shardcompat: "))
    assert block_end < output.index("[observe] rank 0 after optimizer step 1"), "the block ran outside step 1's record"
    for rank, record in enumerate(run["ranks"]):
        assert record["dropout"] == [0.1, 0.1, 0.1], record["dropout"]  # GPT-2's defaults
        steps = record["steps"]
        assert len(steps) == STEPS
        for i, step in enumerate(steps, 1):
            assert step["after"] == step["before"], (rank, i, step)  # the optimizer step and, at 1, the block
        # ... and the fingerprints see the stream: dropout draws from it between steps.
        assert len({s["before"]["torch"] for s in steps}) == STEPS, (rank, steps)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", MODES)
def test_training_is_bit_identical_with_and_without_the_report(runs: Any, mode: str) -> None:
    with_report, without = runs[mode, "run"], runs[mode, "torchrun"]
    assert "***** shardcompat: " not in without["output"]
    for rank, (got, want) in enumerate(zip(with_report["ranks"], without["ranks"])):
        assert got["losses"] == want["losses"], (rank, got["losses"], want["losses"])
        for i, (a, b) in enumerate(zip(got["steps"], want["steps"], strict=True), 1):
            assert a == b, (rank, i, a, b)  # random states, gradients, parameter shards, optimizer state
        assert got["end"] == want["end"], rank
