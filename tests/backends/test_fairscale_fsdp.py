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
    state_phases,
)

BACKEND = "fairscale-fsdp"
PROBE = get(BACKEND).probe()
needs_fairscale = pytest.mark.skipif(not PROBE, reason=f"fairscale-fsdp unusable here: {PROBE.reason}")
ON_CPU = bool(PROBE) and PROBE.features.get("cpu_compat", False)
cpu_or_gpu = pytest.mark.skipif(bool(PROBE) and not torch.cuda.is_available() and not ON_CPU,
                                reason=f"fairscale {PROBE.versions.get('fairscale')} FSDP cannot run on CPU")


def _offload_runs_in_fp32() -> bool:
    """fairscale < 0.4 refuses offload without fp16 (a probed feature)."""
    return bool(PROBE) and PROBE.features.get("offload_fp32", False)


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
    return {"cases": dict(zip(every, _run_cases(rank, world_size, every))), "units": _units(rank),
            "phases": {o: state_phases(BACKEND, o, rank) for o in ("zero_dp_2", "zero_dp_3")}}


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
@cpu_or_gpu
def test_local_tensors_count_what_fairscale_holds() -> None:
    """The memory report's view: between forward and backward the all-gathered parameters
    (1 x 4Ψ) are held next to the shard (1/2), under zero_dp_2 and, for the root unit whose
    reshard fairscale disables, under zero_dp_3 too; after backward only the shard is, and the
    gradient shard is exactly a shard (no 25 MB reduce-scatter bucket behind it)."""
    pad = 0.02
    for options in ("zero_dp_2", "zero_dp_3"):
        got = _results()["phases"][options]
        assert abs(got["forward"]["params"] - 1.5) <= pad * 1.5, (options, got)
        assert abs(got["backward"]["params"] - 0.5) <= pad, (options, got)
        assert abs(got["backward"]["grads"] - 0.5) <= pad, (options, got)
        assert abs(got["step"]["optim"] - 1.0) <= pad, (options, got)  # Adam's two moments, half each


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
    if not _offload_runs_in_fp32():
        with pytest.raises(UnsupportedOptions, match=r"offloads only with mixed_precision=fp16.*fairscale>=0\.4"):
            backend.plan(parse_options("zero_dp_3 offload"), cpu)
        return
    # No reduce-scatter bucket unless asked: the gradient shards would keep all of it alive.
    if PROBE.features["bucket_cap_mb"]:
        unset = backend.plan(parse_options("zero_dp_3"), cpu)
        assert unset.settings["kwargs"]["bucket_cap_mb"] == 0 and "bucket_cap_mb=0" in unset.call
        assert any("bucket_cap_mb not set" in note for note in unset.notes)
        assert backend.plan(parse_options("zero_dp_3 bucket_cap_mb=50"), cpu).settings["kwargs"]["bucket_cap_mb"] == 50
    offload = backend.plan(parse_options("zero_dp_3 offload"), cpu).settings["kwargs"]
    expected = "move_params_to_cpu" if PROBE.features["move_params_to_cpu"] else "cpu_offload"
    assert offload[expected] is True
    assert "compatibility layer" in backend.plan(parse_options("zero_dp_3"), cpu).explain()
    with pytest.raises(UnsupportedOptions, match="hybrid"):
        backend.plan(parse_options("hybrid_shard"), cpu)


def test_probe_explains_a_fairscale_without_fsdp() -> None:
    """fairscale 0.1.x has no FSDP module: the probe says so and names the fix."""
    from shardcompat.backends._fairscale_common import fairscale_version

    version = fairscale_version()
    if version is None or not version.startswith("0.1."):
        pytest.skip(f"fairscale {version} is not a release without FSDP")
    assert not PROBE
    assert PROBE.reason == (f"fairscale {version} has no FullyShardedDataParallel (added in 0.3.0); "
                            "upgrade (pip install -U 'fairscale>=0.3.7') or use torch-fsdp1/torch-fsdp2")


def test_probe_refuses_a_release_whose_state_dict_breaks_training() -> None:
    """fairscale 0.3.0's state_dict() swaps the flat parameters under the optimizer.

    Refused by the probe, so ``prepare`` and the facade pick another backend before training
    starts, rather than at the first checkpoint.  Which release does it is probed, not assumed.
    """
    from shardcompat.backends import fairscale_fsdp

    try:
        import fairscale.nn.data_parallel.fully_sharded_data_parallel  # noqa: F401
    except (ImportError, SystemExit):
        pytest.skip(f"no fairscale FSDP here: {PROBE.reason}")
    keeps = fairscale_fsdp._state_dict_keeps_params()
    if keeps:
        assert PROBE or "re-creates its flat parameters" not in PROBE.reason
        return
    assert not PROBE
    assert "re-creates its flat parameters in state_dict()" in PROBE.reason
    assert "fairscale>=0.3.7" in PROBE.reason and "torch-fsdp2" in PROBE.reason


