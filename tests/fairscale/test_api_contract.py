"""fairscale's own test suite, as a contract: the behaviours its tests expect, on 2 gloo ranks.

One spawn runs every case of ``_api_scenarios`` through whichever implementation serves the
facade here (real fairscale where it works, native torch otherwise); run this file with and
without fairscale installed.  Each test names the fairscale test whose behaviour it holds.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch

from shardcompat.launch import spawn
from tests._parity import FP32_TOL, STEPS, max_diff
from tests.fairscale import _api_scenarios

pytestmark = pytest.mark.slow


def _unless_fairscale_has(family: str, feature: str, has: Callable[[Any], bool]) -> pytest.MarkDecorator:
    """Skip where a real fairscale release older than the contract's serves ``family``.

    The contract is fairscale 0.4.13's API. The facade serves the installed fairscale where it
    works, and an older release (0.1.7, 0.3.x) brings that release's API with it; which one is
    told by the feature the test needs, not by version numbers.
    """
    from shardcompat.fairscale._arguments import FAIRSCALE
    from shardcompat.fairscale._select import choose

    if choose(family).impl != FAIRSCALE:
        return pytest.mark.skipif(False, reason="")
    module = importlib.import_module("fairscale.optim" if family == "sdp" else "fairscale.nn")
    version = importlib.metadata.version("fairscale")
    return pytest.mark.skipif(not has(module), reason=(
        f"real fairscale {version} serves this here and predates the contract's API (fairscale 0.4.13): "
        f"it has no {feature}"))


_SDP_0413 = _unless_fairscale_has(
    "sdp", "OSS.state_dict(all_ranks=)", lambda m: "all_ranks" in inspect.signature(m.OSS.state_dict).parameters)
_FSDP_0413 = _unless_fairscale_has(
    "fsdp", "gradient_predivide_factor or non_shared_params",
    lambda m: "gradient_predivide_factor" in inspect.signature(m.FullyShardedDataParallel).parameters
    and hasattr(m.FullyShardedDataParallel, "non_shared_params"))


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    # A collective that never completes fails in 120 s naming its rank (CI once saw this spawn hang
    # on fairscale 0.3.0 until the 300 s test limit, with nothing said of where).
    out: dict[str, Any] = spawn(_api_scenarios.run, 2, (list(_api_scenarios.CASES),), timeout=280,
                                collective_timeout=120)
    return {name: [rank[name] for rank in out] for name in _api_scenarios.CASES}


def _ok(results: dict[str, Any], name: str, rank: int = 0) -> Any:
    got = results[name][rank]
    assert not isinstance(got, str), f"{name} failed on rank {rank}: {got}"
    return got


def _same_training(got: dict[str, Any], want: dict[str, Any], what: str) -> None:
    diff = max(abs(a - b) for a, b in zip(got["losses"], want["losses"], strict=True))
    assert diff <= FP32_TOL, f"{what}: losses {got['losses']} vs reference {want['losses']}"
    assert max_diff(got["state"], want["state"]) <= FP32_TOL, f"{what}: final parameters differ"
    assert want["losses"][-1] != want["losses"][0], f"{what}: the reference did not train"


# -- OSS: tests/optim/test_oss.py, test_sharded_ddp_features.py ---------------------------------

@_SDP_0413
def test_oss_trains_parameters_of_mixed_dtypes(results: dict[str, Any]) -> None:
    """test_mixed_types: a frozen int64 parameter beside float ones is accepted, and used."""
    runs = _ok(results, "mixed_dtypes")
    _same_training(runs["facade"], runs["ddp"], "OSS + ShardedDataParallel with an int64 parameter")


@_SDP_0413
def test_oss_state_after_load_is_a_dict_for_every_parameter(results: dict[str, Any]) -> None:
    """test_collect_shards: after ``load_state_dict`` every ``optimizer.state`` value is a dict
    (``{}`` for the parameters other ranks step), and the loaded state resumes exactly."""
    for rank in (0, 1):
        got = _ok(results, "oss_reload", rank)
        assert got["states_are_dicts"], f"rank {rank}: optimizer.state holds None"
        # fairscale empties the other ranks' entries of the caller's dict; the native OSS does not.
        assert got["input_untouched"] or not got["native"], f"rank {rank}: load_state_dict changed the input"
        assert got["lr"] == 0.05, "the loaded param_groups did not replace the new optimizer's lr"
        assert max_diff(got["resumed"], got["uninterrupted"]) == 0.0, "the resumed run differs"


@_SDP_0413
def test_oss_state_dict_all_ranks_is_the_same_everywhere(results: dict[str, Any]) -> None:
    """test_collect_shards: ``state_dict(all_ranks=True)`` gives every rank the full state."""
    first, second = (_ok(results, "oss_reload", rank) for rank in (0, 1))
    assert len(first["all_ranks"]) == first["n_params"]
    for index, momentum in first["all_ranks"].items():
        assert torch.equal(momentum, second["all_ranks"][index]), f"parameter {index} differs between ranks"


def test_oss_partition_balances_and_covers(results: dict[str, Any]) -> None:
    """test_sharding: sizes [9, 7, 5, 3] per rank give every rank the same number of elements."""
    for rank in (0, 1):
        got = _ok(results, "oss_partition", rank)
        assert got["sizes"] == [24, 24] and got["covered"] and got["local_is_partition"], got
        assert got["per_device"] == {"cpu": True}, got


# -- ShardedDataParallel: test_sharded_ddp_features.py, test_sharded_ddp_pytorch_parity.py ------

@_SDP_0413
@pytest.mark.parametrize("case, reference", [
    ("manual_reduce", "ddp-mlp-sgd"),
    ("manual_reduce-acc-bucket", "ddp-mlp-sgd-acc"),
])
def test_manual_reduction_matches_ddp(results: dict[str, Any], case: str, reference: str) -> None:
    """test_ddp_parity(manual_reduction=True): backward under ``no_sync()``, then ``reduce()``."""
    _same_training(_ok(results, case), _ok(results, reference), case)


@_SDP_0413
def test_sharded_ddp_forwards_attributes_and_refuses_grad_of_grad(results: dict[str, Any]) -> None:
    """test_random_attributes, test_ddp_attributes, test_catch_grad_grad; ``zero_grad()`` zeroes."""
    got = _ok(results, "sdp_surface")
    assert got["banana"] == "sweet" and got["orange"] is False and got["ddp_attributes"], got
    assert got["zeroed"], "zero_grad() left gradients, or dropped every gradient tensor"
    assert got["grad_of_grad"] is not None and "gradients that don't require grad" in got["grad_of_grad"]


@_SDP_0413
def test_unfreezing_a_parameter_mid_training(results: dict[str, Any]) -> None:
    """test_ddp_parity(change_train_graph=True): a parameter unfrozen after the first step has
    its gradient averaged from then on (``auto_refresh_trainable``)."""
    runs = _ok(results, "trainability_change")
    _same_training(runs["facade"], runs["by_hand"], "unfrozen mid-training")


def test_sync_buffers_broadcasts_rank0(results: dict[str, Any]) -> None:
    assert _ok(results, "sync_buffers", 0) == _ok(results, "sync_buffers", 1) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("case", ["two_optimizers-bucket", "two_optimizers-no-bucket"])
def test_two_sharded_optimizers_match_ddp(results: dict[str, Any], case: str) -> None:
    """test_ddp_parity_two_optim (CUDA there), on CPU: fairscale itself fails it with a bucket
    (torch 2's zero_grad cuts the bucket views); the facade fixes that."""
    runs = _ok(results, case)
    _same_training(runs["facade"], runs["ddp"], case)


# -- FullyShardedDataParallel: test_fsdp_state_dict.py, test_fsdp_metadata.py, test_wrap.py -----

@pytest.mark.parametrize("flatten", [True, False])
def test_local_state_dict_round_trip_and_consolidation(results: dict[str, Any], flatten: bool) -> None:
    """test_load_local_state_dict, test_consolidation: one file per rank, in fairscale's layout,
    reloads exactly, and consolidates offline into the full state dict."""
    for rank in (0, 1):
        got = _ok(results, f"local_checkpoint-{'flat' if flatten else 'unflat'}", rank)
        if flatten:
            assert {"flat_param_0", "inner.flat_param_0"} <= set(got["local_keys"]), got["local_keys"]
        else:
            assert "inp.weight" in got["local_keys"] and "inner.0.weight" in got["local_keys"]
        assert max_diff(got["moved"], got["full"]) > 0, "training after the save changed nothing"
        assert max_diff(got["restored"], got["full"]) == 0.0, "load_local_state_dict did not restore"
        assert max_diff(got["fresh"], got["full"]) == 0.0, "a fresh model did not load the local state"
        assert got["strict"] is not None, "an incomplete local state dict was loaded"
        assert "missing" in got["strict"].lower() or not got["native"], got["strict"]
    # Consolidation takes the (unsharded) buffers from rank 0's file, as fairscale documents.
    got = _ok(results, f"local_checkpoint-{'flat' if flatten else 'unflat'}", 0)
    assert max_diff(got["consolidated"], got["full"]) == 0.0, "consolidation differs from state_dict()"
    assert max_diff(got["unwrapped"], got["full"]) == 0.0, "the unwrapped model did not load it"


def test_module_keyword_and_subclassed_state_dict(results: dict[str, Any]) -> None:
    """test_local_state_dict_calls_state_dict_recursion: ``FullyShardedDataParallel(module=...)``,
    and a subclass whose ``state_dict`` calls ``local_state_dict`` does not recurse."""
    keys = _ok(results, "keyword_module")["keys"]
    assert keys == ["flat_param_0"], keys


@_FSDP_0413
def test_gradient_divide_factors(results: dict[str, Any]) -> None:
    """``set_gradient_divide_factors(1, 1)`` sums gradients: the step is world size times DDP's;
    ``gradient_predivide_factor=2`` averages them as the default does."""
    got = _ok(results, "divide_factors")
    deltas = got["deltas"]
    assert max_diff(deltas["predivided"], deltas["default"]) <= FP32_TOL
    doubled = {k: 2 * v for k, v in deltas["default"].items()}
    assert max_diff(deltas["summed"], doubled) <= FP32_TOL
    assert got["factors"]["summed"] == (1.0, 1.0) and got["factors"]["predivided"] == (2.0, 1.0)


@_FSDP_0413
def test_fsdp_states_attributes_and_refusals(results: dict[str, Any]) -> None:
    """TrainingState after a step and inside summon_full_params (test_fsdp.py), get_fsdp_instances,
    fairscale's attributes and defaults, reset_parameters refused by default."""
    got = _ok(results, "fsdp_surface")
    assert got["idle"] == [True, True] and got["instances"] == 2 and got["non_empty"] == 1, got
    assert got["assert_state"] is not None and "SUMMON_FULL_PARAMS" in got["assert_state"]
    assert got["summoned"]
    assert got["reset"] is not None and "not allowed" in got["reset"], got["reset"]
    assert got["attributes"] == {
        "flatten_parameters": True, "reshard_after_forward": True, "move_params_to_cpu": False,
        "move_grads_to_cpu": False, "compute_dtype": torch.float32, "buffer_dtype": torch.float32,
        "fp32_reduce_scatter": False, "bucket_cap_mb": 25, "world_size": 2, "rank": 0,
    }
    assert got["flags"] == {"mixed_precision": False, "cpu_offload": False}


def test_wrap_defaults_and_overrides(results: dict[str, Any]) -> None:
    """test_wrap, test_wrap_override_defaults; config_auto_wrap_policy wraps the tagged module."""
    got = _ok(results, "wrap_overrides")
    assert got["default"][1] is False and got["overridden"] is True, got
    assert got["tagged"] == [False, True] and got["tagged_flat"] is False, got


def test_fsdp_over_checkpoint_wrapper_matches_ddp(results: dict[str, Any]) -> None:
    """test_fsdp_with_checkpoint_wrapper: FSDP units over checkpointed blocks train as DDP."""
    _same_training(_ok(results, "checkpointed_fsdp"), _ok(results, "ddp-blocks-adam"), "checkpointed blocks")


def test_auto_wrap_bn_units_train_as_ddp(results: dict[str, Any]) -> None:
    """auto_wrap_bn (test_fsdp_regnet's recipe): batch norm in its own full-precision unit."""
    runs = _ok(results, "batch_norm_units")
    assert runs["bn_unit"] == (True, False), runs["bn_unit"]
    _same_training(runs["facade"], runs["ddp"], "auto_wrap_bn")
    assert len(runs["facade"]["losses"]) == STEPS
