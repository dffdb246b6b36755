"""The memory planner: the ZeRO paper's arithmetic, the fit ladder, counting a model on the
meta device, and the estimate against what ``shardcompat train`` measures on real ranks."""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from torch import nn

from shardcompat import cli
from shardcompat._explain_memory import MemoryInputError, load_model, parse_count, parse_size
from shardcompat.options import parse_options
from shardcompat.planner import Layout, estimate, layout_of
from shardcompat.train.models import GPT, ModelConfig, count_parameters

PSI = 7_500_000_000  # the ZeRO paper's Table 1: 7.5B parameters on Nd = 64 ranks


def explain(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(["explain", *argv])
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


def explain_json(*argv: str) -> dict[str, Any]:
    code, out, err = explain(*argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


# --------------------------------------------------------------------------- the paper's arithmetic


@pytest.mark.parametrize(("options", "backend", "stage", "paper_gb"), [
    ("", "torch-zero", 0, 120.0),                # DDP: (2 + 2 + K)Ψ
    ("zero_dp_1", "torch-zero", 1, 31.40625),    # P_os: 4Ψ + KΨ/N          (paper: 31.4 GB)
    ("zero_dp_2", "torch-fsdp2", 2, 16.640625),  # P_os+g: 2Ψ + (2 + K)Ψ/N  (paper: 16.6 GB)
    ("zero_dp_3", "torch-fsdp2", 3, 1.875),      # P_os+g+p: (4 + K)Ψ/N     (paper: 1.9 GB)
])
def test_the_zero_paper_table_1(options: str, backend: str, stage: int, paper_gb: float) -> None:
    found = estimate(parse_options(options), backend, stage, Layout.count(PSI), 64, precision="mixed")
    assert found.total == pytest.approx(paper_gb * 1e9, rel=1e-12)
    assert found.host == 0


def test_the_parts_of_a_zero_2_peak_are_gathered_parameters_and_shards() -> None:
    """zero_dp_2 peaks after forward: full 16-bit parameters plus their shard, no gradients."""
    found = estimate(parse_options("zero_dp_2"), "torch-fsdp2", 2, Layout.count(PSI), 64, precision="mixed")
    assert found.phase == "after forward"
    assert (found.params, found.grads, found.optimizer) == (2 * PSI + 2 * PSI / 64, 0, 12 * PSI / 64)


def test_offload_moves_the_sharded_state_to_host() -> None:
    found = estimate(parse_options("zero_dp_3 offload"), "torch-fsdp2", 3, Layout.count(PSI), 64, precision="fp32")
    assert found.total == 16 * PSI / 64 and found.host == found.total and found.device == 0


@pytest.mark.parametrize(("precision", "optimizer", "per_param"), [
    ("fp32", "adamw", 16), ("bf16", "adamw", 8), ("mixed", "sgd", 12), ("fp32", "sgd", 12), ("bf16", "sgd", 6),
])
def test_bytes_per_parameter_of_each_precision_and_optimizer(precision: str, optimizer: str, per_param: int) -> None:
    found = estimate(parse_options(""), "torch-zero", 0, Layout.count(1000), 4, precision=precision,
                     optimizer=optimizer)
    assert found.total == per_param * 1000


def test_adafactor_keeps_row_and_column_statistics_and_cannot_factor_a_flat_shard() -> None:
    layout = Layout(units=(((64, 32), (32,)),))
    ddp = estimate(parse_options(""), "torch-zero", 0, layout, 2, precision="fp32", optimizer="adafactor")
    assert ddp.optimizer == 4 * (64 + 32 + 32)  # rows + columns of the matrix, the vector in full
    flat = estimate(parse_options("zero_dp_3"), "torch-fsdp1", 3, layout, 2, precision="fp32", optimizer="adafactor")
    assert flat.optimizer == 4 * (64 * 32 + 32) / 2  # FSDP1's 1-D shard: a full second moment


def test_zero_redundancy_optimizer_partitions_largest_first_and_oss_in_order() -> None:
    """Uneven partitions: the planner reports the largest rank, as each backend assigns them."""
    layout = Layout(units=(((10,), (30,), (20,), (25,)),))
    zero = estimate(parse_options("zero_dp_1"), "torch-zero", 1, layout, 2, precision="fp32", optimizer="sgd")
    assert zero.optimizer == 4 * 45  # 30 | 25, then 20 -> 25's rank, 10 -> 30's rank: 40 vs 45
    oss = estimate(parse_options("zero_dp_1"), "fairscale-sdp", 1, layout, 2, precision="fp32", optimizer="sgd")
    assert oss.optimizer == 4 * 55  # 10 | 30, then 20 -> rank 0, 25 -> rank 0 (a tie goes to the lowest)


# --------------------------------------------------------------------------- will it fit?


@pytest.mark.parametrize(("gpu", "recommended"), [
    ("200GB", ""), ("64GB", "zero_dp_1"), ("24GB", "zero_dp_2"), ("16GB", "zero_dp_3"),
])
def test_the_least_sharded_option_that_fits(gpu: str, recommended: str) -> None:
    data = explain_json("--params", "7.5B", "--nproc", "8", "--nnodes", "8", "--gpu-memory", gpu)
    assert data["parameters"] == PSI and data["recommended"] == recommended
    ladder = {c["options"]: c for c in data["fit"]["options"]}
    budget = 0.8 * parse_size(gpu)
    for row in ladder.values():
        assert row["fits"] == (row["device"] <= budget)
        assert row["over_by"] == (0 if row["fits"] else row["device"] - round(budget))
    first = list(ladder).index(recommended)
    assert not any(c["fits"] for c in list(ladder.values())[:first])


def test_nothing_fits_is_said_and_json_names_no_recommendation() -> None:
    """With the model's layout, zero_dp_3 must still gather its largest unit on the device."""
    argv = ("--model", "tests.test_planner:tied_gpt", "--nproc", "2", "--gpu-memory", "20KB", "--precision", "fp32")
    data = explain_json(*argv)
    assert data["recommended"] is None
    offload = data["fit"]["options"][-1]
    assert offload["options"] == "zero_dp_3 offload"
    assert offload["device"] == 4 * count_parameters(tied_gpt())  # unwrapped: the whole model is one unit
    code, out, _ = explain(*argv)
    assert code == 0 and "none fits" in out and "over by" in out


def test_the_estimate_fields_for_the_chosen_backend_and_every_other() -> None:
    data = explain_json("zero_dp_3", "--params", "1B", "--nproc", "4", "--precision", "fp32")
    assert data["chosen"] == "torch-fsdp2" and data["parameters"] == 10**9
    assert data["estimate"].pop("comm")["zero_model_ratio"] == 1.0
    assert data["estimate"] == {"params": 10**9, "grads": 10**9, "optimizer": 2 * 10**9, "total": 4 * 10**9,
                                "host": 0, "device": 4 * 10**9, "working": 0, "phase": "after backward"}
    fsdp1 = next(r for r in data["backends"] if r["backend"] == "torch-fsdp1")
    # unwrapped, FSDP1's root unit (the whole model) stays gathered after forward: 4Ψ + 12Ψ/N
    assert fsdp1["estimate"]["total"] == 4 * 10**9 + 12 * 10**9 / 4 and fsdp1["estimate"]["phase"] == "after forward"
    offload = explain_json("zero_dp_3 offload", "--params", "1B", "--nproc", "4", "--precision", "fp32")
    assert offload["estimate"]["host"] == offload["estimate"]["total"] == 4 * 10**9


def test_help_shows_how_to_ask_whether_a_model_fits() -> None:
    code, out, _ = explain("--help")
    assert code == 0
    assert "will my model fit?" in out and "--gpu-memory 80GB" in out and "--model" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--params", "7.5B", "--gpu-memory", "80GX"], "did you mean 80GB?"),
    (["--params", "7.5B", "--gpu-memory", "lots"], "expected a number and a unit"),
    (["--params", "seven", "--gpu-memory", "80GB"], "--params 'seven'"),
    (["--gpu-memory", "80GB"], "--gpu-memory needs the model's size"),
    (["--params", "1B", "--headroom", "1.5"], "--headroom 1.5"),
    (["--model", "shardcompat.train.models:GTP"], "did you mean 'GPT'?"),
    (["--model", "/nonexistent/config.json"], "no such file"),
])
def test_bad_input_exits_2_naming_it(argv: list[str], message: str) -> None:
    code, out, err = explain(*argv)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_sizes_and_counts() -> None:
    assert parse_size("80GB") == 80 * 10**9 and parse_size("80GiB") == 80 * 2**30 and parse_size("1.5 TB") == 15 * 10**11
    assert parse_count("7.5B") == PSI and parse_count("350M") == 350 * 10**6 and parse_count("1.5e9") == 15 * 10**8
    with pytest.raises(MemoryInputError):
        parse_count("0")


