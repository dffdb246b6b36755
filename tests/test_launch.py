"""The local launcher: the environment each rank sees (failures: tests/test_launch_failures.py)."""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist
from torch.distributed import constants

from shardcompat.launch import default_collective_timeout, spawn


def _collective_limit() -> float:
    """The seconds this rank's process group allows one collective."""
    return float(dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout.total_seconds())


def _environment(rank: int, world_size: int) -> dict[str, object]:
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "EXTRA")
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "limit": _collective_limit(),
            **{k: os.environ.get(k) for k in keys}}


def test_each_rank_sees_its_place_and_the_callers_environment() -> None:
    results = spawn(_environment, 4, env={"LOCAL_WORLD_SIZE": "2", "EXTRA": "x"}, timeout=120)
    # Left out, the collective limit is torch's own default for the backend (30 min for gloo).
    assert {r["limit"] for r in results} == {constants.default_pg_timeout.total_seconds()}
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert [r["LOCAL_RANK"] for r in results] == ["0", "1", "0", "1"]
    assert {r["LOCAL_WORLD_SIZE"] for r in results} == {"2"}
    assert {r["WORLD_SIZE"] for r in results} == {"4"} and {r["EXTRA"] for r in results} == {"x"}
    assert {r["MASTER_ADDR"] for r in results} == {"127.0.0.1"}


def _inner(rank: int, world_size: int) -> tuple[int, int, int]:
    return rank, world_size, os.getpid()


def _nested(rank: int, world_size: int) -> list[tuple[int, int, int]]:
    # Already a rank of a job (as under torchrun): spawn must run here, not start 3 more ranks.
    inner: list[tuple[int, int, int]] = spawn(_inner, 3)
    return inner


def test_spawn_inside_a_launched_rank_runs_there_and_returns_every_ranks_result() -> None:
    outer = spawn(_nested, 2, timeout=120)
    assert outer[0] == outer[1], "every rank gets the same list of all ranks' results"
    assert [(rank, world) for rank, world, _ in outer[0]] == [(0, 2), (1, 2)]
    assert len({pid for _, _, pid in outer[0]}) == 2 and os.getpid() not in {pid for _, _, pid in outer[0]}


def test_a_long_job_is_not_stopped_by_default() -> None:
    """No whole-job limit unless asked for, and torch's collective limit: a real run is not cut short."""
    defaults = {name: p.default for name, p in inspect.signature(spawn).parameters.items()}
    assert defaults["timeout"] is None and defaults["collective_timeout"] is None
    assert default_collective_timeout("gloo") == constants.default_pg_timeout.total_seconds() == 1800
    nccl = getattr(constants, "default_pg_nccl_timeout", None)
    expected = nccl.total_seconds() if nccl is not None else 1800
    assert default_collective_timeout("nccl") == expected


@pytest.mark.parametrize("limits", [{"timeout": -1}, {"timeout": 0}, {"collective_timeout": float("nan")},
                                    {"collective_timeout": float("inf")}, {"timeout": "600"}])
def test_a_limit_that_is_not_positive_seconds_is_refused_before_any_rank_starts(limits: dict[str, object]) -> None:
    name = next(iter(limits))
    with pytest.raises(ValueError, match=rf"spawn\({name}=.*positive number of seconds, or None"):
        spawn(_inner, 2, **limits)  # type: ignore[arg-type]


def _ctrl_c_through_another_thread(inside: Callable[[], None]) -> list[str]:
    """Run ``inside`` in :func:`deferred_ctrl_c` while SIGINT reaches a thread other than the main
    one (as the kernel may hand a terminal's Ctrl-C to any of torch's threads); what happened when."""
    import signal
    import threading

    from shardcompat.launch import deferred_ctrl_c

    seen: list[str] = []
    ready, done = threading.Event(), threading.Event()
    other = threading.Thread(target=lambda: (ready.set(), done.wait(10)), daemon=True)
    other.start()  # started before the block: SIGINT is not blocked in it
    ready.wait(10)
    try:
        with deferred_ctrl_c():
            assert other.ident is not None
            signal.pthread_kill(other.ident, signal.SIGINT)
            try:
                inside()
                seen.append("block ended")
            except KeyboardInterrupt:
                seen.append("interrupted inside the block")
    except KeyboardInterrupt:
        seen.append("interrupted after the block")
    finally:
        done.set()
        other.join(10)
    return seen


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_kill"), reason="needs pthread_kill (POSIX)")
def test_a_ctrl_c_delivered_to_another_thread_waits_for_the_end_of_the_block() -> None:
    """A rank being started must not be left running unknown to the job: the Ctrl-C comes after."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, even under nohup
    try:
        seen = _ctrl_c_through_another_thread(lambda: time.sleep(0.3))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == ["block ended", "interrupted after the block"]


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_kill"), reason="needs pthread_kill (POSIX)")
def test_an_ignored_ctrl_c_stays_ignored() -> None:
    """Started with SIGINT ignored (``nohup``, a background job): the hold does not turn it on."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert _ctrl_c_through_another_thread(lambda: time.sleep(0.3)) == ["block ended"]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
