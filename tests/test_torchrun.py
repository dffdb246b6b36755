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
from typing import Any

import pytest

from shardcompat.launch import free_port

from .test_train import FP32_TOL, ROOT, STEPS, assert_about, assert_same_losses, ratios, train_json


def torchrun(nnodes: int, nproc_per_node: int, *argv: str, timeout: float = 150) -> dict[str, Any]:
    """Start ``nnodes`` torchrun launchers; the JSON report that global rank 0 printed."""
    endpoint = f"127.0.0.1:{free_port()}"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
        "--nproc-per-node", str(nproc_per_node), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
        "--rdzv-id", uuid.uuid4().hex, "--max-restarts", "0",
        "-m", "shardcompat", "train", *argv, "--steps", STEPS, "--json", "--collective-timeout", "60",
    ]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    launchers = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(nnodes)
    ]
    try:
        outputs = [launcher.communicate(timeout=timeout) for launcher in launchers]
    finally:
        for launcher in launchers:
            launcher.kill()
    for launcher, (_, err) in zip(launchers, outputs):
        assert launcher.returncode == 0, err[-3000:]
    printed = [out for out, _ in outputs if out.strip()]
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
