"""prepare()'s errors, and resolve() choosing the native backend by capability."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from shardcompat import adapter
from shardcompat.adapter import PrepareError, prepare
from shardcompat.backends import NoBackendAvailable, Placement, get, resolve
from shardcompat.launch import spawn
from shardcompat.options import parse_options
from tests._parity import MLP, BlockModel

TWO = Placement(world_size=2, local_world_size=2)
TWO_NODES = Placement(world_size=4, local_world_size=2)


def _sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1)


def test_optimizer_instance_is_refused_with_the_factory_form() -> None:
    model = MLP()
    with pytest.raises(PrepareError, match=r"optimizer instance \(SGD\).*lambda params: torch\.optim"):
        prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), "zero_dp_3")


def test_prepare_before_init_process_group_says_how() -> None:
    assert not torch.distributed.is_initialized()
    with pytest.raises(PrepareError, match="init_process_group"):
        prepare(MLP(), _sgd, "zero_dp_3")


def test_optimizer_class_with_kwargs_is_a_factory() -> None:
    factory = adapter._factory(torch.optim.SGD, {"lr": 0.5})
    assert factory([nn.Parameter(torch.zeros(1))]).defaults["lr"] == 0.5


def _in_a_group(rank: int, world: int) -> dict[str, str]:
    """Errors that need an initialised process group (world size 1, gloo)."""
    out = {}
    ddp = nn.parallel.DistributedDataParallel(MLP())
    for key, call in {
        "wrapped": lambda: prepare(ddp, _sgd, ""),
        "unknown": lambda: prepare(MLP(), _sgd, "zero_dp_3", backend="torch-fsdp9"),
        "wrap_class": lambda: prepare(BlockModel(), _sgd, "zero_dp_3 wrap=Blok", backend="torch-fsdp2"),
        "offload_fsdp1": lambda: prepare(MLP(), _sgd, "zero_dp_3 offload", backend="torch-fsdp1"),
    }.items():
        try:
            call()
            out[key] = "no error"
        except Exception as error:
            out[key] = f"{type(error).__name__}: {error}"
    out["auto"] = prepare(MLP(), _sgd, "zero_dp_3 limit_all_gathers=true").backend
    return out


@pytest.fixture(scope="module")
def errors() -> dict[str, str]:
    return spawn(_in_a_group, 1, timeout=60)[0]


def test_already_wrapped_model_is_refused(errors: dict[str, str]) -> None:
    assert errors["wrapped"].startswith("PrepareError: the model is already wrapped (DistributedDataParallel)")


def test_unknown_backend_lists_the_names(errors: dict[str, str]) -> None:
    assert "unknown backend 'torch-fsdp9'" in errors["unknown"] and "torch-fsdp2" in errors["unknown"]


def test_unknown_wrap_class_suggests_the_right_one(errors: dict[str, str]) -> None:
    assert errors["wrap_class"].startswith("WrapClassNotFound")
    assert "did you mean 'Block'?" in errors["wrap_class"]


def test_fsdp1_offload_on_cpu_says_what_to_do(errors: dict[str, str]) -> None:
    text = errors["offload_fsdp1"]
    assert text.startswith("NoBackendAvailable") and "needs an accelerator" in text
    assert "backend=torch-fsdp2" in text


def test_prepare_auto_falls_back_to_fsdp1(errors: dict[str, str]) -> None:
    assert errors["auto"] == "torch-fsdp1"


@pytest.mark.parametrize(
    ("options", "backend"),
    [
        ("", "torch-zero"),
        ("zero_dp_1", "torch-zero"),
        ("simple", "torch-zero"),
        ("zero_dp_2", "torch-fsdp2"),
        ("zero_dp_3 auto_wrap", "torch-fsdp2"),
        ("zero_dp_3 offload", "torch-fsdp2"),  # FSDP1 offload would need an accelerator
        ("no_shard", "torch-fsdp1"),
        ("zero_dp_3 limit_all_gathers=true", "torch-fsdp1"),
        ("zero_dp_3 backward_prefetch=post", "torch-fsdp1"),
        ("zero_dp_3 backward_prefetch=pre", "torch-fsdp2"),
    ],
)
def test_resolve_picks_by_capability(options: str, backend: str) -> None:
    assert resolve(parse_options(options), "auto", TWO).backend == backend


def test_resolve_torch_family_names_why_not() -> None:
    with pytest.raises(NoBackendAvailable) as caught:
        resolve(parse_options("zero_dp_3 offload limit_all_gathers=true"), "torch", TWO)
    reasons = caught.value.reasons
    assert "limit_all_gathers" in reasons["torch-fsdp2"] and "accelerator" in reasons["torch-fsdp1"]
    assert "does not serve" in reasons["torch-zero"]


def test_hybrid_needs_whole_nodes() -> None:
    with pytest.raises(NoBackendAvailable, match="not a multiple of LOCAL_WORLD_SIZE 2"):
        resolve(parse_options("hybrid_shard"), "torch", Placement(world_size=3, local_world_size=2))


@pytest.mark.parametrize(
    ("options", "backend", "call"),
    [
        ("zero_dp_3 wrap=Block", "torch-fsdp1",
         "FullyShardedDataParallel(module, sharding_strategy=ShardingStrategy.FULL_SHARD, "
         "auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=torch.device('cpu'), use_orig_params=True)"),
        ("hybrid_shard_zero2 mixed_precision=bf16", "torch-fsdp1",
         "FullyShardedDataParallel(module, sharding_strategy=ShardingStrategy._HYBRID_SHARD_ZERO2, "
         "mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, "
         "buffer_dtype=torch.bfloat16), device_id=torch.device('cpu'), use_orig_params=True, "
         "device_mesh=init_device_mesh('cpu', (2, 2), mesh_dim_names=('replicate', 'shard')))"),
        ("zero_dp_2 offload", "torch-fsdp2",
         "fully_shard(module, mesh=init_device_mesh('cpu', (4,)), reshard_after_forward=False, "
         "offload_policy=CPUOffloadPolicy(pin_memory=False))"),
        ("zero_dp_1 bucket_cap_mb=1", "torch-zero",
         "DistributedDataParallel(module, bucket_cap_mb=1.0); ZeroRedundancyOptimizer(<the factory's "
         "parameter groups>, optimizer_class=<their class>, parameters_as_bucket_view=True, "
         "**<its defaults>); ddp.register_comm_hook(Owners(<the ZeroRedundancyOptimizer>), "
         "reduce_scatter_to_owners)"),
    ],
)
def test_plan_shows_the_exact_call(options: str, backend: str, call: str) -> None:
    assert get(backend).plan(parse_options(options), TWO_NODES).call == call


def test_default_auto_wrap_rule_is_stated_in_the_plan() -> None:
    notes = get("torch-fsdp1").plan(parse_options("zero_dp_3 auto_wrap"), TWO).notes
    assert any("min_num_params=100000000" in n and "_no_split_modules" in n for n in notes)


@pytest.mark.parametrize("name", ["torch-zero", "torch-fsdp1", "torch-fsdp2"])
def test_probe_finds_the_native_backends(name: str) -> None:
    probe = get(name).probe()
    assert probe, probe.reason
    assert probe.versions["torch"] == torch.__version__ and probe.features["gloo"]


def test_fsdp2_probe_names_the_import_path() -> None:
    features = get("torch-fsdp2").probe().features
    assert features.get("import:torch.distributed.fsdp") or features.get("import:torch.distributed._composable.fsdp")


@pytest.mark.parametrize(
    ("options", "backend", "stage"),
    [
        ("", "torch-zero", 0),
        ("zero_dp_1", "torch-zero", 1),
        ("simple", "torch-zero", 1),  # DDP + ZeroRedundancyOptimizer: gradients are not sharded
        ("zero_dp_2", "torch-fsdp2", 2),
        ("zero_dp_2", "torch-fsdp1", 2),
        ("zero_dp_3 offload", "torch-fsdp2", 3),
        ("no_shard", "torch-fsdp1", 0),
    ],
)
def test_plan_states_the_stage_it_really_implements(options: str, backend: str, stage: int) -> None:
    assert get(backend).plan(parse_options(options), TWO).zero_stage == stage


def test_memory_benchmark_holds_torch_zero_simple_to_stage_1() -> None:
    from benchmarks.memory import servers
    from shardcompat.memory import zero_model_bytes

    assert ("torch-zero", 1) in servers("simple", 2)
    assert zero_model_bytes(1, 100, 2) == 100 * (8 + 8 / 2)


def test_fsdp1_plan_warns_that_an_unwrapped_root_stays_gathered() -> None:
    fsdp1 = get("torch-fsdp1")
    placement = Placement(world_size=2, local_world_size=2)
    note = "stay gathered from forward until backward"
    assert any(note in n for n in fsdp1.plan(parse_options("zero_dp_3"), placement).notes)
    assert not any(note in n for n in fsdp1.plan(parse_options("zero_dp_3 auto_wrap"), placement).notes)
