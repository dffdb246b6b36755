"""The same parity checks on CUDA with NCCL (marked ``gpu``: they skip without CUDA).

World size 1 always, 2 where two GPUs exist. FSDP1's CPUOffload needs an accelerator and
is only tested here. Tolerance: FP32_TOL (1e-5) for fp32 cases.
"""

from __future__ import annotations

import pytest
import torch

from tests._parity import FP32_TOL, Case, assert_matches_ddp, case_id, run_cases

CASES = [
    Case("", "torch-zero", model="blocks", optimizer="adamw", clip=0.1),
    Case("zero_dp_1", "torch-zero", model="blocks", optimizer="adamw", clip=0.1),  # NCCL: the owner hook
    Case("zero_dp_3 auto_wrap", "torch-fsdp1", model="blocks", optimizer="adamw", clip=0.1),
    Case("zero_dp_3 offload", "torch-fsdp1", model="blocks", optimizer="adamw"),
    Case("zero_dp_2 offload", "torch-fsdp1", model="mlp", optimizer="sgd", accumulate=2),
    Case("zero_dp_3 auto_wrap", "torch-fsdp2", model="blocks", optimizer="adamw", clip=0.1),
    Case("zero_dp_3 offload", "torch-fsdp2", model="blocks", optimizer="adamw"),
]


def _world_sizes() -> list[int]:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [1, 2] if count >= 2 else [1]


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("nprocs", _world_sizes())
def test_nccl_matches_ddp(nprocs: int) -> None:
    results = run_cases(CASES, nprocs=nprocs, timeout=240, backend="nccl")
    failures = []
    for case in CASES:
        try:
            got = assert_matches_ddp(results, case, FP32_TOL)
            assert got.backend == case.backend
            if case.backend == "torch-fsdp1" and "offload" in case.options:
                assert "CPUOffload(offload_params=True)" in got.info["call"]
            if case.backend == "torch-fsdp2" and "offload" in case.options:
                assert "CPUOffloadPolicy(pin_memory=True)" in got.info["call"]
        except AssertionError as error:
            failures.append(f"{case_id(case)}: {error}")
    assert not failures, "\n".join(failures)
