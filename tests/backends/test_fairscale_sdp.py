"""fairscale-sdp trains exactly like plain DDP, on whichever fairscale release is installed.

Run against several releases (each in its own virtualenv, see the report in the commit log):
``/tmp/fs-$V/bin/python -m pytest tests/backends/test_fairscale_sdp.py``.  Without fairscale
the parity tests skip with the probe's reason; the probe tests run everywhere.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
from typing import Any

import pytest
import torch

from shardcompat.backends import NoBackendAvailable, Placement, get, resolve
from shardcompat.launch import spawn
from shardcompat.options import parse_options
from tests._parity import (
    FP32_TOL,
    OPTIMIZERS,
    Case,
    Result,
    _run_cases,
    assert_matches_ddp,
    batch,
    build_model,
    loss_fn,
    max_diff,
)

BACKEND = "fairscale-sdp"
PROBE = get(BACKEND).probe()
needs_fairscale = pytest.mark.skipif(not PROBE, reason=f"fairscale-sdp unusable here: {PROBE.reason}")

PARITY = [
    Case(f"{opts}", BACKEND, model, optim)
    for opts in ("simple", "zero_dp_1")
    for model in ("mlp", "blocks")
    for optim in ("sgd", "adamw")
]
EXTRA = [
    Case("simple", BACKEND, "mlp", "sgd", clip=0.05),
    Case("zero_dp_1", BACKEND, "blocks", "adamw", clip=0.05),
    Case("simple", BACKEND, "blocks", "adamw", accumulate=2),
    Case("zero_dp_1", BACKEND, "mlp", "sgd", accumulate=2),
    # Buckets asked for: kept, with zeroing through ShardedDDP so the grad views survive.
    Case("simple bucket_cap_mb=1", BACKEND, "blocks", "adamw"),
    Case("simple bucket_cap_mb=1", BACKEND, "mlp", "sgd", accumulate=2),
]
# The factory's two parameter groups (weight decay and learning rate per group) reach OSS.
GROUPS = [
    Case("simple", BACKEND, "mlp", "groups"),
    Case("simple", BACKEND, "blocks", "groups", clip=0.05),
    Case("zero_dp_1", BACKEND, "blocks", "groups", accumulate=2),
]
CASES = PARITY + EXTRA + GROUPS


def _sdp_default_buffer() -> int:
    from fairscale.nn.data_parallel.sharded_ddp import ShardedDataParallel

    param = inspect.signature(ShardedDataParallel.__init__).parameters.get("reduce_buffer_size")
    return int(param.default) if param is not None else 0


def _raw_sharded_ddp(rank: int, model_name: str, optim: str) -> Result:
    """fairscale as users wrote it: default buffer, ``optimizer.zero_grad()`` (torch 2: to None)."""
    import torch.distributed as dist
    from fairscale.nn.data_parallel.sharded_ddp import ShardedDataParallel
    from fairscale.optim.oss import OSS

    from tests._parity import STEPS

    model = build_model(model_name)
    factory = OPTIMIZERS[optim]
    oss = OSS(model.parameters(), optim=factory.func, **factory.keywords)  # type: ignore[attr-defined]
    wrapped = ShardedDataParallel(model, oss)
    losses = []
    for step in range(STEPS):
        x, y = batch(model_name, rank, step)
        loss = loss_fn(model_name, wrapped(x), y)
        loss.backward()
        oss.step()
        oss.zero_grad()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / dist.get_world_size())
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return Result(losses, state if rank == 0 else {}, "raw-sharded-ddp")


REPEATS = 6  # fairscale < 0.3.7's gloo broadcast race showed in about one run of three


def _trained(rank: int, options: str, steps: range, load: dict[str, Any] | None = None,
             optimizer: str = "adamw") -> Any:
    """fairscale-sdp on the MLP with AdamW over ``steps``, from ``load`` (model, optim) if given."""
    import shardcompat

    prepared = shardcompat.prepare(build_model("mlp"), OPTIMIZERS[optimizer], options, backend=BACKEND)
    if load is not None:
        prepared.load_full_state_dict(load["model"])
        prepared.load_optimizer_state_dict(load["optim"])
    for step in steps:
        x, y = batch("mlp", rank, step)
        prepared.backward(loss_fn("mlp", prepared(x), y))
        prepared.step()
        prepared.zero_grad()
    return prepared


def _repeats(rank: int) -> dict[str, list[dict[str, torch.Tensor]]]:
    """The same short training ``REPEATS`` times: this rank's whole parameters after each."""
    return {opts: [{k: v.detach().clone() for k, v in _trained(rank, opts, range(4)).module.state_dict().items()}
                   for _ in range(REPEATS)]
            for opts in ("simple", "zero_dp_1")}


