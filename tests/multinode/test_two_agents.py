"""Two torchrun agents on localhost ("nodes" of two ranks each, c10d rendezvous) train like one
4-rank job, survive a killed worker and a lost node, and hand checkpoints to other layouts.

Run by ``nox -s multinode`` (CI); data and initialisation depend only on (seed, global rank,
step), so every comparison is against plain DDP with as many ranks, loss for loss.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests._agents import Agents, rank0_json, run_agents
from tests.test_resume import CHAOS, train_json

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(600)]

STEPS = 4
TOL = 1e-5
COMMON = ("--steps", str(STEPS), "--model", "mlp", "--json", "--collective-timeout", "60")


def train_2x2(*argv: str, restarts: int = 0, chaos: str | None = None) -> dict[str, Any]:
    """``shardcompat train ARGV`` on two agents of two ranks; global rank 0's report."""
    entry = [CHAOS] if chaos else ["-m", "shardcompat", "train"]
    env = {"SHARDCOMPAT_CHAOS": chaos} if chaos else None
    return rank0_json(run_agents([2, 2], [*entry, *argv, *COMMON], max_restarts=restarts, env=env, timeout=400))


def local(nproc: int, *argv: str) -> dict[str, Any]:
    """The same command on ``nproc`` ranks of this process's own launcher (one node)."""
    return train_json("--nproc", str(nproc), *argv, steps=STEPS)


def losses(report: dict[str, Any]) -> list[float]:
    return list(report["runs"][0]["losses"])


@pytest.fixture(scope="module")
def ddp4(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """4-rank plain DDP on one node, saving step-2: the reference and a checkpoint to move."""
    root = tmp_path_factory.mktemp("ddp4")
    return local(4, "--checkpoint-dir", str(root), "--save-every", "2"), root


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """hybrid_shard on 2x2 (sharded within a node, replicated across), saving step-2."""
    root = tmp_path_factory.mktemp("hybrid")
    return train_2x2("--sharded_ddp", "hybrid_shard", "--checkpoint-dir", str(root), "--save-every", "2"), root


def test_hybrid_shard_on_2x2_matches_4_rank_ddp_and_reports_its_placement(
    hybrid: tuple[dict[str, Any], Path], ddp4: tuple[dict[str, Any], Path]
) -> None:
    report = hybrid[0]
    assert losses(report) == pytest.approx(losses(ddp4[0]), abs=TOL)
    assert report["placement"] == {"nodes": 2, "ranks_per_node": 2, "mesh": [2, 2],
                                   "mesh_dims": ["replicate", "shard"]}
    assert [r["rank"] for r in report["runs"][0]["ranks"]] == [0, 1, 2, 3]


@pytest.mark.parametrize("options", ["zero_dp_3", "simple"])
def test_sharded_options_on_2x2_match_4_rank_ddp(options: str, ddp4: tuple[dict[str, Any], Path]) -> None:
    report = train_2x2("--sharded_ddp", options)
    assert losses(report) == pytest.approx(losses(ddp4[0]), abs=TOL)
    assert report["placement"]["nodes"] == 2 and report["placement"]["mesh"] == [4]


def test_a_hybrid_checkpoint_from_2x2_resumes_on_4_rank_ddp_and_1x2_zero_dp_3(
    hybrid: tuple[dict[str, Any], Path], ddp4: tuple[dict[str, Any], Path]
) -> None:
    step2 = str(hybrid[1] / "step-2")
    on_ddp = local(4, "--resume", step2)
    assert on_ddp["resumed_from_step"] == 2
    assert losses(on_ddp) == pytest.approx(losses(hybrid[0]), abs=TOL)
    on_two = local(2, "--sharded_ddp", "zero_dp_3", "--resume", step2)
    ddp_two = local(2, "--resume", step2)  # the same world size, plain DDP
    assert losses(on_two) == pytest.approx(losses(ddp_two), abs=TOL)
    assert losses(on_two)[:2] == pytest.approx(losses(hybrid[0])[:2], abs=TOL)


def test_a_4_rank_ddp_checkpoint_resumes_as_hybrid_shard_on_2x2(ddp4: tuple[dict[str, Any], Path]) -> None:
    report = train_2x2("--sharded_ddp", "hybrid_shard", "--resume", str(ddp4[1] / "step-2"))
    assert report["resumed_from_step"] == 2
    assert losses(report) == pytest.approx(losses(ddp4[0]), abs=TOL)


def test_a_killed_worker_on_the_second_node_restarts_both_nodes_from_the_checkpoint(
    tmp_path: Path, ddp4: tuple[dict[str, Any], Path]
) -> None:
    """Each agent counts its restarts on its own (one saw its worker die, the other a peer
    leave): the group must still form again, and resume from step-2."""
    (tmp_path / "marks").mkdir()
    report = train_2x2("--sharded_ddp", "hybrid_shard", "--checkpoint-dir", str(tmp_path / "ckpt"),
                       "--save-every", "2", "--resume", "auto", restarts=1,
                       chaos=f"{tmp_path / 'marks'};kill@3:3")
    assert (tmp_path / "marks" / "kill-at-3-step-3").exists()
    assert report["resumed_from_step"] == 2
    assert losses(report) == pytest.approx(losses(ddp4[0]), abs=TOL)


def test_a_lost_node_resumes_on_the_remaining_two_ranks_through_the_portable_checkpoint(
    tmp_path: Path, ddp4: tuple[dict[str, Any], Path]
) -> None:
    """--nnodes 1:2: the node holding rank 2 dies at step 3 (agent and workers); the other
    node's agent restarts alone, 4 ranks -> 2, from step-2 saved by the 4-rank zero_dp_3 job."""
    (tmp_path / "marks").mkdir()
    root = tmp_path / "ckpt"
    argv = [CHAOS, "--sharded_ddp", "zero_dp_3", "--checkpoint-dir", str(root), "--save-every", "2",
            "--resume", "auto", *COMMON]
    start = time.monotonic()
    with Agents([2, 2], argv, nnodes="1:2", max_restarts=1,
                env={"SHARDCOMPAT_CHAOS": f"{tmp_path / 'marks'};node@2:3"}) as agents:
        results = agents.wait(400)
    survivors = [r for r in results if r.returncode == 0]
    assert len(survivors) == 1 and sorted(r.returncode for r in results)[0] != 0, [r.returncode for r in results]
    report = rank0_json(survivors)
    assert report["world_size"] == 2 and report["resumed_from_step"] == 2
    assert report["placement"]["nodes"] == 1
    assert losses(report)[:2] == pytest.approx(losses(ddp4[0])[:2], abs=TOL)  # the 4-rank steps
    two = local(2, "--sharded_ddp", "zero_dp_3", "--resume", str(root / "step-2"))
    assert losses(report) == pytest.approx(losses(two), abs=TOL)  # then a 2-rank run's
    assert time.monotonic() - start < 300
