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
