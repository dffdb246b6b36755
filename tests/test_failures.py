"""Options at odds with the situation are refused with the fix: by the planner, or by prepare
before it wraps anything (a dead or stalled rank: tests/test_launch_failures.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import shardcompat
from shardcompat import PrepareError, parse_options
from shardcompat.backends import NoBackendAvailable, Placement, get, resolve
from shardcompat.launch import spawn
from tests._parity import build_model


def _refusal(options: str, backend: str, placement: Placement) -> str:
    with pytest.raises(NoBackendAvailable) as info:
        resolve(parse_options(options), backend, placement)
    return str(info.value)


CPU2 = Placement(world_size=2, rank=0, local_world_size=2, device="cpu")


def test_offload_on_fsdp1_cpu_points_to_fsdp2() -> None:
    message = _refusal("zero_dp_3 offload", "torch-fsdp1", CPU2)
    assert "needs an accelerator" in message and "torch-fsdp2" in message, message


@pytest.mark.parametrize("backend", ["torch-fsdp1", "torch-fsdp2"])
def test_hybrid_shard_on_one_node_is_refused(backend: str) -> None:
    message = _refusal("zero_dp_3 hybrid_shard", backend, CPU2)
    assert "node" in message and "zero_dp_3" in message, message


def test_fairscale_fsdp_without_cuda_explains() -> None:
    try:
        backend = get("fairscale-fsdp")
    except ImportError as error:
        pytest.skip(f"the fairscale-fsdp backend is not on main yet ({error})")
    probe = backend.probe()
    if not probe:
        assert "fairscale" in probe.reason, probe.reason
        pytest.skip(f"fairscale FSDP cannot be probed for CUDA here: {probe.reason}")
    try:
        plan = resolve(parse_options("zero_dp_3"), "fairscale-fsdp", CPU2)
    except NoBackendAvailable as error:
        assert "CUDA" in str(error) or "cuda" in str(error), error
    else:  # served on CPU through the compatibility layer: the plan must say so
        assert any("CPU" in note or "compat" in note for note in plan.notes), plan.explain()


def test_fairscale_fsdp_the_cpu_layer_does_not_fit_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release the CPU layer does not fit (none of 0.3.0-0.4.13 is one, so simulated by
    making the layer's own check say no): refused on CPU, naming CUDA and the native backends."""
    from shardcompat.backends import _fairscale_cpu

    probe = get("fairscale-fsdp").probe()
    if not probe:
        pytest.skip(f"fairscale-fsdp unusable here: {probe.reason}")
    monkeypatch.setattr(_fairscale_cpu, "supported", lambda module: False)
    with pytest.raises(NoBackendAvailable) as info:
        resolve(parse_options("zero_dp_3"), "fairscale-fsdp", CPU2)
    message = str(info.value)
    assert "FSDP needs CUDA" in message and "Run on a GPU" in message and "torch-fsdp2 on CPU" in message, message


def test_optimizer_instance_is_refused_with_the_factory_form() -> None:
    model = build_model("mlp")
    with pytest.raises(PrepareError) as info:
        shardcompat.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), "zero_dp_3")
    message = str(info.value)
    assert "optimizer instance (SGD)" in message and "optimizer=lambda params:" in message, message


def test_prepare_before_init_process_group() -> None:
    assert not dist.is_initialized()
    with pytest.raises(PrepareError, match=r"init_process_group.*shardcompat\.launch\.spawn"):
        shardcompat.prepare(build_model("mlp"), torch.optim.SGD, "zero_dp_3", optimizer_kwargs={"lr": 0.1})


def _wrapped(rank: int, world: int) -> dict[str, str]:
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    wrappers = {
        "ddp": lambda m: nn.parallel.DistributedDataParallel(m),
        "fsdp1": lambda m: FullyShardedDataParallel(m, use_orig_params=True, device_id=torch.device("cpu")),
        "fsdp2": lambda m: fully_shard(m),
    }
    out = {}
    for label, wrap in wrappers.items():
        try:
            shardcompat.prepare(wrap(build_model("mlp")), torch.optim.SGD, "zero_dp_3",
                                optimizer_kwargs={"lr": 0.1})
        except PrepareError as error:
            out[label] = str(error)
        else:
            out[label] = "(accepted)"
    return out


@pytest.mark.slow
def test_already_wrapped_model_is_refused() -> None:
    messages = spawn(_wrapped, 2, timeout=120, collective_timeout=30)[0]
    for label, name in (("ddp", "DistributedDataParallel"), ("fsdp1", "FullyShardedDataParallel"),
                        ("fsdp2", "FSDP")):
        message = messages[label]
        assert f"already wrapped ({name}" in message, f"{label}: {message}"
        assert "pass the plain nn.Module" in message, message
