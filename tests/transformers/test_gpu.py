"""Mixed precision on CUDA: ``--fp16`` runs through the backend's grad scaler, ``--bf16`` and offload on the GPU.

One rank under NCCL (one GPU is enough to exercise the CUDA paths: placement, pinned offload,
the scaler Accelerate's backward and optimizer step use, its state in the checkpoint).  The
reference is the release's own Trainer with the same precision.  fp16 parameters (FSDP's
mixed precision) and fp16 autocast (Accelerate's) round differently: FP16_TOL.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

from shardcompat.launch import spawn
from tests.transformers._runs import Case, Outcome, run_cases

pytestmark = pytest.mark.gpu
FP16_TOL = 5e-2
CASES = [
    Case("ddp-gpt2-fp16", fp16=True),
    Case("simple-fp16", sharded_ddp="simple", fp16=True),
    Case("zero_dp_3-fp16", sharded_ddp="zero_dp_3 auto_wrap", fp16=True, save_steps=2),
    Case("resumed-fp16", sharded_ddp="zero_dp_3 auto_wrap", fp16=True, resume="zero_dp_3-fp16"),
    Case("ddp-gpt2-bf16", bf16=True),
    Case("zero_dp_3-offload-bf16", sharded_ddp="zero_dp_3 offload", bf16=True),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("gpu")
    results: dict[str, Outcome] = spawn(run_cases, 1, (CASES, str(root)), backend="nccl", timeout=900)[0]
    for name, outcome in results.items():
        assert outcome.error is None, f"{name}:\n{outcome.error}"
    return results


def _close(a: list[float], b: list[float], tol: float) -> bool:
    return len(a) == len(b) > 0 and max(abs(x - y) for x, y in zip(a, b)) <= tol


@pytest.mark.timeout(1000)
@pytest.mark.parametrize(("name", "scaler"), [("simple-fp16", "GradScaler"), ("zero_dp_3-fp16", "ShardedGradScaler")])
def test_fp16_scales_through_the_backends_scaler(runs: dict[str, Any], name: str, scaler: str) -> None:
    got, want = runs[name], runs["ddp-gpt2-fp16"]
    assert got.scaler == f"{scaler} (the backend’s)"
    assert _close(got.losses, want.losses, FP16_TOL), (got.losses, want.losses)
    assert all(x == x for x in got.losses), "a NaN loss: the scaler did not unscale"


@pytest.mark.timeout(1000)
def test_fp16_resumes_with_the_same_losses(runs: dict[str, Any]) -> None:
    resumed, whole = runs["resumed-fp16"], runs["zero_dp_3-fp16"]  # CUDA's atomics: not bit-exact
    assert _close(resumed.losses, whole.losses[-len(resumed.losses):], 1e-3), (resumed.losses, whole.losses)


@pytest.mark.timeout(1000)
def test_bf16_with_offload_on_the_gpu(runs: dict[str, Any]) -> None:
    got, want = runs["zero_dp_3-offload-bf16"], runs["ddp-gpt2-bf16"]
    assert "CPUOffloadPolicy(pin_memory=True)" in got.call and "bfloat16" in got.call, got.call
    assert _close(got.losses, want.losses, FP16_TOL), (got.losses, want.losses)
