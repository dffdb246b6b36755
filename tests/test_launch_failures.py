"""A dead or stalled rank stops the job within a bounded time and is named (the launcher's
failures; what prepare refuses: tests/test_failures.py).

They run once, in the default suite: they do not touch fairscale, so the fairscale sessions
(noxfile.py's FAIRSCALE_TESTS) leave them out.

Time bounds: ``COLLECTIVE`` bounds every collective, ``GRACE`` is how long the others get to
notice a failure before they are killed; a job must end within ``BOUND`` seconds of its start
(process start-up on a busy 2-core machine included).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist

from shardcompat.launch import WorkerFailed, WorkerTimeout, spawn

COLLECTIVE, GRACE, BOUND = 3.0, 1.0, 30.0


def _raises(rank: int, world: int) -> None:
    if rank == 1:
        raise RuntimeError("boom on rank 1")
    dist.barrier()  # rank 0 waits for a peer that will never come


def _killed(rank: int, world: int) -> None:
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def _stalls(rank: int, world: int) -> None:
    if rank == 1:
        time.sleep(120)  # alive but not participating
    dist.all_reduce(torch.ones(1))


def _sleeps(rank: int, world: int) -> None:
    time.sleep(120)


def _run(fn: Any, **kwargs: Any) -> tuple[BaseException, float]:
    start = time.monotonic()
    with pytest.raises((WorkerFailed, WorkerTimeout)) as info:
        spawn(fn, 2, collective_timeout=COLLECTIVE, grace=GRACE, **{"timeout": 120, **kwargs})
    elapsed = time.monotonic() - start
    assert elapsed < BOUND, f"the job took {elapsed:.1f} s to stop (bound {BOUND} s)"
    return info.value, elapsed


@pytest.mark.slow
def test_rank_that_raises_is_named() -> None:
    error, _ = _run(_raises)
    assert isinstance(error, WorkerFailed) and error.rank == 1, error
    assert "boom on rank 1" in str(error)


@pytest.mark.slow
def test_killed_rank_is_named() -> None:
    error, _ = _run(_killed)
    assert isinstance(error, WorkerFailed) and error.rank == 1, error
    assert error.exitcode == -signal.SIGKILL
    assert "the process was killed" in str(error)


@pytest.mark.slow
def test_stalled_rank_times_out_the_collective() -> None:
    """Rank 1 stops taking part; rank 0's all_reduce fails within the collective timeout."""
    error, elapsed = _run(_stalls)
    assert isinstance(error, WorkerFailed), error
    assert error.rank == 0, "the rank whose collective timed out is the one reported"
    assert error.stalled == (1,) and "rank(s) 1 were still running" in str(error), str(error)
    assert "timed out" in error.details.lower() or "timeout" in error.details.lower(), error.details
    assert elapsed >= COLLECTIVE, "it failed before the collective timeout: not the case under test"
    assert f"the collective limit is {COLLECTIVE:g} s; raise it with spawn(collective_timeout=...)" in str(error)


@pytest.mark.slow
def test_job_timeout_stops_every_rank() -> None:
    error, _ = _run(_sleeps, timeout=3)
    assert isinstance(error, WorkerTimeout), error
    assert "3 s limit" in str(error) and "job limit (spawn(timeout=...)" in str(error), str(error)
