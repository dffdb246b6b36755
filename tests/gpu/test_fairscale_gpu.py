"""fairscale's backends on CUDA with NCCL: real streams, pinned host memory, the sharded grad scaler.

On CPU fairscale FSDP only runs through shardcompat's compatibility layer (no-op streams, no
pinning); here none of it may be active.  Tolerances as the CPU tests: FP32_TOL for fp32
against plain DDP, FP16_TOL/BF16_TOL for mixed precision (which must differ from fp32).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from shardcompat.backends import get
from shardcompat.launch import spawn
from tests._parity import (
    BF16_TOL,
    FP16_TOL,
    FP32_TOL,
    Case,
    Result,
    assert_matches_ddp,
    case_id,
    ddp_diff,
    run_cases,
)
from tests.gpu import world_sizes

SDP, FSDP = get("fairscale-sdp").probe(), get("fairscale-fsdp").probe()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not (SDP or FSDP), reason=f"fairscale unusable here: {FSDP.reason}")]

FP32 = []
MIXED = []
if FSDP:
    FP32 += [Case(o, "fairscale-fsdp", "blocks", "adamw") for o in ("zero_dp_2", "zero_dp_3", "zero_dp_3 auto_wrap")]
    # Offloaded gradients live in pinned host memory: clipping must still reduce over NCCL.
    FP32 += [Case("zero_dp_3 auto_wrap offload", "fairscale-fsdp", "blocks", "adamw", clip=0.05),
             Case("zero_dp_2 offload", "fairscale-fsdp", "mlp", "sgd", accumulate=2)]
    MIXED += [Case("zero_dp_3 auto_wrap mixed_precision=fp16", "fairscale-fsdp", "blocks", "adamw")]
    if FSDP.features.get("compute_dtype"):
        MIXED += [Case("zero_dp_3 auto_wrap mixed_precision=bf16", "fairscale-fsdp", "blocks", "adamw")]
if SDP:
    FP32 += [Case("simple", "fairscale-sdp", "blocks", "adamw", clip=0.05),
             Case("zero_dp_1", "fairscale-sdp", "mlp", "sgd", accumulate=2)]
    MIXED += [Case("simple mixed_precision=fp16", "fairscale-sdp", "blocks", "adamw"),
              Case("zero_dp_1 mixed_precision=bf16", "fairscale-sdp", "blocks", "adamw")]


@functools.cache
def _results(nprocs: int) -> dict[Case, Result | str]:
    return run_cases(FP32 + MIXED, nprocs=nprocs, timeout=280, backend="nccl")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nprocs", world_sizes())
@pytest.mark.parametrize("case", FP32, ids=case_id)
def test_fp32_matches_ddp_on_cuda(case: Case, nprocs: int) -> None:
    got = assert_matches_ddp(_results(nprocs), case, FP32_TOL)
    assert got.backend == case.backend


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nprocs", world_sizes())
@pytest.mark.parametrize("case", MIXED, ids=case_id)
def test_mixed_precision_on_cuda(case: Case, nprocs: int) -> None:
    loss_diff, param_diff = ddp_diff(_results(nprocs), case)
    got = _results(nprocs)[case]
    assert isinstance(got, Result) and got.losses[-1] < got.losses[0]
    if "fp16" in str(case.options):
        assert got.info["scaler"] == "ShardedGradScaler"  # fairscale's, all-reducing found_inf over NCCL
        assert FP32_TOL < loss_diff <= FP16_TOL, (loss_diff, param_diff)
    else:
        assert FP32_TOL < max(loss_diff, param_diff) <= BF16_TOL, (loss_diff, param_diff)


def _fsdp_on_cuda(rank: int, world_size: int) -> dict[str, Any]:
    """One offloaded fairscale FSDP step on this rank's GPU, and what fairscale really used."""
    import torch
    from fairscale.nn.data_parallel import fully_sharded_data_parallel as module

    import shardcompat
    from shardcompat.memory import count_state
    from tests._parity import OPTIMIZERS, batch, build_model, loss_fn

    prepared = shardcompat.prepare(build_model("blocks"), OPTIMIZERS["adamw"], "zero_dp_3 auto_wrap offload",
                                   backend="fairscale-fsdp")
    device = torch.device("cuda", torch.cuda.current_device())
    x, y = (t.to(device) for t in batch("blocks", rank, 0))
    out = prepared(x)
    prepared.backward(loss_fn("blocks", out, y))
    norm = prepared.clip_grad_norm_(1e9)
    prepared.step()
    root = prepared.model
    flat = list(root.parameters())
    return {
        "layer_held": module.torch is not torch,  # shardcompat's CPU layer must not be entered on CUDA
        "real_streams": len(root._streams) > 0 and all(isinstance(s, torch.cuda.Stream) for s in root._streams.values()),
        "shards_pinned_on_cpu": all(p._fp32_shard.device.type == "cpu" and p._fp32_shard.is_pinned() for p in flat),
        "grads_pinned_on_cpu": all(p.grad is not None and p.grad.device.type == "cpu" and p.grad.is_pinned() for p in flat),
        "norm_finite": bool(torch.isfinite(norm)),
        "state": count_state(prepared.local_tensors()),
        "output_device": str(out.device),
    }


@pytest.mark.timeout(200)
@pytest.mark.skipif(not FSDP, reason=f"fairscale-fsdp unusable here: {FSDP.reason}")
def test_fairscale_fsdp_uses_real_streams_and_pinned_memory() -> None:
    for got in spawn(_fsdp_on_cuda, world_sizes()[-1], backend="nccl", timeout=180):
        assert got["layer_held"] is False
        assert got["real_streams"], "fairscale FSDP should overlap on torch.cuda.Stream, not the CPU layer's no-ops"
        assert got["shards_pinned_on_cpu"] and got["grads_pinned_on_cpu"], got
        assert got["norm_finite"] and got["output_device"].startswith("cuda")
        # Offloaded: everything that persists is in host memory (the full parameters are freed).
        assert got["state"].cpu == got["state"].total > 0, got["state"]
