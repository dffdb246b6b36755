"""Mixed precision on the fairscale backends, against fp32 plain DDP.

Tolerances (max abs diff over STEPS steps): bf16 within BF16_TOL (5e-2) of fp32 DDP on losses
and final parameters; fp16 (with the ShardedGradScaler) within FP16_TOL (1e-2) on losses.  Both
must differ from fp32 by more than FP32_TOL (1e-5), or mixed precision was not applied.
"""

from __future__ import annotations

import functools

import pytest

from shardcompat.backends import get
from tests._parity import BF16_TOL, FP16_TOL, FP32_TOL, Case, Result, case_id, ddp_diff, run_cases

SDP, FSDP = get("fairscale-sdp").probe(), get("fairscale-fsdp").probe()
CASES = []
if SDP:
    CASES += [Case("zero_dp_1 mixed_precision=bf16", "fairscale-sdp", "blocks", "adamw"),
              Case("simple mixed_precision=fp16", "fairscale-sdp", "blocks", "adamw")]
if FSDP and FSDP.features.get("cpu_compat"):
    CASES += [Case("zero_dp_3 mixed_precision=fp16", "fairscale-fsdp", "blocks", "adamw")]
    if FSDP.features.get("compute_dtype"):
        CASES += [Case("zero_dp_3 mixed_precision=bf16", "fairscale-fsdp", "blocks", "adamw")]
pytestmark = pytest.mark.skipif(not CASES, reason=f"no fairscale backend usable here: {SDP.reason or FSDP.reason}")


@functools.cache
def _results(nprocs: int) -> dict[Case, Result | str]:
    return run_cases(CASES, nprocs)


# One rank too: unsharded, fairscale FSDP has nothing to reduce-scatter and once left the
# gradients in the compute dtype (the optimizer failed at its first step; seen on CUDA).
@pytest.mark.parametrize("nprocs", [2, 1])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_mixed_precision_applied_and_close_to_fp32(case: Case, nprocs: int) -> None:
    loss_diff, param_diff = ddp_diff(_results(nprocs), case)
    got = _results(nprocs)[case]
    assert isinstance(got, Result)
    assert got.losses[-1] < got.losses[0]
    if "fp16" in str(case.options):
        assert got.info["scaler"] == "ShardedGradScaler"
        assert FP32_TOL < loss_diff <= FP16_TOL, (loss_diff, param_diff)  # losses: a step may be skipped
    else:
        assert FP32_TOL < max(loss_diff, param_diff) <= BF16_TOL, (loss_diff, param_diff)