# --------------------------------------------------------------------------- counting a model


def tied_gpt() -> nn.Module:
    """A factory for ``--model tests.test_planner:tied_gpt``: the bundled GPT, head tied to the embedding."""
    model = GPT(ModelConfig(layers=3, dim=32, heads=4, vocab=50, seq_len=16))
    model.head.weight = model.tok.weight
    return model


def test_a_factory_is_built_on_the_meta_device_and_tied_weights_count_once() -> None:
    model = load_model("tests.test_planner:tied_gpt")
    assert all(p.is_meta for p in model.parameters())
    real = tied_gpt()
    untied = sum(p.numel() for _, p in real.named_parameters(remove_duplicate=False))
    assert count_parameters(real) == untied - 50 * 32
    data = explain_json("--model", "tests.test_planner:tied_gpt", "--nproc", "2")
    assert data["parameters"] == count_parameters(real)


def test_auto_wrap_names_the_modules_it_would_wrap() -> None:
    data = explain_json("zero_dp_3 auto_wrap", "--model", "tests.test_planner:tied_gpt", "--nproc", "2")
    assert data["auto_wrap"]["units"] == ["blocks.0", "blocks.1", "blocks.2"]
    model = tied_gpt()
    block = sum(p.numel() for p in model.get_submodule("blocks.0").parameters())
    assert data["auto_wrap"]["root_parameters"] == count_parameters(model) - 3 * block
    layout = layout_of(model, parse_options("zero_dp_3 auto_wrap"))
    assert layout.parameters == count_parameters(model) and len(layout.units) == 4


