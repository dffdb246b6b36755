"""torch-zero (DDP, DDP + ZeroRedundancyOptimizer) trains exactly like plain DDP.

2 gloo ranks; every case runs in one process group. Tolerance: FP32_TOL (1e-5 max abs
diff of losses, clip norms and final parameters); mixed precision as stated per test.
"""

from __future__ import annotations

import pytest

from tests._parity import (
    BF16_TOL,
    FP16_TOL,
    FP32_TOL,
    Case,
    assert_matches_ddp,
    case_id,
    ddp_diff,
    matrix,
    run_cases,
)

B = "torch-zero"
PARITY = matrix(["", "simple", "zero_dp_1", "zero_dp_1 bucket_cap_mb=1"], B)
CLIP = [Case(o, B, model="blocks", optimizer="adamw", clip=0.1) for o in ("", "zero_dp_1")]
ACCUMULATE = [Case(o, B, model="mlp", accumulate=2) for o in ("", "zero_dp_1")]
BF16 = [Case("zero_dp_1 mixed_precision=bf16", B, model=m) for m in ("mlp", "blocks")]
FP16 = [Case("zero_dp_1 mixed_precision=fp16", B, model="blocks", optimizer="adamw")]
# The factory's two parameter groups (weight decay and learning rate per group) reach ZeRO.
GROUPS = [Case(o, B, model=m, optimizer="groups") for o in ("simple", "zero_dp_1") for m in ("mlp", "blocks")]
GROUPS.append(Case("zero_dp_1", B, model="blocks", optimizer="groups", clip=0.1, accumulate=2))


@pytest.fixture(scope="module")
def results() -> dict:
    return run_cases(PARITY + CLIP + ACCUMULATE + BF16 + FP16 + GROUPS, timeout=240)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", PARITY + CLIP + ACCUMULATE + GROUPS, ids=case_id)
def test_matches_ddp(results: dict, case: Case) -> None:
    got = assert_matches_ddp(results, case, FP32_TOL)
    assert got.backend == B
    want = "ZeroRedundancyOptimizer" if case.options else "optimizer(ddp.parameters())"
    assert want in got.info["call"]


def test_bucket_cap_reaches_ddp(results: dict) -> None:
    got = results[PARITY[-1]]
    assert "bucket_cap_mb=1.0" in got.info["call"]


@pytest.mark.parametrize("case", BF16, ids=case_id)
def test_bf16_autocast_close_to_fp32(results: dict, case: Case) -> None:
    loss_diff, param_diff = ddp_diff(results, case)
    assert max(loss_diff, param_diff) <= BF16_TOL
    assert max(loss_diff, param_diff) > FP32_TOL, "bf16 gave fp32 numbers: autocast was not applied"
    assert "torch.autocast" in results[case].info["call"]


@pytest.mark.parametrize("case", FP16, ids=case_id)
def test_fp16_uses_grad_scaler_and_learns(results: dict, case: Case) -> None:
    got = results[case]
    loss_diff, _ = ddp_diff(results, case)
    assert got.info["scaler"] == "GradScaler"
    assert got.losses[-1] < got.losses[0]
    # Losses only: a scaler may skip an overflowing step, which moves AdamW's parameters by
    # a whole lr, so final parameters are not a fair fp16-vs-fp32 measure.
    assert FP32_TOL < loss_diff <= FP16_TOL


@pytest.mark.parametrize("case", GROUPS, ids=case_id)
def test_each_rank_optimizes_its_shard_with_the_settings_of_its_group(results: dict, case: Case) -> None:
    """ZeRO's optimizer on each rank has the factory's two groups, with their own settings."""
    groups = results[case].info["groups"]
    assert groups == results[case.reference].info["groups"]
    assert groups == [{"lr": 1e-2, "weight_decay": 0.1}, {"lr": 3e-3, "weight_decay": 0.0}]
