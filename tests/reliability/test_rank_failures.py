"""A rank that dies in the middle of real sharded training (raised, killed, or stalled) stops
the whole job within a bounded time, and the error names that rank.  4 ranks, torch-fsdp2
training through ``shardcompat.prepare``; the dead rank is the first or the last."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch.distributed as dist

import shardcompat
from shardcompat.launch import WorkerFailed, spawn
from tests._parity import OPTIMIZERS, batch, build_model, loss_fn

pytestmark = pytest.mark.reliability

WORLD, FAIL_AT_STEP = 4, 2
COLLECTIVE, GRACE, BOUND = 4.0, 1.0, 60.0


def _train_then_fail(rank: int, world: int, victim: int, how: str) -> None:
    prepared = shardcompat.prepare(build_model("mlp"), OPTIMIZERS["adamw"], "zero_dp_3",
                                   backend="torch-fsdp2")
    for step in range(6):
        if rank == victim and step == FAIL_AT_STEP:
            if how == "raise":
                raise RuntimeError(f"injected failure on rank {rank}")
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "stall":
                time.sleep(300)
        x, y = batch("mlp", rank, step)
        prepared.backward(loss_fn("mlp", prepared(x), y))
        prepared.step()
        prepared.zero_grad()
        dist.barrier()


@pytest.mark.parametrize("victim", [0, WORLD - 1])
@pytest.mark.parametrize("how", ["raise", "kill"])
def test_dead_rank_is_named_within_bound(victim: int, how: str) -> None:
    start = time.monotonic()
    with pytest.raises(WorkerFailed) as info:
        spawn(_train_then_fail, WORLD, (victim, how), timeout=180,
              collective_timeout=COLLECTIVE, grace=GRACE)
    elapsed = time.monotonic() - start
    assert elapsed < BOUND, f"took {elapsed:.1f} s to stop"
    assert info.value.rank == victim, str(info.value)[:2000]
    if how == "kill":
        assert info.value.exitcode == -signal.SIGKILL
    else:
        assert f"injected failure on rank {victim}" in str(info.value)


def test_stalled_rank_fails_the_others_within_collective_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(WorkerFailed) as info:
        spawn(_train_then_fail, WORLD, (WORLD - 1, "stall"), timeout=180,
              collective_timeout=COLLECTIVE, grace=GRACE)
    elapsed = time.monotonic() - start
    assert COLLECTIVE <= elapsed < BOUND, f"took {elapsed:.1f} s"
    assert info.value.rank != WORLD - 1, "the stalled rank raised nothing: a waiting rank reports"
    assert "timeout" in info.value.details.lower() or "timed out" in info.value.details.lower()


def test_checkpoint_refusal_reaches_every_rank(tmp_path: object) -> None:
    """A load refused on rank 0 (damaged file) raises on every rank; none waits forever."""
    results = spawn(_refuse_everywhere, 2, (str(tmp_path),), timeout=180, collective_timeout=30)
    assert results[0].startswith("damaged checkpoint: ") and "sha256 differs" in results[0], results[0]
    assert results[1].startswith("on rank 0: damaged checkpoint: "), results[1]


def _refuse_everywhere(rank: int, world: int, root: str) -> str:
    from pathlib import Path

    from shardcompat.checkpoint import CheckpointError

    prepared = shardcompat.prepare(build_model("mlp"), OPTIMIZERS["sgd"], "zero_dp_3",
                                   backend="torch-fsdp2")
    path = Path(root, "ckpt")
    prepared.save_checkpoint(path)
    if rank == 0:
        data = bytearray((path / "model.pt").read_bytes())
        data[-10] ^= 1
        (path / "model.pt").write_bytes(bytes(data))
    dist.barrier()
    try:
        prepared.load_checkpoint(path)
    except CheckpointError as error:
        return str(error)
    return "(loaded)"


