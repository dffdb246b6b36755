"""fp16 and bf16 on the native torch backends with CUDA and NCCL.

fp16 needs a grad scaler that sees every rank's infs: torch's ShardedGradScaler on FSDP1/FSDP2
(its found_inf all-reduced over NCCL), ``torch.amp.GradScaler("cuda")`` on DDP (gradients are
whole there).  On CPU these run through autocast on the CPU; only here do the CUDA kernels,
the scaler's CUDA path and NCCL's low-precision reduce-scatter run.  Tolerances against fp32
plain DDP: FP16_TOL (losses; a step may be skipped), BF16_TOL; both must differ from fp32.
"""

from __future__ import annotations

import functools

import pytest

from tests._parity import BF16_TOL, FP16_TOL, FP32_TOL, Case, Result, case_id, ddp_diff, run_cases
from tests.gpu import world_sizes

pytestmark = pytest.mark.gpu

SCALERS = {"torch-zero": "GradScaler", "torch-fsdp1": "ShardedGradScaler", "torch-fsdp2": "ShardedGradScaler"}
CASES = [
    Case("zero_dp_1 mixed_precision=fp16", "torch-zero", "blocks", "adamw", clip=0.5),
    Case("mixed_precision=bf16", "torch-zero", "blocks", "adamw"),
    Case("zero_dp_3 auto_wrap mixed_precision=fp16", "torch-fsdp1", "blocks", "adamw", clip=0.5),
    Case("zero_dp_2 mixed_precision=bf16", "torch-fsdp1", "blocks", "adamw"),
    Case("zero_dp_3 auto_wrap mixed_precision=fp16", "torch-fsdp2", "blocks", "adamw", clip=0.5),
    Case("zero_dp_3 offload mixed_precision=bf16", "torch-fsdp2", "blocks", "adamw"),
]


@functools.cache
def _results(nprocs: int) -> dict[Case, Result | str]:
    return run_cases(CASES, nprocs=nprocs, timeout=280, backend="nccl")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nprocs", world_sizes())
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_mixed_precision_on_cuda(case: Case, nprocs: int) -> None:
    loss_diff, param_diff = ddp_diff(_results(nprocs), case)
    got = _results(nprocs)[case]
    assert isinstance(got, Result) and got.backend == case.backend
    assert got.losses[-1] < got.losses[0], got.losses
    if "fp16" in str(case.options):
        assert got.info["scaler"] == SCALERS[case.backend]
        assert FP32_TOL < loss_diff <= FP16_TOL, (loss_diff, param_diff)
    else:
        assert got.info["scaler"] == "NoneType"
        assert FP32_TOL < max(loss_diff, param_diff) <= BF16_TOL, (loss_diff, param_diff)
