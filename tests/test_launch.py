"""The local launcher: results per rank, the environment each rank sees, failures named."""

from __future__ import annotations

import os
import time

import pytest
import torch.distributed as dist

from shardcompat.launch import WorkerFailed, WorkerTimeout, spawn


def _environment(rank: int, world_size: int) -> dict[str, object]:
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "EXTRA")
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), **{k: os.environ.get(k) for k in keys}}


def _raise_on_one(rank: int, world_size: int) -> None:
    if rank == 1:
        raise RuntimeError("rank one exploded")
    dist.barrier()


def _killed(rank: int, world_size: int) -> None:
    if rank == 0:
        os.kill(os.getpid(), 9)
    dist.barrier()


def _sleep(rank: int, world_size: int) -> None:
    time.sleep(60)


def test_each_rank_sees_its_place_and_the_callers_environment() -> None:
    results = spawn(_environment, 4, env={"LOCAL_WORLD_SIZE": "2", "EXTRA": "x"})
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert [r["LOCAL_RANK"] for r in results] == ["0", "1", "0", "1"]
    assert {r["LOCAL_WORLD_SIZE"] for r in results} == {"2"}
    assert {r["WORLD_SIZE"] for r in results} == {"4"} and {r["EXTRA"] for r in results} == {"x"}
    assert {r["MASTER_ADDR"] for r in results} == {"127.0.0.1"}


def test_an_exception_names_its_rank_and_traceback() -> None:
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="rank 1 failed") as caught:
        spawn(_raise_on_one, 2, collective_timeout=20)
    assert caught.value.rank == 1 and "rank one exploded" in caught.value.details
    assert time.monotonic() - start < 20


def test_a_killed_rank_is_named_not_the_peer_that_saw_it_go() -> None:
    with pytest.raises(WorkerFailed, match="rank 0 failed with exit code -9") as caught:
        spawn(_killed, 2, collective_timeout=20)
    assert caught.value.rank == 0 and "killed" in caught.value.details


def test_the_job_time_limit_stops_every_rank() -> None:
    start = time.monotonic()
    with pytest.raises(WorkerTimeout, match="limit"):
        spawn(_sleep, 2, timeout=3)
    assert time.monotonic() - start < 15
