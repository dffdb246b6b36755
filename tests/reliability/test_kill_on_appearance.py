"""A worker SIGKILLed the moment a checkpoint's folder appears costs only the steps after it.

The issue's run: ``torchrun --nproc-per-node 2 --max-restarts 1 -m shardcompat train
--sharded_ddp zero_dp_3 --steps 12 --checkpoint-dir D --save-every 4 --resume auto --json``.
The test watches D and kills one local rank as soon as ``step-N`` is there (a folder appears
under its final name only when it is complete), or a random moment after; the
restarted job must resume from the newest checkpoint that was there, and end with the losses
of an uninterrupted run.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from shardcompat.train.resume import checkpoint_path, complete_checkpoints
from tests._agents import Agents, rank0_reports
from tests.test_resume import train_json

pytestmark = [pytest.mark.reliability, pytest.mark.multinode]  # runs in nox -s multinode

STEPS, EVERY = 12, 4
OPTIONS = ("--sharded_ddp", "zero_dp_3")


def _argv(root: Path) -> list[str]:
    return ["-m", "shardcompat", "train", *OPTIONS, "--steps", str(STEPS), "--checkpoint-dir", str(root),
            "--save-every", str(EVERY), "--resume", "auto", "--json", "--collective-timeout", "60"]


def _workers(agent_pid: int) -> dict[int, int]:
    """``local rank -> pid`` of the agent's live workers, read from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
            if ppid != agent_pid:
                continue
            env = dict(item.split("=", 1) for item in (entry / "environ").read_text().split("\0") if "=" in item)
        except (OSError, StopIteration, ValueError):
            continue  # gone meanwhile
        if "LOCAL_RANK" in env:
            found[int(env["LOCAL_RANK"])] = int(entry.name)
    return found


def _run_and_kill(root: Path, local_rank: int, step: int, delay: float = 0.0) -> tuple[dict[str, object], int]:
    """Run the job, kill ``local_rank`` ``delay`` s after ``step-{step}`` appears; the report and
    the newest complete checkpoint at the kill."""
    with Agents([2], _argv(root), max_restarts=1) as agents:
        agent = agents.procs[0]
        deadline, due = time.monotonic() + 240, None
        while time.monotonic() < deadline and agent.poll() is None:
            if due is None and checkpoint_path(root, step).exists():
                due = time.monotonic() + delay
            workers = _workers(agent.pid)
            if due is not None and time.monotonic() >= due and local_rank in workers:
                newest = max((s for s, _ in complete_checkpoints(root)), default=0)
                os.kill(workers[local_rank], signal.SIGKILL)
                break
            time.sleep(0.005)
        else:
            pytest.fail(f"step-{step} never appeared while the job ran, or the job ended {delay} s after it")
        results = agents.wait(240)
    assert results[0].returncode == 0, results[0].stderr[-4000:]
    # A kill that lands after rank 0 has finished (in the other rank's teardown) restarts the
    # workers once more, and the last attempt's report is the job's.
    return rank0_reports(results)[-1], newest


@pytest.fixture(scope="module")
def plain_losses() -> list[float]:
    report = train_json(*OPTIONS, "--model", "gpt", steps=STEPS)  # the job's own default model
    losses: list[float] = report["runs"][0]["losses"]
    return losses


@pytest.mark.timeout(600)
@pytest.mark.parametrize("step", [4, 8])
@pytest.mark.parametrize("local_rank", [0, 1])
def test_a_kill_as_the_checkpoint_appears_resumes_from_it(
    tmp_path: Path, local_rank: int, step: int, plain_losses: list[float]
) -> None:
    report, newest = _run_and_kill(tmp_path, local_rank, step)
    assert newest == step  # what appeared was complete the moment it appeared
    assert report["resumed_from_step"] == step
    assert report["runs"][0]["losses"] == pytest.approx(plain_losses, abs=1e-6)  # type: ignore[index]


@pytest.mark.timeout(600)
def test_a_kill_at_a_random_moment_resumes_from_the_newest_checkpoint_there(
    tmp_path: Path, plain_losses: list[float]
) -> None:
    """Somewhere in steps 5-8 or the step-8 save, which 8 steps and a save outlast even on a fast machine."""
    rng = random.Random()  # a new moment each run; the assertion message names it
    local_rank, delay = rng.randrange(2), rng.uniform(0.0, 0.6)
    report, newest = _run_and_kill(tmp_path, local_rank, EVERY, delay)
    context = f"killed local rank {local_rank} {delay:.3f} s after step-4; newest complete checkpoint then: {newest}"
    assert newest in (4, 8), context
    # At least what was there (step-8 may complete between the look and the kill); the losses say it was whole.
    assert report["resumed_from_step"] in (4, 8) and report["resumed_from_step"] >= newest, context
    assert report["runs"][0]["losses"] == pytest.approx(plain_losses, abs=1e-6), context  # type: ignore[index]
