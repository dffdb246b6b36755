"""``Prepared.local_tensors()`` on FSDP1/FSDP2 yields every storage the rank really holds.

2 gloo ranks; the BlockModel's sizes shard with a few elements of padding, hence PAD_TOL.
Bytes are counted by ``shardcompat.memory.count_state`` (unique storages, freed ones 0)
after forward, after backward and after the optimizer step of the second step, in units of
the full model's fp32 parameter bytes (4Ψ).
"""

from __future__ import annotations

from typing import Any

import pytest

from shardcompat.launch import spawn
from tests._parity import state_phases

PAD_TOL = 0.02
PHASES = ("forward", "backward", "step")
CASES = [
    ("torch-fsdp1", "zero_dp_2"),
    ("torch-fsdp2", "zero_dp_2"),
    ("torch-fsdp2", "zero_dp_3"),
    ("torch-fsdp1", "zero_dp_3"),
]


def _phases(rank: int, world: int) -> dict[tuple[str, str], dict[str, dict[str, float]]]:
    return {(backend, options): state_phases(backend, options, rank) for backend, options in CASES}


@pytest.fixture(scope="module")
def phases() -> list[dict[tuple[str, str], dict[str, dict[str, float]]]]:
    return spawn(_phases, 2, timeout=120)


def _about(value: float, expected: float) -> bool:
    return abs(value - expected) <= PAD_TOL * max(expected, 1.0)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["torch-fsdp1", "torch-fsdp2"])
def test_zero_dp_2_holds_its_full_parameters_and_the_shard_after_forward(phases: list[Any], backend: str) -> None:
    # SHARD_GRAD_OP / reshard_after_forward=False: between forward and backward the rank holds
    # the all-gathered parameters (1 × 4Ψ) and still its own shard (1/2): 1.5 in all.
    for rank in phases:
        got = rank[(backend, "zero_dp_2")]
        assert _about(got["forward"]["params"], 1.5), got
        assert _about(got["backward"]["params"], 0.5) and _about(got["backward"]["grads"], 0.5), got
        assert _about(got["step"]["optim"], 1.0), got  # Adam's two moments, half each
        # the ZeRO-2 model, 4Ψ + 12Ψ/N, is the largest phase: 1 + 3/2 = 2.5 (in 4Ψ units)
        assert _about(max(sum(p.values()) for p in got.values()), 2.5), got


@pytest.mark.timeout(150)
def test_fsdp2_zero_dp_3_holds_only_shards(phases: list[Any]) -> None:
    for rank in phases:
        got = rank[("torch-fsdp2", "zero_dp_3")]
        assert all(_about(p["params"], 0.5) for p in got.values()), got
        assert _about(max(sum(p.values()) for p in got.values()), 2.0), got


@pytest.mark.timeout(150)
def test_fsdp1_root_unit_keeps_its_full_parameters_after_forward(phases: list[Any]) -> None:
    # torch's FSDP1 does not free the root unit's unsharded parameters after forward, even
    # under FULL_SHARD (_runtime_utils._post_forward_reshard): they are really held.
    for rank in phases:
        got = rank[("torch-fsdp1", "zero_dp_3")]
        assert _about(got["forward"]["params"], 1.5), got
        assert _about(got["backward"]["params"], 0.5), got
