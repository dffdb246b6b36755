"""Hybrid sharding (shard within a node, replicate across nodes) on 4 gloo ranks as 2 nodes.

``LOCAL_WORLD_SIZE=2`` is what torchrun sets for 2 nodes of 2 ranks; both FSDP backends
must then build a 2x2 ``(replicate, shard)`` device mesh and still train exactly like
plain DDP over all 4 ranks. Tolerance: FP32_TOL (1e-5).
"""

from __future__ import annotations

import pytest

from tests._parity import FP32_TOL, Case, assert_matches_ddp, case_id, run_cases

CASES = [
    Case(options, backend, model=model, optimizer=optimizer, local_world_size=2)
    for backend in ("torch-fsdp1", "torch-fsdp2")
    for options in ("hybrid_shard", "hybrid_shard_zero2")
    for model, optimizer in (("mlp", "adamw"), ("blocks", "sgd"))
] + [Case("hybrid_shard auto_wrap", b, model="blocks", clip=0.1, local_world_size=2)
     for b in ("torch-fsdp1", "torch-fsdp2")]


@pytest.fixture(scope="module")
def results() -> dict:
    return run_cases(CASES, nprocs=4, timeout=200)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_hybrid_matches_ddp(results: dict, case: Case) -> None:
    got = assert_matches_ddp(results, case, FP32_TOL)
    assert got.backend == case.backend
    assert "init_device_mesh('cpu', (2, 2), mesh_dim_names=('replicate', 'shard'))" in got.info["call"]
    if case.backend == "torch-fsdp1":
        strategy = "_HYBRID_SHARD_ZERO2" if "zero2" in case.options else "HYBRID_SHARD"
        assert f"ShardingStrategy.{strategy}," in got.info["call"]
    if "auto_wrap" in case.options:
        assert got.info["units"] == 3
