"""torch-fsdp2 (fully_shard) trains exactly like plain DDP on CPU/gloo, offload included.

2 gloo ranks, one process group for every case. Tolerance: FP32_TOL (1e-5 max abs diff of
losses, clip norms and final parameters); mixed precision as stated per test.
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

B = "torch-fsdp2"
OPTIONS = [
    "zero_dp_2",
    "zero_dp_3",
    "zero_dp_3 auto_wrap",
    "zero_dp_3 offload",
    "zero_dp_3 wrap=Block forward_prefetch=true",
    "zero_dp_2 auto_wrap min_num_params=100",
]
PARITY = [c for c in matrix(OPTIONS, B) if "wrap=Block" not in c.options or c.model == "blocks"]
CLIP = [Case(o, B, model="blocks", optimizer="adamw", clip=0.1) for o in ("zero_dp_3 auto_wrap", "zero_dp_3 offload")]
ACCUMULATE = [Case(o, B, model=m, accumulate=2) for o in ("zero_dp_3 auto_wrap", "zero_dp_2") for m in ("mlp", "blocks")]
BF16 = [Case("zero_dp_3 auto_wrap mixed_precision=bf16", B, model=m) for m in ("mlp", "blocks")]
FP16 = [Case("zero_dp_3 mixed_precision=fp16", B, model="blocks", optimizer="adamw")]
# The same rule gives FSDP1 and FSDP2 the same units (see test_torch_fsdp1.UNITS).
UNITS = {
    ("zero_dp_3 auto_wrap", "blocks"): 3,
    ("zero_dp_3 wrap=Block forward_prefetch=true", "blocks"): 3,
    ("zero_dp_3 auto_wrap", "mlp"): 1,
    ("zero_dp_3", "blocks"): 1,
}
SAME_UNITS_AS_FSDP1 = "zero_dp_3 auto_wrap min_num_params=100"


@pytest.fixture(scope="module")
def results() -> dict:
    extra = [Case(SAME_UNITS_AS_FSDP1, b, model=m) for b in (B, "torch-fsdp1") for m in ("mlp", "blocks")]
    return run_cases(PARITY + CLIP + ACCUMULATE + BF16 + FP16 + extra, timeout=280)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", PARITY + CLIP + ACCUMULATE, ids=case_id)
def test_matches_ddp(results: dict, case: Case) -> None:
    got = assert_matches_ddp(results, case, FP32_TOL)
    assert got.backend == B and "fully_shard(module" in got.info["call"]
    if (case.options, case.model) in UNITS:
        assert got.info["units"] == UNITS[(case.options, case.model)], got.info["call"]
    if "offload" in case.options:
        assert "CPUOffloadPolicy(pin_memory=False)" in got.info["call"]


@pytest.mark.parametrize("model", ["mlp", "blocks"])
def test_size_rule_gives_fsdp1_units(results: dict, model: str) -> None:
    fsdp2 = results[Case(SAME_UNITS_AS_FSDP1, B, model=model)]
    fsdp1 = results[Case(SAME_UNITS_AS_FSDP1, "torch-fsdp1", model=model)]
    assert fsdp2.info["units"] == fsdp1.info["units"] > 3


@pytest.mark.parametrize("case", BF16, ids=case_id)
def test_bf16_mixed_precision_close_to_fp32(results: dict, case: Case) -> None:
    loss_diff, param_diff = ddp_diff(results, case)
    assert max(loss_diff, param_diff) <= BF16_TOL
    assert max(loss_diff, param_diff) > FP32_TOL, "bf16 gave fp32 numbers: the policy was not applied"
    assert "MixedPrecisionPolicy(param_dtype=torch.bfloat16" in results[case].info["call"]


@pytest.mark.parametrize("case", FP16, ids=case_id)
def test_fp16_uses_sharded_grad_scaler_and_learns(results: dict, case: Case) -> None:
    got = results[case]
    loss_diff, _ = ddp_diff(results, case)
    assert got.info["scaler"] == "ShardedGradScaler"
    assert got.losses[-1] < got.losses[0]
    assert FP32_TOL < loss_diff <= FP16_TOL  # losses only: the scaler may skip a step


@pytest.mark.parametrize(
    "options", ["zero_dp_3", "zero_dp_2 offload", "zero_dp_3 auto_wrap mixed_precision=bf16 offload"]
)
def test_plan_text_and_fully_shard_kwargs_come_from_one_table(monkeypatch: pytest.MonkeyPatch, options: str) -> None:
    """wrap() passes fully_shard exactly the keywords the plan shows, built from the same entries."""
    import re
    from types import SimpleNamespace

    import torch

    from shardcompat.backends import Placement, get, torch_fsdp2
    from shardcompat.options import parse_options
    from tests._parity import BlockModel

    placement = Placement(world_size=2, local_world_size=2)
    backend = get(B)
    plan = backend.plan(parse_options(options), placement)
    table = torch_fsdp2._fully_shard_args(plan.options, placement, plan.settings["mesh"])
    shown = re.search(r"fully_shard\(module, (.*?)\)(;|$)", plan.call)
    assert shown is not None
    assert shown.group(1) == ", ".join(f"{k}={text}" for k, (text, _) in table.items())

    calls: list[dict] = []
    real = torch_fsdp2.fsdp2_api()
    assert real is not None
    fake = SimpleNamespace(
        fully_shard=lambda module, **kwargs: calls.append(kwargs),
        MixedPrecisionPolicy=real[1].MixedPrecisionPolicy, CPUOffloadPolicy=real[1].CPUOffloadPolicy,
    )
    monkeypatch.setattr(torch_fsdp2, "fsdp2_api", lambda: (real[0], fake))
    monkeypatch.setattr(torch_fsdp2, "device_mesh", lambda shape, placement: ("mesh", shape))
    backend.wrap(BlockModel(), lambda ps: torch.optim.SGD(ps, lr=0.1), plan, placement)
    assert calls and all(list(c) == list(table) for c in calls)
    kwargs = calls[-1]
    assert kwargs["mesh"] == ("mesh", (2,))
    reshard = plan.options.stage.value == "zero_dp_3"
    assert all(c["reshard_after_forward"] is reshard for c in calls[:-1])  # the auto_wrap units
    # the root: with units it stays gathered after forward (torch's default), else as the stage says
    assert kwargs["reshard_after_forward"] is (reshard and len(calls) == 1)
    if "mixed_precision=bf16" in options:
        assert kwargs["mp_policy"].param_dtype is kwargs["mp_policy"].reduce_dtype is torch.bfloat16
    if "offload" in options:
        assert kwargs["offload_policy"].pin_memory is False


def _grads_inside_and_after_no_sync(rank: int, world_size: int) -> tuple[int, int, int]:
    """Sharded gradients present after a backward inside no_sync, after one outside, and parameters."""
    import torch

    import shardcompat
    from tests._parity import VOCAB, BlockModel

    torch.manual_seed(0)
    prepared = shardcompat.prepare(BlockModel(), torch.optim.SGD, "zero_dp_3 auto_wrap", backend=B,
                                   optimizer_kwargs={"lr": 0.1})
    tokens = torch.randint(0, VOCAB, (4, 8), generator=torch.Generator().manual_seed(rank))
    params = list(prepared.model.parameters())
    with prepared.no_sync():
        prepared.backward(prepared(tokens).float().pow(2).mean())
    inside = sum(p.grad is not None for p in params)
    prepared.backward(prepared(tokens).float().pow(2).mean())
    return inside, sum(p.grad is not None for p in params), len(params)


@pytest.mark.timeout(120)
def test_no_sync_really_skips_the_reduce_scatter() -> None:
    """Inside no_sync FSDP2 keeps unsharded gradients to itself (no sharded .grad yet); the next
    backward outside it reduce-scatters them into every parameter's sharded .grad."""
    from shardcompat.launch import spawn

    for inside, after, total in spawn(_grads_inside_and_after_no_sync, 2, timeout=100):
        assert (inside, after) == (0, total), (inside, after, total)


