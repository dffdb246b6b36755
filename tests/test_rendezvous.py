"""The attempt prefix that keeps a torchrun restart from meeting the dead attempt's keys.

The store here is an in-process ``HashStore`` standing in for the agent's shared TCPStore
(same ``add``/``compare_set`` API); the real store under real restarts is exercised by
tests/test_resume.py and tests/reliability/test_restarts.py.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch.distributed as dist

from shardcompat import _rendezvous
from shardcompat._rendezvous import agent_store_outlives_attempts, attempt_prefix


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads in one process answer in microseconds; a shorter echo wait keeps the file fast."""
    monkeypatch.setattr(_rendezvous, "_STALE_AFTER", 0.2)


def attempt(store: dist.Store, world: int, ranks: range | None = None) -> set[str]:
    """The prefixes the ranks of one attempt arrive at, joining concurrently, rank 0 last."""
    found: list[str] = []

    def join(rank: int) -> None:
        found.append(attempt_prefix(store, rank, world, timeout=20))

    threads = [threading.Thread(target=join, args=(rank,)) for rank in reversed(ranks or range(world))]
    for thread in threads:
        thread.start()
        time.sleep(0.01)
    for thread in threads:
        thread.join(30)
    assert len(found) == len(ranks or range(world))
    return set(found)


def test_every_rank_of_an_attempt_agrees_and_each_restart_gets_a_fresh_prefix() -> None:
    store = dist.HashStore()
    seen = []
    for _ in range(5):  # five restarts of a 4-rank group
        (prefix,) = attempt(store, 4)
        seen.append(prefix)
    assert len(set(seen)) == 5, seen


def test_a_shrunk_and_regrown_world_never_reuses_an_earlier_attempts_prefix() -> None:
    store = dist.HashStore()
    sizes = [4, 2, 4, 2, 2, 4]  # elastic: a node lost, back, lost ...
    prefixes = [attempt(store, world) for world in sizes]
    assert all(len(p) == 1 for p in prefixes), prefixes
    flat = [next(iter(p)) for p in prefixes]
    assert len(set(flat)) == len(flat), flat


def test_ranks_that_read_the_dead_attempts_generation_wait_for_this_attempts_rank_0() -> None:
    """An attempt died half-way (rank 0 published, 2 of 4 ranks registered); in the next one
    the other ranks arrive first and read that stale generation: they must not settle there."""
    store = dist.HashStore()
    (first,) = attempt(store, 4)
    def rank0_then_dies() -> None:
        with pytest.raises(TimeoutError):
            attempt_prefix(store, 0, 4, timeout=0.5)

    stale = threading.Thread(target=rank0_then_dies)
    stale.start()  # a rank 0 that published a generation, then died before the others came
    time.sleep(0.1)
    stale.join()
    (fresh,) = attempt(store, 4)  # ranks 3, 2, 1 start before rank 0, reading the dead generation
    assert fresh not in (first, "shardcompat/attempt/2"), fresh


def test_a_rank_whose_rank_0_never_comes_times_out_instead_of_hanging() -> None:
    store = dist.HashStore()
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="rank 1"):
        attempt_prefix(store, 1, 2, timeout=1.5)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(("value", "expected"), [("True", True), ("False", False), (None, False)])
def test_the_prefix_is_used_only_where_torchrun_shares_its_store(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool
) -> None:
    if value is None:
        monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    else:
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", value)
    assert agent_store_outlives_attempts() is expected
