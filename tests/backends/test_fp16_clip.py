"""fp16 with clipping: ``clip_grad_norm_`` sees the true gradients on every backend.

The grad scaler multiplies the loss (by 65536 at first), so clipping before unscaling
returned 65536 times the norm and clipped to max_norm/65536: training silently went wrong
(0.03 off fp32 DDP's parameters where unclipped fp16 is 0.001).  The norms must match fp32
plain DDP's within FP16_NORM_TOL (relative) and losses within FP16_TOL.
"""

from __future__ import annotations

import functools

import pytest

from shardcompat.backends import get
from tests._parity import FP16_TOL, Case, Result, case_id, ddp_diff, run_cases

FP16_NORM_TOL = 2e-2  # relative: fp16 activations change the gradients by about 1e-3
CASES = [
    Case("zero_dp_1 mixed_precision=fp16", "torch-zero", "blocks", "adamw", clip=0.5),
    Case("zero_dp_3 auto_wrap mixed_precision=fp16", "torch-fsdp2", "blocks", "adamw", clip=0.5),
    Case("zero_dp_2 mixed_precision=fp16", "torch-fsdp1", "blocks", "adamw", clip=0.5),
]
FAIRSCALE = [Case("simple mixed_precision=fp16", "fairscale-sdp", "blocks", "adamw", clip=0.5)]
if (fsdp := get("fairscale-fsdp").probe()) and fsdp.features.get("cpu_compat"):
    FAIRSCALE.append(Case("zero_dp_3 auto_wrap mixed_precision=fp16", "fairscale-fsdp", "blocks", "adamw", clip=0.5))
CASES += [c for c in FAIRSCALE if get(c.backend).probe()]


@functools.cache
def _results() -> dict[Case, Result | str]:
    return run_cases(CASES, 2, timeout=280)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_fp16_clips_the_true_gradients(case: Case) -> None:
    loss_diff, _ = ddp_diff(_results(), case)
    got, want = _results()[case], _results()[case.reference]
    assert isinstance(got, Result) and isinstance(want, Result)
    assert got.info["scaler"] != "NoneType"
    assert max(want.info["norms"]) > case.clip, "clipping never engaged: the test would prove nothing"
    for mine, ddp in zip(got.info["norms"], want.info["norms"]):
        assert abs(mine - ddp) <= FP16_NORM_TOL * ddp, (got.info["norms"], want.info["norms"])
    assert loss_diff <= FP16_TOL, (got.losses, want.losses)
