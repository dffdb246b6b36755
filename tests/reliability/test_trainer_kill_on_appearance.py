"""The Trainer path of issue 38 part 3: a worker SIGKILLed the moment ``checkpoint-N`` appears
costs only the steps since it.

An unmodified 4.30 example script (``run_clm_datasets_legacy.py``: on a restart it finds the last
checkpoint with ``get_last_checkpoint`` and resumes from it) runs sharded (``zero_dp_3 auto_wrap``)
under ``torchrun --max-restarts 1 -m shardcompat.transformers``, saving every 2 steps.  The test
watches the output folder and kills one local rank as soon as ``checkpoint-2`` is there, or a
random rank at a random moment of the ``checkpoint-4`` save.  The restarted job must resume from
the newest checkpoint that was there (it appeared complete) and end with the losses and weights
of the same job run without a kill.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests._agents import Agents
from tests.reliability.test_kill_on_appearance import _workers

pytestmark = [pytest.mark.reliability, pytest.mark.multinode]  # runs in nox -s multinode
transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
pytest.importorskip("datasets", reason="the script loads its data with `datasets` (in the test extra)")

from tests.transformers.test_legacy_scripts import SCRIPTS, _clm_assets  # noqa: E402

STEPS, EVERY = 6, 2
ARGS = [
    "--do_train", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2", "--logging_steps", "1",
    "--learning_rate", "5e-3", "--lr_scheduler_type", "constant", "--report_to", "none", "--disable_tqdm", "true",
    "--seed", "0", "--save_strategy", "steps", "--save_steps", str(EVERY), "--no_cuda", "--log_level", "info",
    "--max_steps", str(STEPS), "--sharded_ddp", "zero_dp_3 auto_wrap",
]
# Accelerate sets up the group, not shardcompat: torch's own remedy for the agent's shared store
# (as tests/multinode/test_trainer.py, whose kill falls at a fixed step rather than at a save).
ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def _argv(data: list[str], out: Path) -> list[str]:
    return ["-m", "shardcompat.transformers", str(SCRIPTS / "run_clm_datasets_legacy.py"), *data, *ARGS,
            "--output_dir", str(out)]


def _complete(out: Path) -> list[int]:
    """The ``checkpoint-N`` folders there, as ``get_last_checkpoint`` sees them."""
    if not out.is_dir():
        return []
    return sorted(int(m.group(1)) for p in out.iterdir() if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)))


def _outcome(out: Path) -> dict[str, Any]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    weights = dict(transformers.AutoModelForCausalLM.from_pretrained(out).state_dict())
    return {"losses": {e["step"]: e["loss"] for e in history if "loss" in e}, "weights": weights}


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return _clm_assets(tmp_path_factory.mktemp("clm"))


@pytest.fixture(scope="module")
def uninterrupted(assets: list[str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("plain") / "out"
    with Agents([2], _argv(assets, out), env=ENV) as agents:
        results = agents.wait(400)
    assert results[0].returncode == 0, results[0].stderr[-6000:]
    return _outcome(out)


def _run_and_kill(assets: list[str], out: Path, local_rank: int, trigger: str, delay: float) -> tuple[str, int]:
    """Run the job; ``delay`` s after ``trigger`` appears in ``out``, kill ``local_rank``.  The
    output of the whole (restarted) job, and the newest checkpoint there at the kill."""
    with Agents([2], _argv(assets, out), max_restarts=1, env=ENV) as agents:
        agent = agents.procs[0]
        deadline, due = time.monotonic() + 400, None
        while time.monotonic() < deadline and agent.poll() is None:
            if due is None and (out / trigger).exists():
                due = time.monotonic() + delay
            workers = _workers(agent.pid)
            if due is not None and time.monotonic() >= due and local_rank in workers:
                newest = max(_complete(out), default=0)
                os.kill(workers[local_rank], signal.SIGKILL)
                break
            time.sleep(0.005)
        else:
            pytest.fail(f"{trigger} never appeared while the job ran, or the job ended {delay:.3f} s after it")
        results = agents.wait(400)
    output = results[0].stdout + results[0].stderr
    assert results[0].returncode == 0, output[-6000:]
    return output, newest


def _resumed_as_uninterrupted(output: str, out: Path, newest: int, want: dict[str, Any], context: str) -> None:
    assert newest < STEPS, f"{context}: the job had finished its saves before the kill"
    resumed = re.findall(r"Checkpoint detected, resuming training at .*checkpoint-(\d+)\.", output)
    if newest:
        assert resumed and int(resumed[-1]) >= newest, f"{context}: no resume from checkpoint-{newest} or later:\n{output[-6000:]}"
    got = _outcome(out)
    assert sorted(got["losses"]) == list(range(1, STEPS + 1)), (context, got["losses"])
    worst = max(abs(got["losses"][s] - want["losses"][s]) for s in want["losses"])
    assert worst <= 1e-4, (context, got["losses"], want["losses"])
    a, b = got["weights"], want["weights"]
    assert a.keys() == b.keys() and max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-5, context


@pytest.mark.timeout(900)
@pytest.mark.parametrize("local_rank", [0, 1])
def test_a_trainer_worker_killed_as_its_checkpoint_appears_resumes_from_it(
    tmp_path: Path, assets: list[str], uninterrupted: dict[str, Any], local_rank: int
) -> None:
    out = tmp_path / "out"
    output, newest = _run_and_kill(assets, out, local_rank, f"checkpoint-{EVERY}", 0.0)
    assert newest >= EVERY  # what appeared was complete the moment it appeared
    _resumed_as_uninterrupted(output, out, newest, uninterrupted, f"killed local rank {local_rank} at checkpoint-{EVERY}")


@pytest.mark.timeout(900)
def test_a_trainer_worker_killed_during_a_save_resumes_from_the_newest_checkpoint_there(
    tmp_path: Path, assets: list[str], uninterrupted: dict[str, Any]
) -> None:
    """A random rank, a random moment after the second save's staging folder appears: mid-save."""
    rng = random.Random()  # a new moment each run; the assertion message names it
    local_rank, delay = rng.randrange(2), rng.uniform(0.0, 0.3)
    out = tmp_path / "out"
    output, newest = _run_and_kill(assets, out, local_rank, f".checkpoint-{2 * EVERY}.staging", delay)
    context = f"killed local rank {local_rank} {delay:.3f} s into the checkpoint-{2 * EVERY} save (newest then: {newest})"
    assert newest in (EVERY, 2 * EVERY), context
    _resumed_as_uninterrupted(output, out, newest, uninterrupted, context)