def _gpt2_config(path: Path, **sizes: int) -> Path:
    transformers = pytest.importorskip("transformers")
    transformers.GPT2Config(**sizes).save_pretrained(str(path))
    return path


def test_a_hugging_face_config_is_counted_like_the_model_it_builds(tmp_path: Path) -> None:
    import transformers

    config = _gpt2_config(tmp_path, n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32)
    real = transformers.GPT2LMHeadModel(transformers.GPT2Config.from_pretrained(str(config)))
    expected = sum(p.numel() for p in real.parameters())  # lm_head tied to wte: counted once
    assert explain_json("--model", str(config), "--nproc", "2")["parameters"] == expected
    assert explain_json("--model", str(config / "config.json"), "--nproc", "2")["parameters"] == expected


def test_a_1_5b_config_is_counted_in_seconds(tmp_path: Path) -> None:
    config = _gpt2_config(tmp_path, n_layer=48, n_embd=1600, n_head=25)  # GPT-2 XL's shape
    start = time.perf_counter()
    data = explain_json("zero_dp_3 auto_wrap", "--model", str(config), "--nproc", "8", "--gpu-memory", "24GB")
    assert time.perf_counter() - start < 30
    assert 1_500_000_000 < data["parameters"] < 1_600_000_000
    assert len(data["auto_wrap"]["units"]) == 48  # GPT2Block, from _no_split_modules


# --------------------------------------------------------------------------- against measurement


