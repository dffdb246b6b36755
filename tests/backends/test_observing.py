"""Observing is read-only at the source: probing, planning, explaining and ``prepare()`` leave the
torch, NumPy and Python random streams where they were, on every rank, the first time too.

Each rank is a new process (``spawn``), so every probe runs its first, uncached call here, the
one that once built a layer on the global generator (fairscale's state-dict probe, issue 38).
The fairscale sessions run this file too (noxfile ``FAIRSCALE_TESTS``), where the fairscale
backends and the facade probe for real; without fairscale they give their reason instead.
A second test plants a probe that draws from every stream and checks that the registry's guard,
not the probe's good manners, keeps the streams: the class of bug, not the instance.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy
import pytest
import torch

import shardcompat
from shardcompat import backends
from shardcompat.backends import Placement
from shardcompat.launch import spawn
from shardcompat.options import parse_options
from tests._parity import OPTIMIZERS, build_model

OPTIONS = ["simple", "zero_dp_2", "zero_dp_3", "zero_dp_2 offload", "zero_dp_3 auto_wrap",
           "zero_dp_3 offload auto_wrap", "full_shard auto_wrap"]


def fingerprint() -> dict[str, str]:
    def short(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()[:16]

    return {
        "torch": short(torch.get_rng_state().numpy().tobytes()),
        "python": short(repr(random.getstate()).encode()),
        "numpy": short(repr(numpy.random.get_state()).encode()),
    }


def _seed(rank: int) -> None:
    torch.manual_seed(rank)
    random.seed(rank)
    numpy.random.seed(rank)


def _observe(rank: int, world: int) -> dict[str, Any]:
    """On one rank: the streams around every way of looking, then around each prepare()."""
    from shardcompat.explain import explain
    from shardcompat.fairscale import _select

    _seed(rank)
    first = fingerprint()
    probes = [bool(p) for p in backends.probe_all()]
    for name in backends.candidates("auto"):
        impl = backends.get(name)
        impl.probe()
        for options in OPTIONS:
            backends.assess(name, parse_options(options), Placement())
    for options in OPTIONS:
        explain(options, nproc=world, nnodes=1)
        explain(options, backend="fairscale-fsdp", nproc=world, nnodes=1, fairscale=True)
    for family in ("sdp", "fsdp", "scaler"):
        _select.choose(family)
    looked = fingerprint()

    prepared: dict[str, bool] = {}
    for name in backends.candidates("auto"):
        for options in OPTIONS:
            if not isinstance(backends.assess(name, parse_options(options), Placement()), backends.Plan):
                continue
            model = build_model("blocks", seed=rank)  # draws: the streams move here, by the user's doing
            before = fingerprint()
            shardcompat.prepare(model, OPTIMIZERS["adamw"], options, backend=name)
            prepared[f"{name} {options}"] = fingerprint() == before
    return {"first": first, "looked": looked, "probes": probes, "prepared": prepared}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_probe_plan_explain_and_prepare_leave_every_random_stream_on_every_rank() -> None:
    results = spawn(_observe, 2, fresh=True)
    for rank, result in enumerate(results):
        assert result["looked"] == result["first"], f"rank {rank}: probing/planning/explaining drew from a stream"
        moved = [key for key, same in result["prepared"].items() if not same]
        assert not moved, f"rank {rank}: prepare() moved the random streams for {moved}"
        assert result["prepared"], "no backend could prepare anything: nothing was checked"
    assert results[0]["first"] != results[1]["first"], "the ranks' streams must differ for the check to see them"


@pytest.fixture
def drawing_probe(monkeypatch: pytest.MonkeyPatch) -> Any:
    """torch-zero's probe, made to draw from every stream as a careless probe would."""
    impl = backends.get("torch-zero")
    real = impl.probe

    def careless() -> Any:
        torch.nn.Linear(4, 4)  # default init draws from torch's generator
        random.random()
        numpy.random.rand()
        return real()

    monkeypatch.setattr(impl, "probe", careless)
    backends._probe.cache_clear()
    yield
    backends._probe.cache_clear()


def test_the_registry_keeps_the_streams_even_when_a_probe_draws(drawing_probe: Any) -> None:
    _seed(7)
    before = fingerprint()
    plan = backends.resolve(parse_options("simple"), "torch-zero", Placement())
    assert plan.backend == "torch-zero"
    assert fingerprint() == before
    backends.get("torch-zero").probe()  # called directly, it does draw: the guard is what kept them
    assert fingerprint() != before