@needs_fairscale
def test_offload_refusal_is_shown_by_resolve() -> None:
    """Before 0.4 fairscale refuses fp32 offload: resolve()/explain say so at plan time."""
    from shardcompat.backends import NoBackendAvailable, resolve

    if not ON_CPU:
        pytest.skip("fairscale-fsdp plans nothing on CPU here")
    if _offload_runs_in_fp32():
        assert "move_params_to_cpu=True" in resolve(parse_options("zero_dp_3 offload"), BACKEND).call
        return
    with pytest.raises(NoBackendAvailable, match="offloads only with mixed_precision=fp16"):
        resolve(parse_options("zero_dp_3 offload"), BACKEND)


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


# ---------------------------------------------------------------------- optimizer state
RESUME_TOL = 1e-5  # fp32: a resumed run's losses and parameters against the uninterrupted one
RESUMES = [("fairscale-fsdp", "zero_dp_3", "fairscale-fsdp", "zero_dp_3"),
           ("fairscale-fsdp", WRAPPED, "fairscale-fsdp", WRAPPED),
           ("fairscale-fsdp", WRAPPED, "torch-fsdp2", "zero_dp_3"),
           ("torch-fsdp2", "zero_dp_3 auto_wrap", "fairscale-fsdp", WRAPPED),
           ("fairscale-fsdp", "zero_dp_2", "fairscale-fsdp", WRAPPED, "files")]


def _train(prepared: Any, rank: int, start: int, steps: int) -> list[float]:
    from tests._parity import _global_mean, batch, loss_fn

    losses = []
    for step in range(start, start + steps):
        x, y = batch("blocks", rank, step)
        loss = loss_fn("blocks", prepared(x), y)
        prepared.backward(loss)
        prepared.step()
        prepared.zero_grad()
        losses.append(_global_mean(loss))
    return losses


def _prepared(backend: str, options: str, seed: int) -> Any:
    import shardcompat
    from tests._parity import OPTIMIZERS

    return shardcompat.prepare(build_model("blocks", seed), OPTIMIZERS["adamw"], options, backend=backend)


def _through_bytes(state: Any) -> Any:
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _resume_job(rank: int, world_size: int, directory: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n, (saver, saver_options, loader, loader_options, *how) in enumerate(RESUMES):
        straight = _prepared(saver, saver_options, 0)
        losses = _train(straight, rank, 0, 2)
        if how:  # through shardcompat's checkpoint files
            path = f"{directory}/ckpt{n}"
            straight.save_checkpoint(path)
            resumed = _prepared(loader, loader_options, 1)
            resumed.load_checkpoint(path)
        else:
            model = _through_bytes(straight.full_state_dict(rank0_only=False))
            optim = _through_bytes(straight.optimizer_state_dict(rank0_only=False))
            saved_on_rank0 = straight.optimizer_state_dict(rank0_only=True)
            resumed = _prepared(loader, loader_options, 1)
            resumed.load_full_state_dict(model)
            resumed.load_optimizer_state_dict(optim)
            reloaded = resumed.optimizer_state_dict(rank0_only=False)
        losses += _train(straight, rank, 2, 2)
        after = _train(resumed, rank, 2, 2)
        out[str(n)] = {
            "straight": losses, "resumed": after,
            "params": (straight.full_state_dict(), resumed.full_state_dict()),
            "optim": None if how else (optim, reloaded, saved_on_rank0),
        }
    return out


@needs_fairscale
@cpu_or_gpu
def test_optimizer_state_round_trips_within_and_across_backends(tmp_path: Any) -> None:
    """AdamW: 2 steps, save model+optimizer, load into a fresh model from another seed (on this
    or another backend), 2 more steps == 4 uninterrupted steps within RESUME_TOL (1e-5)."""
    from tests._parity import max_diff

    results = spawn(_resume_job, 2, (str(tmp_path),), timeout=600)[0]
    for n, spec in enumerate(RESUMES):
        got = results[str(n)]
        label = " -> ".join(f"{b} '{o}'" for b, o in (spec[:2], spec[2:4]))
        diff = max(abs(a - b) for a, b in zip(got["straight"][2:], got["resumed"]))
        assert diff <= RESUME_TOL, f"{label}: losses {got['resumed']} vs {got['straight'][2:]}"
        assert max_diff(*got["params"]) <= RESUME_TOL, label
        assert got["straight"][-1] < got["straight"][0]
        if got["optim"] is None:
            continue
        saved, reloaded, rank0 = got["optim"]
        # The name-keyed format: every parameter, full shapes, the same state after a reload.
        assert set(saved["state"]) == set(got["params"][0]) == set(reloaded["state"]), label
        assert [g["params"] for g in saved["param_groups"]] == [list(got["params"][0])]
        assert set(rank0["state"]) == set(saved["state"])
        for name, entry in saved["state"].items():
            assert entry["exp_avg"].shape == got["params"][0][name].shape, (label, name)
            for key, value in entry.items():
                assert torch.allclose(torch.as_tensor(value).float(),
                                      torch.as_tensor(reloaded["state"][name][key]).float(), atol=1e-6)
