"""``shardcompat train`` end to end: real ranks, the JSON report checked against plain DDP.

The state proportions are the ZeRO paper's, per rank on 2 ranks: zero_dp_1 halves optimizer
state; zero_dp_3 halves parameters, gradients and optimizer state; zero_dp_2 holds the ZeRO-2
model's 4Ψ + 12Ψ/N (10/16 of DDP).
Losses must match DDP's within the fp32 parity tolerance of the adapter tests.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from shardcompat import train
from shardcompat.train.report import render_table

FP32_TOL = 1e-5  # max abs loss difference against plain DDP (the adapter tests' tolerance)
SIZE_TOL = 0.02  # relative: a few hundred bytes of per-tensor optimizer steps and padding
STEPS = "4"
ROOT = Path(__file__).resolve().parents[1]


def train_json(*argv: str) -> dict[str, Any]:
    """Run ``shardcompat train ARGV --json`` in this process; the parsed report."""
    parser = argparse.ArgumentParser()
    train.configure_parser(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = train.run(parser.parse_args([*argv, "--steps", STEPS, "--json"]))
    assert code == 0
    report: dict[str, Any] = json.loads(out.getvalue())
    return report


def cli(*argv: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardcompat", "train", *argv], cwd=ROOT, capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )


def ratios(run: dict[str, Any], reference: dict[str, Any], kind: str) -> list[float]:
    """Per rank: bytes of ``kind`` held in ``run`` over those held by plain DDP."""
    return [mine[kind] / ddp[kind] for mine, ddp in zip(run["ranks"], reference["ranks"])]


def assert_about(values: list[float], expected: float) -> None:
    assert all(abs(v - expected) <= SIZE_TOL * expected for v in values), f"{values} != {expected}"


def assert_same_losses(run: dict[str, Any], reference: dict[str, Any]) -> None:
    diff = max(abs(a - b) for a, b in zip(run["losses"], reference["losses"]))
    assert len(run["losses"]) == len(reference["losses"]) == int(STEPS)
    assert diff <= FP32_TOL, f"{run['label']}: {run['losses']} vs DDP {reference['losses']}"


def _model_choices() -> list[str]:
    parser = argparse.ArgumentParser()
    train.configure_parser(parser)
    (action,) = [a for a in parser._actions if a.dest == "model"]
    return list(action.choices or ())


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("model", _model_choices())
def test_every_bundled_model_clearly_learns_over_the_default_steps(model: str) -> None:
    parser = argparse.ArgumentParser()
    train.configure_parser(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert train.run(parser.parse_args(["--model", model, "--json"])) == 0
    (run,) = json.loads(out.getvalue())["runs"]
    losses = run["losses"]
    assert len(losses) == parser.get_default("steps")
    # The mean of the last quarter, so one noisy batch cannot decide it.
    tail = losses[-len(losses) // 4:]
    assert sum(tail) / len(tail) < 0.75 * losses[0], losses


@pytest.fixture(scope="module")
def ddp() -> dict[str, Any]:
    """Plain DDP (no --sharded_ddp) on 2 ranks: the reference every sharded run is held to."""
    (run,) = train_json("--nproc", "2")["runs"]
    assert run["losses"][-1] < run["losses"][0], "DDP did not learn: the comparisons would prove nothing"
    return run


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_compare_ddp_json_is_all_of_stdout_and_zero_dp_1_halves_optimizer_state() -> None:
    result = cli("--sharded_ddp", "zero_dp_1", "--steps", STEPS, "--compare-ddp", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # nothing but the JSON on stdout
    (run,), reference = report["runs"], report["reference"]
    assert (run["options"], run["backend"], reference["options"]) == ("zero_dp_1", "torch-zero", "")
    assert report["world_size"] == 2 and [r["rank"] for r in run["ranks"]] == [0, 1]
    assert_about(ratios(run, reference, "params"), 1.0)
    assert_about(ratios(run, reference, "grads"), 1.0)
    assert_about(ratios(run, reference, "optim"), 0.5)
    assert report["max_loss_diff"] <= FP32_TOL
    assert_same_losses(run, reference)
    for row in run["ranks"]:
        assert row["peak_rss"] > row["total"] > 0 and row["median_step_s"] > 0
    # started here, each run had a new group of ranks; the table's legend says so too
    assert report["peak_rss_measured"].endswith("of a fresh process per run and rank")
    assert f"peak RSS = {report['peak_rss_measured']}" in render_table(report)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("options", "params", "grads", "optim"),
    [
        ("zero_dp_3", 0.5, 0.5, 0.5),
        ("zero_dp_3 auto_wrap", 0.5, 0.5, 0.5),
        ("zero_dp_3 offload", 0.5, 0.5, 0.5),
    ],
)
def test_sharded_runs_hold_their_share_and_train_like_ddp(
    ddp: dict[str, Any], options: str, params: float, grads: float, optim: float
) -> None:
    (run,) = train_json("--sharded_ddp", options, "--nproc", "2")["runs"]
    assert run["options"] == options
    assert_about(ratios(run, ddp, "params"), params)
    assert_about(ratios(run, ddp, "grads"), grads)
    assert_about(ratios(run, ddp, "optim"), optim)
    if "offload" in options:
        assert all(r["cpu"] == r["total"] for r in run["ranks"])
    assert_same_losses(run, ddp)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_zero_dp_2_holds_the_zero_paper_stage_2_share(ddp: dict[str, Any]) -> None:
    # ZeRO-2 keeps full parameters (4Ψ) and shards the rest (12Ψ/N): 10/16 of DDP on 2 ranks.
    # FSDP's SHARD_GRAD_OP holds that after forward: the all-gathered parameters (4Ψ) next to
    # the shards of parameters (2Ψ) and Adam state (4Ψ), gradients freed by zero_grad.
    (run,) = train_json("--sharded_ddp", "zero_dp_2", "--nproc", "2")["runs"]
    assert_about(ratios(run, ddp, "optim"), 0.5)
    assert_about(ratios(run, ddp, "total"), 10 / 16)
    assert all(r["state_phase"] == "after forward" for r in run["ranks"])
    assert_same_losses(run, ddp)


def test_the_table_shows_every_rank_of_both_runs(ddp: dict[str, Any]) -> None:
    report = {"model": {"kind": "gpt", "parameters": 1000}, "world_size": 2, "device": "cpu",
              "steps": int(STEPS), "batch_size": 8, "runs": [ddp], "reference": ddp, "max_loss_diff": 0.0}
    lines = render_table(report).splitlines()
    header = next(line for line in lines if line.startswith("run "))
    assert header.split() == ["run", "backend", "rank", "counted", "after", "params", "grads", "optim", "total", "on",
                              "CPU", "peak", "RSS", "step", "comm/step", "calls"]
    rows = [line.split() for line in lines if line.startswith("ddp  ")]
    assert [row[2] for row in rows] == ["0", "1", "0", "1"]
    assert "largest loss difference vs plain DDP: 0" in lines[-2]


def injected(tmp_path: Path, fault: str) -> tuple[str, dict[str, str]]:
    """``(marker, env)``: an environment whose processes run ``fault`` as their sitecustomize and
    carry ``marker`` (``NAME=value``), so :func:`processes_with` finds any left behind."""
    marker = f"SHARDCOMPAT_TEST_MARKER={uuid.uuid4().hex}"
    name, value = marker.split("=")
    (tmp_path / "sitecustomize.py").write_text(fault)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return marker, {name: value, "PYTHONPATH": path}


def processes_with(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and marker.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
    return found


# A rank that crashes in training.  Every input the command takes is checked before a rank
# starts, so the fault is injected: a sitecustomize (run by every process the command starts)
# makes building the model fail on rank 1 only.
_FAULT = """
import os
import shardcompat.train.models as models