def _job(rank: int, world_size: int, cases: list[Case]) -> dict[str, Any]:
    every = list(dict.fromkeys(c for case in cases for c in (case.reference, case)))
    results = dict(zip(every, _run_cases(rank, world_size, every)))
    raw = {m: _raw_sharded_ddp(rank, m, "adamw") for m in ("mlp", "blocks")}
    state = {optimizer: _state_roundtrip(rank, optimizer) for optimizer in ("adamw", "groups")}
    return {"cases": results, "raw": raw, "state": state, "repeats": _repeats(rank)}


def _state_roundtrip(rank: int, optimizer: str) -> dict[str, Any]:
    """Consolidated optimizer state: name-keyed, complete, and loadable into a fresh run."""
    first = _trained(rank, "simple", range(2), optimizer=optimizer)
    saved = {
        "model": {k: v.clone() for k, v in first.module.state_dict().items()},
        "optim": first.optimizer_state_dict(rank0_only=False),
    }
    rank0 = first.optimizer_state_dict()
    # the last 2 steps, from the saved state
    resumed = _trained(rank, "simple", range(2, 4), saved, optimizer=optimizer)
    straight = _trained(rank, "simple", range(4), optimizer=optimizer)
    return {
        "groups": [{k: v for k, v in g.items() if k in ("params", "lr", "weight_decay")}
                   for g in saved["optim"]["param_groups"]],
        "names": sorted(saved["optim"]["state"]),
        "model_names": sorted(n for n, _ in first.module.named_parameters()),
        "rank0_keys": sorted(rank0.get("state", {})),
        "step": {n: float(s["step"]) for n, s in saved["optim"]["state"].items()},
        "diff": max_diff(resumed.full_state_dict(rank0_only=False), straight.full_state_dict(rank0_only=False)),
        "local": sum(1 for kind, t in first.local_tensors() if kind == "optim" and t.dim() > 0),
        "full": 2 * len(saved["model"]),  # exp_avg and exp_avg_sq for every parameter
    }


@functools.cache
def _all_ranks() -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = spawn(_job, 2, (CASES,), timeout=600)
    return results


def _results() -> dict[str, Any]:
    return _all_ranks()[0]


@needs_fairscale
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.options}-{c.model}-{c.optimizer}-clip{c.clip}-acc{c.accumulate}")
def test_matches_ddp(case: Case) -> None:
    """fp32 losses and final parameters equal plain DDP's within FP32_TOL (1e-5)."""
    got = assert_matches_ddp(_results()["cases"], case, FP32_TOL)
    assert got.backend == BACKEND
    if case.clip is not None:
        want = _results()["cases"][case.reference]
        assert got.info["norms"] == pytest.approx(want.info["norms"], abs=1e-5)
        assert max(want.info["norms"]) > case.clip, "clipping never engaged; the test would prove nothing"


