"""The fairscale facade trains exactly like plain DDP, with or without fairscale installed.

One spawn (2 gloo ranks) runs every loop in ``_scenarios``; whichever implementation the
probes choose here (fairscale where it works, native torch otherwise) must match DDP within
``FP32_TOL``.  Run this file under /tmp/venv (native) and under a fairscale venv (fairscale).
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from shardcompat.backends import get as get_backend
from shardcompat.fairscale import _arguments, _fsdp, _oss, _scaler, _sdp, _select
from shardcompat.launch import spawn
from tests._parity import FP32_TOL, max_diff
from tests.fairscale import _scenarios

pytestmark = pytest.mark.slow

PARITY = {
    "sdp-mlp": "ddp-mlp-sgd",
    "sdp-blocks": "ddp-blocks-sgd",
    "sdp-mlp-optimizer-zero-grad": "ddp-mlp-sgd",
    "sdp-blocks-no-bucket": "ddp-blocks-sgd",
    "sdp-mlp-clip": "ddp-mlp-sgd-clip",
    "fsdp-mlp": "ddp-mlp-adam",
    "fsdp-blocks": "ddp-blocks-adam",
    "fsdp-blocks-zero2-unflat": "ddp-blocks-adam",
    "fsdp-mlp-clip": "ddp-mlp-adam-clip",
    "fsdp-mlp-acc": "ddp-mlp-adam-acc",
    "wrapped-blocks": "ddp-blocks-adam",
    "sdp-blocks-fp16": "ddp-blocks-fp16",
}


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    names = [*_scenarios.SDP_CASES, *_scenarios.FSDP_CASES]
    out: dict[str, Any] = spawn(_scenarios.run, 2, (names,), timeout=240)[0]
    return out


def _ok(results: dict[str, Any], name: str) -> dict[str, Any]:
    got = results[name]
    assert isinstance(got, dict), f"{name} failed: {got}"
    return got


@pytest.mark.parametrize("case", PARITY)
def test_documented_loop_matches_ddp(results: dict[str, Any], case: str) -> None:
    got, want = _ok(results, case), _ok(results, PARITY[case])
    loss_diff = max(abs(a - b) for a, b in zip(got["losses"], want["losses"], strict=True))
    assert loss_diff <= FP32_TOL, f"{case}: losses {got['losses']} vs DDP {want['losses']}"
    assert max_diff(got["state"], want["state"]) <= FP32_TOL, f"{case}: final parameters differ from DDP"
    assert want["losses"][-1] < want["losses"][0], "the reference did not learn; the test would prove nothing"
    for a, b in zip(got.get("norms", []), want["norms"], strict=True):
        assert abs(a - b) <= FP32_TOL * max(1.0, b), f"{case}: clip norms {got['norms']} vs DDP {want['norms']}"


def test_consolidated_oss_state_is_the_full_optimizer_state(results: dict[str, Any]) -> None:
    got, want = _ok(results, "sdp-mlp")["optim"], _ok(results, "ddp-mlp-sgd")["optim"]
    assert sorted(got["state"]) == sorted(want["state"]), "consolidated state misses parameters"
    for index, state in want["state"].items():
        diff = (got["state"][index]["momentum_buffer"] - state["momentum_buffer"]).abs().max()
        assert diff <= FP32_TOL, f"momentum of parameter {index} differs by {diff}"


def test_clip_grad_norm_returns_the_global_norm(results: dict[str, Any]) -> None:
    for case in ("sdp-mlp-clip", "fsdp-mlp-clip"):
        assert len(_ok(results, case)["norms"]) == _scenarios.STEPS


def test_summon_full_params_shows_full_parameters(results: dict[str, Any]) -> None:
    reference = _ok(results, "ddp-blocks-adam")["state"]
    for case in ("fsdp-blocks", "fsdp-blocks-zero2-unflat"):
        shapes = _ok(results, case)["full_shapes"]
        assert shapes == {n: tuple(reference[n].shape) for n in shapes}, case
        assert sum(torch.Size(s).numel() for s in shapes.values()) == sum(
            reference[n].numel() for n in shapes
        ), f"{case}: summon_full_params does not show every element"


def test_gather_full_optim_state_dict_on_rank0(results: dict[str, Any]) -> None:
    n_params = len([k for k in _ok(results, "ddp-mlp-adam")["state"]])
    assert _ok(results, "fsdp-mlp")["optim_states"] == n_params


def test_sharded_grad_scaler_skips_an_overflow_on_every_rank(results: dict[str, Any]) -> None:
    """An inf in rank 0's shard only: every rank skips that step and backs off, as under DDP.

    (With a plain ``GradScaler`` rank 0 skips while rank 1 steps and broadcasts: the ranks'
    collectives no longer match and training hangs until the gloo timeout.)"""
    got, want = _ok(results, "sdp-blocks-fp16"), _ok(results, "ddp-blocks-fp16")
    assert got["scaler"].endswith("ShardedGradScaler"), got["scaler"]
    assert got["scales"] == want["scales"], f"loss scales {got['scales']} vs DDP {want['scales']}"
    inf_step = _scenarios.INF_STEP
    assert want["scales"][inf_step] == want["scales"][0] / 2, "the overflow was not seen; the test proves nothing"


def test_fsdp_checkpoint_round_trip_as_fairscale_documents(results: dict[str, Any]) -> None:
    """``state_dict`` + ``gather_full_optim_state_dict`` -> fresh model + ``get_shard_from_optim_state_dict``:
    the resumed run continues exactly like the uninterrupted one (FP32_TOL)."""
    got = _ok(results, "fsdp-blocks-resume")
    diff = max(abs(a - b) for a, b in zip(got["losses"], got["resumed"], strict=True))
    assert diff <= FP32_TOL, f"resumed losses {got['resumed']} vs uninterrupted {got['losses']}"
    assert max_diff(got["state"], got["resumed_state"]) <= FP32_TOL
    assert got["losses"][-1] < got["losses"][0]


def test_auto_wrap_really_wraps(results: dict[str, Any]) -> None:
    # root + the embedding, both blocks' sub-layers and the head: more than the root alone
    assert _ok(results, "wrapped-blocks")["units"] >= 3


def test_unhonourable_argument_raises_clearly() -> None:
    with pytest.raises(_arguments.UnsupportedArgument, match=r"process_group_reduce_scatter.*reduce-scatters"):
        _fsdp.torch_kwargs(_native_fsdp_defaults(process_group_reduce_scatter=object()), cuda=False)


def test_harmless_argument_warns_once() -> None:
    _arguments._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            _fsdp.torch_kwargs(_native_fsdp_defaults(bucket_cap_mb=50), cuda=False)
    hits = [w for w in caught if issubclass(w.category, _arguments.FairscaleArgumentWarning)]
    assert len(hits) == 1 and "bucket_cap_mb=50" in str(hits[0].message)


def test_fairscale_arguments_map_to_torch() -> None:
    from torch.distributed import fsdp

    kw = _fsdp.torch_kwargs(_native_fsdp_defaults(reshard_after_forward=False, mixed_precision=True,
                                                  fp32_reduce_scatter=True, flatten_parameters=False), cuda=False)
    assert kw["sharding_strategy"] is fsdp.ShardingStrategy.SHARD_GRAD_OP
    assert kw["use_orig_params"] is True
    assert kw["mixed_precision"] == fsdp.MixedPrecision(torch.float16, torch.float32, torch.float16)


def _native_fsdp_defaults(**changes: Any) -> dict[str, Any]:
    params = inspect.signature(_fsdp.NativeFullyShardedDataParallel.__init__).parameters
    return {**{n: p.default for n, p in params.items() if n not in ("self", "module")}, **changes}


@pytest.mark.parametrize("cls, name", [
    (_oss.NativeOSS, "OSS"),
    (_sdp.NativeShardedDataParallel, "ShardedDataParallel"),
    (_fsdp.NativeFullyShardedDataParallel, "FullyShardedDataParallel"),
    (_scaler.NativeShardedGradScaler, "ShardedGradScaler"),
])
def test_every_argument_is_in_the_table(cls: type, name: str) -> None:
    params = inspect.signature(cls.__init__).parameters
    accepted = {f"**{n}" if p.kind is p.VAR_KEYWORD else n for n, p in params.items() if n not in ("self", "module", "params")}
    assert accepted == {a.name for a in _arguments.ARGUMENTS if a.cls == name}


def test_docs_carry_the_generated_table() -> None:
    text = (Path(__file__).parents[2] / "docs" / "fairscale-facade.md").read_text()
    assert _arguments.markdown_table() in text, "regenerate docs/fairscale-facade.md (see its header)"


def test_describe_names_every_class() -> None:
    lines = _select.describe()
    for name in _select.FAMILIES:
        assert any(line.startswith(f"{name}: ") for line in lines), lines
    import shardcompat.fairscale as facade

    assert f"__version__: {facade.__version__} (" in lines[-1]


@pytest.mark.fairscale
def test_real_fairscale_serves_sharded_ddp_where_it_works(results: dict[str, Any]) -> None:
    probe = get_backend("fairscale-sdp").probe()
    if not probe:
        pytest.skip(f"fairscale-sdp unusable here: {probe.reason}")
    if _select.setting() == "native":
        pytest.skip(f"{_select.ENV}=native")
    oss_module, sdp_module = _ok(results, "sdp-mlp")["classes"]
    assert oss_module.startswith("fairscale.") and sdp_module == "shardcompat.fairscale._sdp"
    assert _select.choose("sdp").impl == "fairscale"


@pytest.mark.fairscale
def test_real_fairscale_serves_fsdp_where_it_works(results: dict[str, Any]) -> None:
    """Where the fairscale-fsdp probe passes (on CPU: through the compatibility layer, as for
    ``prepare``), the facade's FullyShardedDataParallel is fairscale's own class."""
    probe = get_backend("fairscale-fsdp").probe()
    if not probe:
        pytest.skip(f"fairscale-fsdp unusable here: {probe.reason}")
    if _select.setting() == "native":
        pytest.skip(f"{_select.ENV}=native")
    expected = torch.cuda.is_available() or probe.features["cpu_compat"]
    assert _select.choose("fsdp").impl == ("fairscale" if expected else "native")
    for case in ("fsdp-mlp", "fsdp-blocks", "fsdp-blocks-zero2-unflat"):
        assert _ok(results, case)["fairscale"] is expected, case


def test_sharded_ddp_refuses_an_optimizer_it_cannot_drive() -> None:
    model = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"shardcompat\.fairscale\.OSS"):
        _sdp.NativeShardedDataParallel(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_native_scaler_keeps_fairscale_signature() -> None:
    scaler = _scaler.NativeShardedGradScaler(init_scale=2.0**10, growth_interval=10)
    assert scaler.get_scale() == 2.0**10 and scaler.get_growth_interval() == 10