real = models.build_model

def build_model(config, seed):
    if os.environ.get("RANK") == "1":  # set in the rank, after this file ran
        raise RuntimeError("injected fault on rank 1")
    return real(config, seed)

models.build_model = build_model
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds leftover ranks through /proc")
def test_a_failing_rank_fails_the_command_with_its_error_and_leaves_no_process(tmp_path: Path) -> None:
    marker, env = injected(tmp_path, _FAULT)
    result = cli("--sharded_ddp", "zero_dp_3", "--steps", "2", env=env)
    assert result.returncode == 1
    assert "rank 1 failed" in result.stderr and "injected fault on rank 1" in result.stderr
    assert "Traceback" in result.stderr, "a crash inside training keeps its traceback"
    assert result.stdout == ""
    assert processes_with(marker) == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sharded_ddp", "zero_dp_3", "--backend", "torch-zero"],
         ["torch-zero cannot serve 'zero_dp_3' here", "These backends can: torch-fsdp2"]),
        (["--sharded_ddp", "zero_dp_3 offload", "--backend", "torch-fsdp1"],
         ["needs an accelerator", "Use backend=torch-fsdp2"]),
        (["--sharded_ddp", "hybrid_shard"], ["all 2 ranks are on one node"]),
        (["--backend", "fairscale-sdp"], ["plain DDP (no sharding)", "fairscale is not installed", "pip install"]),
        (["--steps", "-1"], ["--steps must be at least 1, got -1"]),
        (["--dim", "10"], ["--dim 10 must be a multiple of the number of heads (4)"]),
    ],
)
def test_a_bad_request_is_refused_before_any_rank_starts(argv: list[str], says: list[str]) -> None:
    if "fairscale-sdp" in argv and importlib.util.find_spec("fairscale") is not None:
        pytest.skip("fairscale is installed here: fairscale-sdp can serve the request")
    result = cli(*argv)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "''" not in result.stderr
    assert "step " not in result.stderr, "no rank started"
    assert result.stderr.startswith("shardcompat train: error: ")
    for text in says:
        assert text in result.stderr
    assert len(result.stderr.splitlines()) <= 8, result.stderr


@pytest.mark.parametrize("argv", [["--backend", "fairscale-sdp"], ["--sharded_ddp", "zero_dp_3 backend=fairscale"]])
def test_a_missing_fairscale_is_refused_before_torch_is_imported(argv: list[str]) -> None:
    """Importing torch alone takes seconds on a small machine: an explicit fairscale choice
    without fairscale is answered from package metadata, as quickly as a bad option."""
    if importlib.util.find_spec("fairscale") is not None:
        pytest.skip("fairscale is installed here: nothing to refuse")
    code = ("import sys; from shardcompat.cli import main; "
            f"code = main(['train', *{argv!r}]); print(code, 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["2", "False"], result.stderr
    assert "fairscale is not installed (pip install 'fairscale>=0.1.5')" in result.stderr


def test_a_legacy_flag_warns_as_the_command_not_from_argparse() -> None:
    result = cli("--sharded_ddp", "True", "--steps", "1", "--nproc", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert "shardcompat train: warning: sharded_ddp='True' is the legacy boolean form" in result.stderr
    assert "argparse.py" not in result.stderr and "FutureWarning" not in result.stderr