def _root_calls(rank: int, world_size: int, options: str, model: str) -> dict:
    """What the plan said before the model was known, what the prepared plan says, and what
    torch recorded for the root's fully_shard: its reshard_after_forward (torch's own flag)."""
    import torch

    import shardcompat
    from shardcompat.backends import Placement, get
    from shardcompat.options import parse_options
    from tests._parity import build_model

    before = get(B).plan(parse_options(options), Placement(world_size=world_size, local_world_size=world_size))
    prepared = shardcompat.prepare(build_model(model), lambda ps: torch.optim.SGD(ps, lr=0.1), options, backend=B)
    group = prepared.model._get_fsdp_state()._fsdp_param_group  # the root's own parameters
    return {"before": before.explain(), "after": prepared.plan.explain(),
            "root_reshards": bool(group._reshard_after_forward)}


@pytest.mark.timeout(120)
def test_the_plan_says_how_the_root_reshards_whether_or_not_the_rule_wraps_anything() -> None:
    """zero_dp_3 auto_wrap keeps the root gathered only when the rule wrapped submodules (the
    blocks); when it wraps nothing (the MLP is under the size rule's default) the root is the
    whole model and reshards.  Before the model is known the plan names both; the prepared
    plan names the one call wrap() made, as torch recorded it."""
    from shardcompat.launch import spawn

    blocks, mlp = (spawn(_root_calls, 2, ("zero_dp_3 auto_wrap", m), timeout=100)[0] for m in ("blocks", "mlp"))
    assert blocks["before"] == mlp["before"]
    assert ("then the root: fully_shard(module, mesh=init_device_mesh('cpu', (2,)), reshard_after_forward=False), "
            "or with reshard_after_forward=True if the rule wraps no submodule") in blocks["before"]
    assert blocks["root_reshards"] is False and mlp["root_reshards"] is True
    assert "for each of the 2 submodule(s) by {Block} (_no_split_modules): " in blocks["after"]
    assert blocks["after"].split("then the root: ")[1].startswith(
        "fully_shard(module, mesh=init_device_mesh('cpu', (2,)), reshard_after_forward=False)\n")
    assert "the root unit keeps its parameters" in blocks["after"]
    assert mlp["after"] == (  # and no note about keeping the root gathered
        "torch-fsdp2: no submodule matches min_num_params=100000000 (default min_num_params), so the root "
        "only: fully_shard(module, mesh=init_device_mesh('cpu', (2,)), reshard_after_forward=True)")
