"""torch-zero (DDP, DDP + ZeroRedundancyOptimizer) trains exactly like plain DDP, and its
ZeRO-1 moves the ZeRO model's 2Ψ a step (gradients reduce-scattered to their owners).

2 gloo ranks (3 for the uneven-partition cases); every case runs in one process group.
Tolerance: FP32_TOL (1e-5 max abs diff of losses, clip norms and final parameters); mixed
precision as stated per test.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from shardcompat.comm import CommCounter
from shardcompat.launch import spawn
from shardcompat.memory import zero_model_volume
from tests._parity import (
    BF16_TOL,
    FP16_TOL,
    FP32_TOL,
    Case,
    assert_matches_ddp,
    batch,
    build_model,
    case_id,
    ddp_diff,
    loss_fn,
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
# Parameters the optimizer leaves out have no owner in ZeRO's partition: the hook must cope.
# No clip: their gradients are never zeroed and so add up over steps, which under the hook is
# not DDP's sum (see shardcompat/backends/_zero_hook.py); the trained parameters are the same.
PARTIAL = [Case("zero_dp_1", B, model="blocks", optimizer="matrices")]
# 3 ranks: ZeRO's partition gives some ranks no parameter of a bucket (an empty reduce-scatter part).
THREE = [Case("zero_dp_1", B, model="blocks", optimizer="adamw", clip=0.1, accumulate=2),
         Case("simple", B, model="mlp", optimizer="sgd"),
         Case("zero_dp_1 bucket_cap_mb=0.001", B, model="blocks", optimizer="groups", clip=0.1)]


@pytest.fixture(scope="module")
def results() -> dict:
    return run_cases(PARITY + CLIP + ACCUMULATE + BF16 + FP16 + GROUPS + PARTIAL, timeout=240)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", PARITY + CLIP + ACCUMULATE + GROUPS + PARTIAL, ids=case_id)
def test_matches_ddp(results: dict, case: Case) -> None:
    got = assert_matches_ddp(results, case, FP32_TOL)
    assert got.backend == B
    want = "ZeroRedundancyOptimizer" if case.options else "optimizer(ddp.parameters())"
    assert want in got.info["call"]


@functools.cache
def _three() -> dict:
    return run_cases(THREE, nprocs=3, timeout=240)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", THREE, ids=case_id)
def test_matches_ddp_on_three_ranks(case: Case) -> None:
    got = assert_matches_ddp(_three(), case, FP32_TOL)
    assert "reduce_scatter_to_owners" in got.info["call"]


COUNTED = ["zero_dp_1", "simple", "zero_dp_1 bucket_cap_mb=0.001"]


def _counted(rank: int, world: int) -> dict[str, list[dict[str, Any]]]:
    return {options: _counted_steps(rank, options) for options in COUNTED}


@functools.cache
def _counts(world: int) -> list[dict[str, list[dict[str, Any]]]]:
    return spawn(_counted, world, timeout=200)  # type: ignore[no-any-return]


def _counted_steps(rank: int, options: str) -> list[dict[str, Any]]:
    """Four steps through ``prepare`` on the BlockModel, each counted; DDP's buckets and
    ZeRO's parameter buckets read from torch's own objects after each.  The first two are
    not steady: DDP reduces in its first-guess buckets, then rebuilds them at the second and
    broadcasts the new order from rank 0 (two small broadcasts, once per run)."""
    import shardcompat

    prepared = shardcompat.prepare(build_model("blocks"), lambda ps: torch.optim.AdamW(ps, lr=1e-2),
                                   options, backend=B)
    out = []
    for step in range(4):
        x, y = batch("blocks", rank, step)
        with CommCounter() as counter:
            prepared.backward(loss_fn("blocks", prepared(x), y))
            prepared.step()
        prepared.zero_grad()
        ddp_buckets = len(prepared.model.reducer._get_zeros_like_grad_buckets())
        zero_buckets = sum(1 for b in prepared.optimizer._buckets[0] if b.numel())  # one per rank that owns any
        out.append({**counter.volume.as_dict(), "buckets": ddp_buckets + zero_buckets,
                    "psi": 4 * sum(p.numel() for p in prepared.module.parameters())})
    return out[2:]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("options", COUNTED)
def test_zero_1_moves_the_zero_model_in_one_collective_per_bucket(world: int, options: str) -> None:
    """Per rank and step: Ψ reduce-scattered (the gradients, to their owners) and Ψ broadcast
    (the updated parameters): 2Ψ, ZeRO-1's model, where DDP's all-reduce alone was 2Ψ."""
    for rank, counts in enumerate(_counts(world)):
        steps = counts[options]
        for step, got in enumerate(steps, start=2):
            psi = got["psi"]
            assert got["bytes"]["reduce-scatter"] == psi and got["bytes"]["broadcast"] == psi, (rank, step, got)
            assert got["bytes"]["all-reduce"] == 0, (rank, step, got)
            assert got["total"] / zero_model_volume(1, psi) <= 1.05
            assert got["collectives"] <= got["buckets"], (rank, step, got)


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
    assert got.info["scaler"] == "ShardedGradScaler"  # each rank checks its own gradients for infs
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


@pytest.mark.parametrize(("pg", "device", "hooked"), [
    ("gloo", "cpu", True), ("nccl", "cuda:0", True), ("gloo", "cuda:0", False), ("mpi", "cpu", False),
])
def test_the_plan_falls_back_to_the_all_reduce_where_the_hook_cannot_run(
        monkeypatch: pytest.MonkeyPatch, pg: str, device: str, hooked: bool) -> None:
    """Planning only (no ranks): the process group's backend is what a running job would
    report, set here because this machine has neither CUDA nor MPI."""
    from shardcompat.backends import Placement, torch_ddp_zero
    from shardcompat.options import parse_options

    monkeypatch.setattr(torch_ddp_zero, "_pg_backend", lambda placement: pg)
    plan = torch_ddp_zero.BACKEND.plan(parse_options("zero_dp_1"), Placement(world_size=2, device=device))
    assert plan.settings["hook"] is hooked
    assert ("reduce_scatter_to_owners" in plan.call) is hooked
    notes = " ".join(plan.notes)
    assert ("3Ψ a step instead of ZeRO-1's 2Ψ" in notes) is not hooked
    if pg == "gloo" and not hooked:
        assert "gloo has no reduce-scatter for CUDA tensors" in notes


@pytest.mark.parametrize("case", [c for c in CLIP + GROUPS if c.clip and c.options], ids=case_id)
def test_the_clip_norm_is_ddps_bit_for_bit(results: dict, case: Case) -> None:
    """Owners hold their gradients only: the norm is assembled from the per-parameter norms, which
    gives DDP's exact bits (Adafactor turns a last-bit difference on a gradient of rounding noise,
    GPT-2's key bias, into whole learning-rate steps: tests/transformers saw it).  2 ranks: there
    the reduced gradients are DDP's bits too (a + b either way); on 3 gloo's reduce-scatter adds
    in another order than its all-reduce, so the 3-rank cases are held to FP32_TOL."""
    got, want = results[case], results[case.reference]
    assert got.info["norms"] and got.info["norms"] == want.info["norms"]