@needs_fairscale
@pytest.mark.parametrize("model", ["mlp", "blocks"])
def test_the_bucket_trap_is_real_and_fixed(model: str) -> None:
    """Unfixed fairscale (default bucket + torch-2 zero_grad) drifts from DDP; the adapter does not.

    On releases whose default ``reduce_buffer_size`` is 0 (0.1.x, 0.3.0) there are no
    bucket views, so the unfixed path must match too: the drift is caused by the bucket.
    """
    results = _results()
    reference = results["cases"][Case(None, model=model, optimizer="adamw")]
    raw = results["raw"][model]
    drift = max(max_diff(raw.state, reference.state), *(abs(a - b) for a, b in zip(raw.losses, reference.losses)))
    if _sdp_default_buffer() > 0:
        assert drift > 100 * FP32_TOL, f"expected the unfixed path to drift from DDP, got {drift}"
    else:
        assert drift <= FP32_TOL, f"no bucket by default, yet the plain path drifts by {drift}"
    assert_matches_ddp(results["cases"], Case("simple", BACKEND, model, "adamw"))


@needs_fairscale
@pytest.mark.parametrize("optimizer", ["adamw", "groups"])
def test_optimizer_state_consolidates_by_name_and_resumes(optimizer: str) -> None:
    state = _results()["state"][optimizer]
    assert state["names"] == state["model_names"]
    assert state["rank0_keys"] == state["model_names"]
    assert set(state["step"].values()) == {2.0}
    assert state["diff"] <= FP32_TOL, "resuming from the consolidated state changed training"
    # Each rank holds only its OSS shard of the optimizer state.
    assert 0 < state["local"] < state["full"]
    if optimizer == "groups":  # OSS numbers parameters group after group: the names follow
        order = [n for n, _ in build_model("mlp").named_parameters()]
        assert state["groups"] == [
            {"lr": 1e-2, "weight_decay": 0.1, "params": [n for n in order if n.endswith("weight")]},
            {"lr": 3e-3, "weight_decay": 0.0, "params": [n for n in order if n.endswith("bias")]},
        ]


@needs_fairscale
@pytest.mark.parametrize("case", GROUPS, ids=lambda c: f"{c.options}-{c.model}")
def test_each_rank_optimizes_its_shard_with_the_settings_of_its_group(case: Case) -> None:
    """OSS's optimizer on each rank has the factory's two groups, with their own settings."""
    results = _results()["cases"]
    groups = results[case].info["groups"]
    assert groups == results[case.reference].info["groups"]
    assert groups == [{"lr": 1e-2, "weight_decay": 0.1}, {"lr": 3e-3, "weight_decay": 0.0}]


@needs_fairscale
@pytest.mark.parametrize("options", ["simple", "zero_dp_1"])
def test_training_is_repeatable_and_ranks_agree(options: str) -> None:
    """Bit-identical parameters on every rank and in every repeat of the same run.

    fairscale before 0.3.7 waits only on the last of its async broadcasts; on gloo the others
    could still be writing when training went on, so ranks drifted apart at random
    (``_fairscale_waits``).  The probe says whether this release needed the fix.
    """
    runs = [rank["repeats"][options] for rank in _all_ranks()]
    first = runs[0][0]
    for rank, finals in enumerate(runs):
        for i, state in enumerate(finals):
            assert max_diff(state, first) == 0.0, f"rank {rank}, repeat {i} differs from rank 0's first run"


@needs_fairscale
def test_probe_reports_the_collective_wait_fix() -> None:
    """The fix is installed exactly where a release waits on the last handle only."""
    import importlib

    from shardcompat.backends._fairscale_waits import SITES, last_handle_only

    needed = []
    for module_name, cls, method in SITES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if last_handle_only(module, cls, method):
            needed.append(module)
            assert type(module.dist).__name__ == "_WaitingDist", f"{module_name}.dist was not fixed"
    assert PROBE.features["collective_wait_fix"] == bool(needed)


@needs_fairscale
def test_plan_fixes_the_bucket_and_maps_bucket_cap_mb() -> None:
    backend = get(BACKEND)
    plan = backend.plan(parse_options("simple"), Placement(world_size=2))
    big = backend.plan(parse_options("simple bucket_cap_mb=2"), Placement(world_size=2))
    if PROBE.features["reduce_buffer_size"]:
        assert plan.settings["reduce_buffer_size"] == 0
        assert big.settings["reduce_buffer_size"] == 2 * 2**20 // 4  # elements of fp32, not bytes
        assert "reduce_buffer_size=0" in plan.call
    ddp = backend.plan(parse_options("zero_dp_1"), Placement(world_size=2))
    assert ddp.call.startswith("DistributedDataParallel(")


