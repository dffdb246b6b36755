"""The local launcher: the environment each rank sees (failures: tests/test_failures.py)."""

from __future__ import annotations

import os

import torch.distributed as dist

from shardcompat.launch import spawn


def _environment(rank: int, world_size: int) -> dict[str, object]:
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "EXTRA")
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), **{k: os.environ.get(k) for k in keys}}


def test_each_rank_sees_its_place_and_the_callers_environment() -> None:
    results = spawn(_environment, 4, env={"LOCAL_WORLD_SIZE": "2", "EXTRA": "x"})
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
    outer = spawn(_nested, 2)
    assert outer[0] == outer[1], "every rank gets the same list of all ranks' results"
    assert [(rank, world) for rank, world, _ in outer[0]] == [(0, 2), (1, 2)]
    assert len({pid for _, _, pid in outer[0]}) == 2 and os.getpid() not in {pid for _, _, pid in outer[0]}
