"""Full model and optimizer state: original names, consolidated, and a real round trip.

Run A trains 4 steps straight. Run B trains 2 steps, takes ``full_state_dict`` and
``optimizer_state_dict``, builds a fresh model from another seed (possibly on another
backend), loads both and trains 2 more steps: its losses and final parameters must equal
A's within FP32_TOL (1e-5), which only holds if momentum/Adam state came back right.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from shardcompat.launch import spawn
from tests._parity import FP32_TOL, OPTIMIZERS, _global_mean, batch, build_model, loss_fn, max_diff

# (backend, options) saving, (backend, options) loading, model, optimizer
TRIPS = [
    (("torch-zero", ""), ("torch-zero", ""), "mlp", "sgd"),
    (("torch-zero", "zero_dp_1"), ("torch-zero", "zero_dp_1"), "mlp", "adamw"),
    (("torch-fsdp1", "zero_dp_3 auto_wrap"), ("torch-fsdp1", "zero_dp_3 auto_wrap"), "blocks", "adamw"),
    (("torch-fsdp2", "zero_dp_3 auto_wrap"), ("torch-fsdp2", "zero_dp_3 auto_wrap"), "blocks", "adamw"),
    (("torch-fsdp2", "zero_dp_3 offload"), ("torch-fsdp2", "zero_dp_3 offload"), "mlp", "sgd"),
    # across backends: the state format is backend-neutral
    (("torch-zero", "zero_dp_1"), ("torch-fsdp2", "zero_dp_3 auto_wrap"), "blocks", "adamw"),
    (("torch-fsdp1", "zero_dp_2"), ("torch-zero", "zero_dp_1"), "blocks", "sgd"),
    # two parameter groups: ZeRO numbers the parameters group after group
    (("torch-zero", "zero_dp_1"), ("torch-zero", "zero_dp_1"), "blocks", "groups"),
    (("torch-fsdp2", "zero_dp_2"), ("torch-zero", "zero_dp_1"), "blocks", "groups"),
]


def _prepare(spec: tuple[str, str], model: str, optimizer: str, seed: int) -> Any:
    import shardcompat

    backend, options = spec
    return shardcompat.prepare(build_model(model, seed), OPTIMIZERS[optimizer], options, backend=backend)


def _train(prepared: Any, model: str, rank: int, steps: range) -> list[float]:
    losses = []
    for step in steps:
        x, y = batch(model, rank, step)
        loss = loss_fn(model, prepared(x), y)
        prepared.backward(loss)
        prepared.step()
        prepared.zero_grad()
        losses.append(_global_mean(loss))
    return losses


def _local_numel(prepared: Any) -> dict[str, int]:
    seen: dict[int, int] = {}
    kinds: dict[str, int] = {}
    for kind, tensor in prepared.local_tensors():
        key = tensor.untyped_storage().data_ptr()
        if key not in seen and tensor.numel():
            seen[key] = tensor.untyped_storage().nbytes()
            kinds[kind] = kinds.get(kind, 0) + tensor.untyped_storage().nbytes() // tensor.element_size()
    return kinds


def _trip(rank: int, world: int, trips: list[Any]) -> list[dict[str, Any]]:
    out = []
    for save, load, model, optimizer in trips:
        straight = _prepare(save, model, optimizer, 0)
        losses_a = _train(straight, model, rank, range(4))
        final_a = straight.full_state_dict()
        first = _prepare(save, model, optimizer, 0)
        losses_b = _train(first, model, rank, range(2))
        state = first.full_state_dict(rank0_only=False)
        optim = first.optimizer_state_dict(rank0_only=False)
        optim_rank0 = first.optimizer_state_dict()
        local = _local_numel(first)
        second = _prepare(load, model, optimizer, 1)
        second.load_full_state_dict(state)
        second.load_optimizer_state_dict(optim)
        losses_b += _train(second, model, rank, range(2, 4))
        out.append({
            "names": [n for n, _ in build_model(model).named_parameters()],
            "matrices": [n for n, p in build_model(model).named_parameters() if p.dim() > 1],
            "state_keys": list(state), "optim": optim if rank == 0 else None,
            "optim_rank0_empty": optim_rank0 == {} if rank else set(optim_rank0["state"]) == set(optim["state"]),
            "losses": (losses_a, losses_b), "final": (final_a, second.full_state_dict()),
            "local": local, "total": sum(p.numel() for p in build_model(model).parameters()),
        })
    return out


@pytest.fixture(scope="module")
def trips() -> list[dict[str, Any]]:
    return spawn(_trip, 2, (TRIPS,), timeout=200)


def _id(trip: Any) -> str:
    (b1, o1), (b2, o2), model, optimizer = trip
    return f"{b1}[{o1}]->{b2}[{o2}]-{model}-{optimizer}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("index", range(len(TRIPS)), ids=[_id(t) for t in TRIPS])
def test_round_trip_continues_training_exactly(trips: list[Any], index: int) -> None:
    got = trips[0][index]
    losses_a, losses_b = got["losses"]
    assert max(abs(a - b) for a, b in zip(losses_a, losses_b)) <= FP32_TOL, (losses_a, losses_b)
    assert max_diff(*got["final"]) <= FP32_TOL
    assert all(t[index]["optim_rank0_empty"] for t in trips), "rank0_only did not hold"


@pytest.mark.parametrize("index", range(len(TRIPS)), ids=[_id(t) for t in TRIPS])
def test_state_is_keyed_by_original_names(trips: list[Any], index: int) -> None:
    got = trips[0][index]
    names = got["names"]
    assert got["state_keys"] == names
    optim = got["optim"]
    if TRIPS[index][3] == "groups":
        matrices = got["matrices"]
        assert [g["params"] for g in optim["param_groups"]] == [matrices, [n for n in names if n not in matrices]]
        assert [(g["lr"], g["weight_decay"]) for g in optim["param_groups"]] == [(1e-2, 0.1), (3e-3, 0.0)]
    else:
        assert [n for g in optim["param_groups"] for n in g["params"]] == names
    assert set(optim["state"]) == set(names)
    first = optim["state"][names[0]]
    key = "momentum_buffer" if TRIPS[index][3] == "sgd" else "exp_avg"
    assert isinstance(first[key], torch.Tensor) and first[key].device.type == "cpu"


@pytest.mark.parametrize("index", [1, 2, 3], ids=[_id(TRIPS[i]) for i in (1, 2, 3)])
def test_local_tensors_see_only_this_ranks_shard(trips: list[Any], index: int) -> None:
    """Sharded optimizer state (and for zero_dp_3 parameters) is about half the model per rank."""
    for rank_result in trips:
        got = rank_result[index]
        total, local = got["total"], got["local"]
        assert local["optim"] < 2 * total * 0.8, local  # AdamW holds 2 tensors per parameter
        if TRIPS[index][0][1].startswith("zero_dp_3"):
            assert local["param"] < total * 0.8, local
        else:
            assert local["param"] == total, local