@needs_fairscale
def test_fp16_gets_the_sharded_grad_scaler() -> None:
    from fairscale.optim.grad_scaler import ShardedGradScaler

    from shardcompat.backends._fairscale_common import grad_scaler

    assert isinstance(grad_scaler(parse_options("simple mixed_precision=fp16")), ShardedGradScaler)
    assert grad_scaler(parse_options("simple")) is None


def test_probe_explains_itself() -> None:
    """Usable, or a reason that names the fairscale version and the fix: never an obscure crash."""
    try:
        version = importlib.metadata.version("fairscale")
    except importlib.metadata.PackageNotFoundError:
        assert not PROBE and "not installed" in PROBE.reason and "pip install" in PROBE.reason
        # What serves the request instead depends on the request: resolve names it.
        with pytest.raises(NoBackendAvailable, match="These backends can: torch-zero"):
            resolve(parse_options("simple"), "fairscale-sdp", Placement(world_size=2, local_world_size=2))
        return
    assert PROBE.versions["fairscale"] == version
    from packaging.version import Version

    if Version(version) < Version("0.1.5") and Version(torch.__version__.split("+")[0]) >= Version("2"):
        # A real fairscale 0.1.0-0.1.4 install: importing it fails on torch._six.
        assert not PROBE
        assert version in PROBE.reason and "torch._six" in PROBE.reason
        assert ">=0.1.5" in PROBE.reason and "torch-zero" in PROBE.reason
    else:
        assert PROBE, PROBE.reason


def test_import_exit_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    """fairscale 0.4.7+ may ``sys.exit`` while importing FSDP without pygit2/pgzip.

    Simulated: such a release exits only in an environment missing those packages, which a
    test cannot arrange without uninstalling them; the real import path is what is patched.
    """
    import importlib

    from shardcompat.backends import _fairscale_common as common

    def exiting(name: str) -> Any:
        raise SystemExit(1)

    monkeypatch.setattr(common, "fairscale_version", lambda: "0.4.9")
    monkeypatch.setattr(importlib, "import_module", exiting)
    mods, reason = common.import_fairscale(["fairscale.nn.data_parallel"])
    assert mods == {}
    assert "0.4.9" in reason and "pygit2" in reason and "torch-fsdp" in reason


def test_indexed_optimizer_state_is_dense_and_in_model_order() -> None:
    """Name-keyed state from any backend becomes index-keyed state in the model's order.

    fairscale before 0.3.7 pairs ``state`` entries with parameters by position, and torch
    pairs ``param_groups`` entries by position, so another backend's order (or a parameter
    without state) must not shift anything.  The load itself runs in test_checkpoint.py.
    """
    from shardcompat.backends._fairscale_common import (
        indexed_optimizer_state,
        named_optimizer_state,
    )

    names = ["a.weight", "a.bias", "b.weight"]
    saved = {
        "state": {"b.weight": {"step": torch.tensor(2.0)}, "a.weight": {"step": torch.tensor(1.0)}},
        "param_groups": [{"lr": 0.1, "params": ["b.weight", "a.weight", "a.bias"]}],
    }
    indexed = indexed_optimizer_state(saved, names)
    assert list(indexed["state"]) == [0, 1, 2]
    assert indexed["state"][1] == {}
    assert float(indexed["state"][0]["step"]) == 1.0 and float(indexed["state"][2]["step"]) == 2.0
    assert indexed["param_groups"] == [{"lr": 0.1, "params": [0, 1, 2]}]
    back = named_optimizer_state(indexed, names)
    assert set(back["state"]) == set(names) and back["param_groups"][0]["params"] == names
    with pytest.raises(KeyError, match=r"c\.weight"):
        indexed_optimizer_state({"state": {"c.weight": {}}, "param_groups": []}, names)
