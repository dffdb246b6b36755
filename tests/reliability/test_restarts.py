"""Ten workers killed in a row under ``torchrun --max-restarts 10``: every restart must start
(none lost to the restarted group meeting the dead attempt's store keys, which torch 2.13's
shared agent store caused in 3 of 4 tries), each resumes from the newest checkpoint, and the
job ends with exactly the losses of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._agents import rank0_json, run_agents
from tests.test_resume import chaos_argv, train_json

pytestmark = [pytest.mark.reliability, pytest.mark.multinode]  # runs in nox -s multinode

KILLS = 10


@pytest.mark.timeout(900)
def test_ten_kills_in_a_row_cost_no_restart_beyond_one_each_and_no_steps(tmp_path: Path) -> None:
    steps = 2 * KILLS + 4
    # Rank 0 and rank 1 in turn, at odd steps: each restart resumes from the even step before.
    kills = ",".join(f"kill@{i % 2}:{2 * i + 3}" for i in range(KILLS))
    (tmp_path / "marks").mkdir()
    results = run_agents([2], chaos_argv(tmp_path, steps, "--sharded_ddp", "zero_dp_3"), max_restarts=KILLS,
                         env={"SHARDCOMPAT_CHAOS": f"{tmp_path / 'marks'};{kills}"}, timeout=840)
    stderr = results[0].stderr
    assert stderr.count("chaos: ") == KILLS, stderr[-3000:]
    assert "connectFullMesh" not in stderr
    report = rank0_json(results)
    assert report["resumed_from_step"] == 2 * (KILLS - 1) + 2
    plain = train_json("--sharded_ddp", "zero_dp_3", steps=steps)
    assert report["runs"][0]["losses"] == pytest.approx(plain["runs"][0]["losses"], abs=1e-6)
