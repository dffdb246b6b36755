"""fairscale-fsdp trains exactly like plain DDP, on CPU through the compatibility layer.

Run against several releases: ``/tmp/fs-$V/bin/python -m pytest tests/backends/test_fairscale_fsdp.py``.
Without fairscale the tests skip with the probe's reason.  Where a release cannot run on
CPU even with the layer, the parity tests are ``gpu`` tests (they skip here with that reason).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from shardcompat.backends import Placement, UnsupportedOptions, get
from shardcompat.launch import spawn
from shardcompat.options import parse_options
from tests._parity import (
    FP32_TOL,
    Case,
    _run_cases,
    assert_matches_ddp,
    build_model,
    case_id,
    matrix,
)

BACKEND = "fairscale-fsdp"
PROBE = get(BACKEND).probe()
needs_fairscale = pytest.mark.skipif(not PROBE, reason=f"fairscale-fsdp unusable here: {PROBE.reason}")
ON_CPU = bool(PROBE) and PROBE.features.get("cpu_compat", False)
cpu_or_gpu = pytest.mark.skipif(bool(PROBE) and not torch.cuda.is_available() and not ON_CPU,
                                reason=f"fairscale {PROBE.versions.get('fairscale')} FSDP cannot run on CPU")


def _offload_runs_in_fp32() -> bool:
    """fairscale < 0.4 refuses offload without fp16: its constructor holds that error message."""
    if not PROBE:
        return False
    from fairscale.nn.data_parallel import fully_sharded_data_parallel as module

    consts = module.FullyShardedDataParallel.__init__.__code__.co_consts
    return "cpu_offload requires mixed_precision=True" not in consts


AUTO_WRAP = bool(PROBE) and PROBE.features.get("auto_wrap", False)  # fairscale.nn.wrap: 0.3.1+
OPTIONS = ["zero_dp_2", "zero_dp_3"]
if AUTO_WRAP:
    OPTIONS += ["zero_dp_3 auto_wrap", "zero_dp_2 auto_wrap"]
if _offload_runs_in_fp32():
    OPTIONS += ["zero_dp_3 offload", "zero_dp_2 offload"]
WRAPPED = "zero_dp_3 auto_wrap" if AUTO_WRAP else "zero_dp_3"
CASES = [*matrix(OPTIONS, BACKEND),
         Case("zero_dp_3", BACKEND, "mlp", "sgd", clip=0.05),
         Case(WRAPPED, BACKEND, "blocks", "adamw", clip=0.05),
         Case("zero_dp_2", BACKEND, "blocks", "sgd", accumulate=2),
         Case(WRAPPED, BACKEND, "blocks", "adamw", accumulate=2)]


def _units(rank: int) -> dict[str, int]:
    """fairscale FSDP instances that auto_wrap made (root included), per rule."""
    from fairscale.nn.data_parallel import FullyShardedDataParallel

    import shardcompat

    counts: dict[str, int] = {}
    if not AUTO_WRAP:
        return counts
    for options in ("zero_dp_3", "zero_dp_3 auto_wrap", "zero_dp_3 auto_wrap wrap=Block,Linear",
                    "zero_dp_3 auto_wrap min_num_params=300"):
        prepared = shardcompat.prepare(build_model("blocks"), torch.optim.SGD, options, backend=BACKEND,
                                       optimizer_kwargs={"lr": 0.1})
        counts[options] = sum(isinstance(m, FullyShardedDataParallel) for m in prepared.model.modules())
    return counts


def _job(rank: int, world_size: int, cases: list[Case]) -> dict[str, Any]:
    every = list(dict.fromkeys(c for case in cases for c in (case.reference, case)))
    return {"cases": dict(zip(every, _run_cases(rank, world_size, every))), "units": _units(rank)}


@functools.cache
def _results() -> dict[str, Any]:
    results: dict[str, Any] = spawn(_job, 2, (CASES,), timeout=600)[0]
    return results


@needs_fairscale
@cpu_or_gpu
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_matches_ddp(case: Case) -> None:
    """fp32 losses, clip norms and final parameters equal plain DDP's within FP32_TOL (1e-5)."""
    got = assert_matches_ddp(_results()["cases"], case, FP32_TOL)
    assert got.backend == BACKEND
    if case.clip is not None:
        assert max(_results()["cases"][case.reference].info["norms"]) > case.clip, "clipping never engaged"


@needs_fairscale
@cpu_or_gpu
def test_auto_wrap_really_wraps() -> None:
    if not AUTO_WRAP:
        with pytest.raises(UnsupportedOptions, match=r"fairscale.nn.wrap.*0\.3\.1"):
            get(BACKEND).plan(parse_options("zero_dp_3 auto_wrap"), Placement(world_size=2))
        return
    units = _results()["units"]
    assert units["zero_dp_3"] == 1  # the root only
    assert units["zero_dp_3 auto_wrap"] == 1 + 2  # BlockModel._no_split_modules = ["Block"]: 2 blocks
    # Nested units too: 2 Blocks, the 2 MLP Linears in each and the head (attention's
    # out_proj is a Linear subclass, and wrap= names classes exactly).
    assert units["zero_dp_3 auto_wrap wrap=Block,Linear"] == 1 + 2 + 4 + 1
    assert units["zero_dp_3 auto_wrap min_num_params=300"] > 1 + 2


@needs_fairscale
def test_plan_maps_the_release_api() -> None:
    backend = get(BACKEND)
    cpu = Placement(world_size=2)
    if not ON_CPU:
        with pytest.raises(UnsupportedOptions, match="needs CUDA"):
            backend.plan(parse_options("zero_dp_3"), cpu)
        return
    assert backend.plan(parse_options("zero_dp_2"), cpu).settings["kwargs"]["reshard_after_forward"] is False
    assert backend.plan(parse_options("zero_dp_3"), cpu).settings["kwargs"]["reshard_after_forward"] is True
    offload = backend.plan(parse_options("zero_dp_3 offload"), cpu).settings["kwargs"]
    expected = "move_params_to_cpu" if PROBE.features["move_params_to_cpu"] else "cpu_offload"
    assert offload[expected] is True
    assert "compatibility layer" in backend.plan(parse_options("zero_dp_3"), cpu).explain()
    with pytest.raises(UnsupportedOptions, match="hybrid"):
        backend.plan(parse_options("hybrid_shard"), cpu)


@needs_fairscale
def test_cpu_compat_is_scoped() -> None:
    """Outside the layer torch and fairscale are untouched; inside, only fairscale sees no-op streams."""
    from fairscale.nn.data_parallel import fully_sharded_data_parallel as module

    from shardcompat.backends._fairscale_cpu import cpu_compat

    if not ON_CPU:
        pytest.skip("the compatibility layer does not apply to this fairscale release")
    pin, record = torch.Tensor.pin_memory, torch.Tensor.record_stream
    with cpu_compat(module), cpu_compat(module):
        assert module.torch is not torch and module.torch.cuda.is_available()
        assert torch.cuda.is_available() is False or torch.version.cuda is not None
        stream = module.torch.cuda.Stream()
        with module.torch.cuda.stream(stream):
            assert module.torch.cuda.current_stream() is stream
        torch.zeros(2).record_stream(stream)
        if not torch.cuda.is_available():
            assert torch.zeros(2).pin_memory().device.type == "cpu"
    assert module.torch is torch
    assert (torch.Tensor.pin_memory, torch.Tensor.record_stream) == (pin, record)
