"""``shardcompat train`` under torchrun: two launcher "nodes" on localhost, c10d rendezvous.

Data and initialisation depend only on (seed, global rank, step), so a job spread over two
nodes must reproduce a single-node job with as many ranks, loss for loss.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from shardcompat.launch import free_port

from .test_train import (
    FP32_TOL,
    ROOT,
    STEPS,
    assert_about,
    assert_same_losses,
    injected,
    processes_with,
    ratios,
    train_json,
)


def launchers(nnodes: int, nproc_per_node: int, *argv: str, timeout: float = 150,
              env: dict[str, str] | None = None) -> list[tuple[int, str, str]]:
    """Start ``nnodes`` torchrun launchers of ``shardcompat train``; each one's (exit code, stdout, stderr)."""
    endpoint = f"127.0.0.1:{free_port()}"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
        "--nproc-per-node", str(nproc_per_node), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
        "--rdzv-id", uuid.uuid4().hex, "--max-restarts", "0",
        "-m", "shardcompat", "train", "--steps", STEPS, *argv, "--json", "--collective-timeout", "60",
    ]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **(env or {})}
    started = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(nnodes)
    ]
    try:
        outputs = [launcher.communicate(timeout=timeout) for launcher in started]
    finally:
        for launcher in started:
            launcher.kill()
    return [(launcher.returncode, out, err) for launcher, (out, err) in zip(started, outputs)]


def torchrun(nnodes: int, nproc_per_node: int, *argv: str, timeout: float = 150) -> dict[str, Any]:
    """Start ``nnodes`` torchrun launchers; the JSON report that global rank 0 printed."""
    outputs = launchers(nnodes, nproc_per_node, *argv, timeout=timeout)
    for code, _, err in outputs:
        assert code == 0, err[-3000:]
    printed = [out for _, out, _ in outputs if out.strip()]
    assert len(printed) == 1, "exactly one launcher runs global rank 0, which alone prints"
    report: dict[str, Any] = json.loads(printed[0])
    return report


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_nodes_train_like_one_node_and_compare_ddp_works_under_torchrun() -> None:
    report = torchrun(2, 1, "--sharded_ddp", "zero_dp_3", "--compare-ddp")
    (run,), reference = report["runs"], report["reference"]
    assert report["world_size"] == 2 and [r["rank"] for r in run["ranks"]] == [0, 1]
    (single,) = train_json("--sharded_ddp", "zero_dp_3", "--nproc", "2")["runs"]
    assert_same_losses(run, single)
    assert report["max_loss_diff"] <= FP32_TOL
    assert_about(ratios(run, reference, "total"), 0.5)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_hybrid_shard_on_two_nodes_of_two_shards_within_each_node() -> None:
    report = torchrun(2, 2, "--sharded_ddp", "hybrid_shard")
    (run,) = report["runs"]
    assert report["world_size"] == 4
    (single_node_ddp,) = train_json("--nproc", "4")["runs"]
    assert_same_losses(run, single_node_ddp)
    # Sharded over the node's 2 ranks (LOCAL_WORLD_SIZE), replicated across nodes: 1/2, not 1/4.
    assert_about(ratios(run, single_node_ddp, "total"), 0.5)


# A model big enough that what one run leaves resident (about 90 MiB here) stands out of the
# noise between two runs of the same row (about 1%).
_SIZED = ("--dim", "256", "--layers", "4", "--vocab", "2048", "--seq-len", "64")
RSS_TOL = 0.05  # relative: the same row's peak RSS in two separate jobs


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_under_torchrun_each_row_peak_rss_is_its_own() -> None:
    """With several runs, every torchrun worker trains each in a fresh child: the DDP row
    after a sharded one peaks as DDP alone in fresh processes (``shardcompat train`` started
    here).  Trained in the worker itself it peaked 20-26% higher (546/577 MiB against
    412/409), the clear_refs reset notwithstanding."""
    both = torchrun(1, 2, "--sharded_ddp", "zero_dp_3", "--compare-ddp", *_SIZED)
    (alone,) = train_json(*_SIZED, "--nproc", "2")["runs"]
    after = [r["peak_rss"] for r in both["reference"]["ranks"]]
    own = [r["peak_rss"] for r in alone["ranks"]]
    assert all(abs(a / b - 1) <= RSS_TOL for a, b in zip(after, own)), (after, own)
    assert both["peak_rss_measured"].endswith("of a fresh child process of each torchrun worker per run")
    single = torchrun(1, 2, *_SIZED)  # one run trains in the worker itself, and says so
    assert "of the torchrun worker itself" in single["peak_rss_measured"]


_FAULT = """
import os
import shardcompat.train as train

real = train.train_rank

def train_rank(rank, world_size, config):
    if rank == 1 and config.label == "ddp":  # the second row, in its own child of rank 1
        raise RuntimeError("injected fault on rank 1")
    return real(rank, world_size, config)

train.train_rank = train_rank
"""


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds leftover ranks through /proc")
def test_a_row_failing_in_its_child_fails_the_torchrun_job_with_its_traceback(tmp_path: Path) -> None:
    marker, env = injected(tmp_path, _FAULT)
    ((code, out, err),) = launchers(1, 2, "--sharded_ddp", "zero_dp_2", "--compare-ddp", env=env)
    assert code != 0 and out == ""
    assert "rank 1 failed" in err and "injected fault on rank 1" in err and "Traceback" in err
    assert processes_with(marker) == []
