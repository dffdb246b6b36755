"""The benchmarks' own plumbing: what they print and how they decide, never their timings.

Speed claims are measured by the benchmarks themselves (side by side in one run); these tests
only check that the scripts run, cover every backend, and print their tables.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
import torch

from benchmarks import gpu_check, overhead
from shardcompat.options import BACKEND_NAMES


def _run(main: object, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))  # type: ignore[operator]
    return code, out.getvalue()


# ----------------------------------------------------------------------------- gpu_check
def _accounts_for_every_backend_and_stage(text: str) -> None:
    """Every backend x stage is a row, or named in its backend's 'does not serve' line, or the
    backend is 'not installed'."""
    for backend in BACKEND_NAMES:
        if re.search(rf"^{backend}: not installed: ", text, re.MULTILINE):
            continue
        refused = re.search(rf"^{backend} does not serve: (.*)$", text, re.MULTILINE)
        not_served = refused.group(1).split(", ") if refused else []
        for stage in gpu_check.STAGES:
            row = re.search(rf"^1 rank nccl, 1 GPU\s+{backend}\s+{re.escape(stage)}\s+to run", text, re.MULTILINE)
            assert row or stage in not_served, f"{backend} / {stage} is missing from:\n{text}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine gpu_check runs for real")
def test_gpu_check_on_cpu_prints_its_plan_and_exits_0() -> None:
    code, text = _run(gpu_check.main)
    assert code == 0
    assert "no CUDA device here, so nothing runs" in text
    _accounts_for_every_backend_and_stage(text)
    # the reference, and the second world: two ranks sharing GPU 0 over gloo
    assert re.search(r"^1 rank nccl, 1 GPU\s+torch-zero\s+plain DDP\s+to run", text, re.MULTILINE)
    assert re.search(r"^2 ranks gloo, sharing GPU 0\s+torch-zero\s+plain DDP\s+to run", text, re.MULTILINE)


def test_gpu_check_plan_holds_every_row_to_the_zero_model() -> None:
    code, text = _run(gpu_check.main, "--plan")
    assert code == 0
    _accounts_for_every_backend_and_stage(text)
    rows = gpu_check.plan_rows(gpu_check.World(2, "gloo", True))
    runnable = [row for row in rows if row.status == "to run"]
    assert runnable and all(row.model is not None for row in runnable)
    offload = [row for row in runnable if "offload" in row.options]
    assert offload and all(row.model == 0 for row in offload)  # stage 3 offload: nothing stays on the device


def test_gpu_check_mixed_precision_rides_on_each_backends_deepest_stage() -> None:
    assert gpu_check.options_for("fp16", "torch-zero") == "zero_dp_1 mixed_precision=fp16"
    assert gpu_check.options_for("bf16", "fairscale-sdp") == "simple mixed_precision=bf16"
    assert gpu_check.options_for("bf16", "torch-fsdp2") == "zero_dp_3 auto_wrap mixed_precision=bf16"
    assert gpu_check.options_for("auto_wrap", "torch-fsdp1") == "zero_dp_3 auto_wrap"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_gpu_check_run_path_on_cpu() -> None:
    """The script's own plumbing (process groups, per-case results, a failing case, the table)
    on 2 gloo CPU ranks with a tiny model: only CUDA itself is missing."""
    from shardcompat.train.models import ModelConfig

    world = gpu_check.World(2, "gloo", False, device="cpu")
    rows = [gpu_check.Row(world, "torch-zero", "plain DDP", ""),
            gpu_check.Row(world, "torch-zero", "zero_dp_1", "zero_dp_1"),
            gpu_check.Row(world, "torch-fsdp2", "zero_dp_3", "zero_dp_3"),
            gpu_check.Row(world, "torch-zero", "zero_dp_3", "zero_dp_3")]  # cannot serve it: fails in prepare
    gpu_check.run_world(world, rows, steps=3, model=ModelConfig(layers=1, dim=16, heads=2, vocab=16, seq_len=8))
    reference, zero1, zero3, wrong = rows
    assert reference.status == zero1.status == zero3.status == "ran", [r.status for r in rows]
    assert zero1.loss_diff is not None and zero1.loss_diff <= 1e-5
    assert zero3.loss_diff is not None and zero3.loss_diff <= 1e-5
    assert zero3.step_s is not None and zero3.peak is None  # no CUDA memory on CPU
    assert wrong.status.startswith("FAILED") and "torch-zero" in wrong.status and wrong.failed
    text = gpu_check.table(rows)
    assert "2 ranks gloo, 1 GPU each" in text and "FAILED" in text


# ----------------------------------------------------------------------------- overhead
def test_bootstrap_interval_brackets_the_median_and_verdicts() -> None:
    values = [1.0 + 0.01 * ((i * 7) % 11 - 5) for i in range(101)]
    median, low, high = overhead.bootstrap_median(values)
    assert low <= median <= high and high - low < 0.025
    assert overhead.verdict(0.98, 1.01) == "<= 1.02"
    assert overhead.verdict(1.03, 1.05).endswith("OVER")
    assert overhead.verdict(1.0, 1.03).startswith("undecided")
    assert overhead.decided(0.98, 1.01) and not overhead.decided(1.0, 1.03)


def test_pair_ratios_sum_the_ranks_per_pair() -> None:
    per_rank = [[(2.0, 1.0), (1.0, 1.0)], [(1.0, 2.0), (3.0, 1.0)]]
    assert overhead.pair_ratios(per_rank) == [1.0, 2.0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_overhead_quick_prints_every_backend_and_every_method() -> None:
    code, text = _run(overhead.main, "--quick")
    assert code == 0
    cases, skipped = overhead.runnable()
    step_rows = re.findall(r"^(\S+)\s+.*?\s+(\d+)\s+[\d.]+ ms\s+([\d.]+)\s+\[([\d.]+), ([\d.]+)\]\s+(\S.*)$", text, re.MULTILINE)
    assert [row[0] for row in step_rows] == [case.backend for case in cases]
    for _, pairs, ratio, low, high, verdict in step_rows:
        assert int(pairs) == 6 and float(low) <= float(ratio) <= float(high)
        assert verdict.startswith(("<=", ">", "undecided"))
    header = next(line for line in text.splitlines() if line.startswith("backend") and "__call__" in line)
    assert header.split()[2:] == [*overhead.METHODS, "per", "step", "of", "step"]
    call_rows = [line for line in text.splitlines() if line.split()[:1] in ([c.backend] for c in cases) and "%" in line]
    assert len(call_rows) == len(cases)
    for line in call_rows:
        cells = line.split()[-(len(overhead.METHODS) + 2):]
        assert all(re.fullmatch(r"[+-]\d+\.\d+(/\d+)?|n/a|\d+\.\d+%", cell) for cell in cells), line
    assert len([line for line in text.splitlines() if line.startswith("not measured: ")]) == len(skipped)


# ----------------------------------------------------------------------------- first_step
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_first_step_times_both_launchers_and_prints_their_ratios() -> None:
    pytest.importorskip("transformers")
    from benchmarks import first_step

    code, text = _run(first_step.main, "--quick")
    assert code == 0
    row = re.search(r"^simple\s+(\d+) ms\s+(\d+) ms\s+([\d.]+)x\s+(\d+) ms\s+(\d+) ms\s+([\d.]+)x$", text, re.MULTILINE)
    assert row, text
    first_run, first_ref = int(row.group(1)), int(row.group(2))
    assert first_run > 0 and first_ref > 0 and float(row.group(3)) == pytest.approx(first_run / first_ref, rel=0.05)
