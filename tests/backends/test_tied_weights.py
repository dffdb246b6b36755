"""A weight shared between modules (a head tied to the embedding, as GPT-2's lm_head) comes
out of every backend's ``full_state_dict`` as ``module.state_dict()`` lists it: under each
name, as one tensor, so ``torch.save`` writes it once and ``save_pretrained`` drops the tied
name as it does for the unsharded model.

2 gloo ranks; the reference is hand-built DDP (``tests._parity``), FP32_TOL.
"""

from __future__ import annotations

import functools
import io

import pytest
import torch

from shardcompat.backends import get
from tests._parity import (
    FP32_TOL,
    Case,
    Result,
    assert_matches_ddp,
    build_model,
    case_id,
    run_cases,
)

OPTIONS = {"torch-zero": "simple", "torch-fsdp1": "zero_dp_3 auto_wrap", "torch-fsdp2": "zero_dp_3 auto_wrap",
           "fairscale-sdp": "simple", "fairscale-fsdp": "zero_dp_3"}
CASES = [Case(o, b, model="tied", optimizer="adamw") for b, o in OPTIONS.items() if get(b).probe()]


@functools.cache
def _results() -> dict[Case, Result | str]:
    return run_cases(CASES, 2, timeout=280)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_tied_weight_is_one_tensor_under_each_name(case: Case) -> None:
    got = assert_matches_ddp(_results(), case, FP32_TOL)  # also: the same keys as DDP's state_dict
    model = build_model("tied")
    assert got.state.keys() == model.state_dict().keys()
    assert got.state["head.weight"] is got.state["embed.weight"], "tied weights came out as two copies"
    saved = io.BytesIO()
    torch.save(got.state, saved)
    loaded = torch.load(io.BytesIO(saved.getvalue()), weights_only=True)
    assert loaded["head.weight"].untyped_storage().data_ptr() == loaded["embed.weight"].untyped_storage().data_ptr()
    model.load_state_dict(loaded)
    assert model.head.weight is model.embed.weight and torch.equal(model.head.weight, got.state["embed.weight"])
