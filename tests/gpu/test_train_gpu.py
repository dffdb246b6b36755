"""``shardcompat train --device cuda``: its report on a GPU, one run per backend.

What the CPU suite cannot see: the state the report counts lies in device memory (or, with
offload, in host memory), ``peak_device`` is ``torch.cuda.max_memory_allocated`` and covers it,
and the losses equal plain DDP's on the same device (within 1e-4: CUDA kernels differ).
"""

from __future__ import annotations

from typing import Any

import pytest

from shardcompat.backends import get
from shardcompat.train.models import ModelConfig, build_model
from tests.test_train import train_json

pytestmark = pytest.mark.gpu
RUNS = [
    ("zero_dp_1", "torch-zero", False),
    ("zero_dp_3 auto_wrap", "torch-fsdp1", False),
    ("zero_dp_3 offload", "torch-fsdp1", True),
    ("zero_dp_3 auto_wrap", "torch-fsdp2", False),
    ("zero_dp_3 offload", "torch-fsdp2", True),
    ("simple", "fairscale-sdp", False),
    ("zero_dp_3 auto_wrap", "fairscale-fsdp", False),
    ("zero_dp_3 auto_wrap offload", "fairscale-fsdp", True),
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("options", "backend", "offload"), RUNS, ids=[f"{b}-{o}" for o, b, _ in RUNS])
def test_the_report_on_cuda(options: str, backend: str, offload: bool) -> None:
    probe = get(backend).probe()
    if not probe:
        pytest.skip(f"{backend} unusable here: {probe.reason}")
    report: dict[str, Any] = train_json("--sharded_ddp", options, "--backend", backend, "--device", "cuda",
                                        "--nproc", "1", "--compare-ddp")
    (run,), reference = report["runs"], report["reference"]
    # torch keeps Adam's 0-d step counters on the host unless capturable or fused (4 bytes a
    # parameter tensor, fewer once flattened): the only state allowed there without offload.
    step_counters = 4 * len(list(build_model(ModelConfig(), 0).parameters()))
    assert report["device"] == "cuda" and run["backend"] == backend
    assert report["max_loss_diff"] <= 1e-4, (run["losses"], reference["losses"])
    for rank in run["ranks"]:
        on_device = rank["total"] - rank["cpu"]
        assert rank["peak_device"] is not None and rank["peak_device"] >= on_device
        if offload:
            assert rank["cpu"] >= rank["optim"] > 0, rank  # the shards and their Adam state live in host memory
        else:
            assert rank["cpu"] <= step_counters, rank  # nothing else of the state on the host