def _held_to_measurement(options: tuple[str, ...]) -> None:
    from benchmarks.planner import MODELS, PARTS, TOLERANCE, measure
    from shardcompat.comm import KINDS

    rows, failures = measure("small", MODELS["small"], 2, options)
    assert not failures, failures
    assert {r.backend for r in rows} >= {"torch-zero", "torch-fsdp2", "torch-fsdp1"}
    for row in rows:
        for part in (*PARTS, *KINDS):  # state parts and collective bytes by kind
            assert abs(row.ratio(part) - 1) <= TOLERANCE, (row, part)
        assert row.phase == row.planned_phase, row


@pytest.mark.timeout(300)
def test_the_planner_matches_measured_state_part_by_part_on_2_ranks() -> None:
    """Real gloo ranks: the largest rank's params, grads and optimizer state at the report's peak
    (ZeRO-1's partition, zero_dp_2's gathered parameters after forward, FSDP1's unresharded root),
    and each kind of collective bytes of a step (the root FSDP2 keeps gathered under auto_wrap)."""
    _held_to_measurement(("simple", "zero_dp_2", "zero_dp_3 auto_wrap"))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_planner_matches_every_option_on_every_backend_on_2_ranks() -> None:
    from benchmarks.memory import OPTIONS

    _held_to_measurement(OPTIONS)


def test_without_transformers_a_config_is_refused_with_the_way_out(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)  # as if not installed
    code, _, err = explain("--model", str(tmp_path), "--nproc", "2")
    assert code == 2 and "needs transformers" in err and "--params N" in err


@pytest.mark.parametrize(("options", "backend", "stage", "model_psi"), [
    ("", "torch-zero", 0, 2.0), ("zero_dp_1", "torch-zero", 1, 2.0), ("simple", "fairscale-sdp", 2, 2.0),
    ("zero_dp_2", "torch-fsdp2", 2, 2.0), ("zero_dp_3", "torch-fsdp2", 3, 3.0), ("zero_dp_3", "torch-fsdp1", 3, 2.0),
])
def test_the_volume_of_each_backend_in_psi(options: str, backend: str, stage: int, model_psi: float) -> None:
    """torch-zero's ZeRO-1 reduce-scatters to the owners plus the broadcast (2Ψ); fairscale's reduces
    to owners (2Ψ); unwrapped FSDP1 keeps its root, the whole model, so backward gathers nothing (2Ψ)."""
    from shardcompat.planner import volume

    moved = volume(parse_options(options), backend, stage, Layout.count(10**6), 8, precision="fp32")
    assert sum(moved.values()) == model_psi * 4 * 10**6


def test_explain_states_each_backends_volume() -> None:
    data = explain_json("zero_dp_1", "--params", "1B", "--nproc", "4", "--precision", "fp32")
    comm = data["estimate"]["comm"]
    assert (comm["reduce-scatter"], comm["broadcast"], comm["zero_model_ratio"]) == (4 * 10**9, 4 * 10**9, 1.0)
    assert comm["all-reduce"] == 0
    wrapped = explain_json("zero_dp_3", "--params", "1B", "--nproc", "4", "--precision", "fp32")
    assert wrapped["estimate"]["comm"]["zero_model_ratio"] == 1.0
    code, out, _ = explain("zero_dp_1", "--params", "1B", "--nproc", "4")
    assert code == 0 and "comm/step" in out and "(1.00x)" in out


def test_hybrid_shards_over_one_node_and_all_reduces_its_shard_across_nodes() -> None:
    data = explain_json("hybrid_shard", "--params", "1B", "--nproc", "4", "--nnodes", "2", "--precision", "fp32")
    assert data["memory"]["sharded_over"] == 4 and data["estimate"]["total"] == 16 * 10**9 / 4
    comm = data["estimate"]["comm"]
    assert comm["all-reduce"] == 2 * 4 * 10**9 / 4  # the gradient shard, across the 2 nodes
    assert comm["all-gather"] + comm["reduce-scatter"] == 3 * 4 * 10**9
