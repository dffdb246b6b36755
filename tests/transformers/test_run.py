"""An unmodified legacy Trainer script runs, and shards, through ``shardcompat run`` and under torchrun.

``scripts/run_clm_legacy.py`` is written as Transformers' examples of the 4.4-4.34 era were
(``HfArgumentParser``, ``TrainingArguments``, a ``Trainer`` subclass, ``--do_train --do_eval``)
and never mentions shardcompat.  Each run is a real command line in its own processes, 2 CPU
ranks: the bare legacy ``--sharded_ddp`` through ``shardcompat run --json --nproc 2``, and
``--sharded_ddp zero_dp_3 offload`` through ``torchrun -m shardcompat.transformers`` with
``SHARDCOMPAT_RUN_JSON=1``.  Both must print the sharding block once and write it as JSON.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

from ._grid import FULL, LEAN

SCRIPT = Path(__file__).parent / "scripts" / "run_clm_legacy.py"
COMMON = [
    "--do_train", "--do_eval", "--max_steps", "4", "--save_steps", "2", "--per_device_train_batch_size", "2",
    "--gradient_accumulation_steps", "2", "--logging_steps", "1", "--learning_rate", "5e-3", "--report_to", "none",
    "--disable_tqdm", "true",
]
LAUNCHERS = {
    "shardcompat-run": [sys.executable, "-m", "shardcompat", "run", "--json", "--nproc", "2"],
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 "-m", "shardcompat.transformers"],
    "one-process": [sys.executable, "-m", "shardcompat", "run"],
}
RUNS: dict[str, tuple[str, list[str]]] = {}
if LEAN:
    RUNS["bare-flag"] = ("shardcompat-run", ["--sharded_ddp"])
    RUNS["zero_dp_3-offload"] = ("torchrun", ["--sharded_ddp", "zero_dp_3", "offload", "--log_level", "info"])
if FULL:
    RUNS["one-process-zero_dp_2"] = ("one-process", ["--sharded_ddp", "zero_dp_2"])
# The tests of the lean grid's two runs (under `additions`, the default suite has run them)
LEAN_RUNS = pytest.mark.skipif(not LEAN, reason="the lean grid's runs: SHARDCOMPAT_TRANSFORMERS_GRID=additions")


def _run(name: str, out: Path) -> dict[str, Any]:
    launcher, flag = RUNS[name]
    command = [*LAUNCHERS[launcher], str(SCRIPT), "--output_dir", str(out), *COMMON, *flag]
    env = {**os.environ, "PYTHONWARNINGS": "default::FutureWarning", "OMP_NUM_THREADS": "1"}
    if launcher == "torchrun":  # shardcompat run --json says this to its ranks; torchrun users set it
        env["SHARDCOMPAT_RUN_JSON"] = "1"
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    return {"code": done.returncode, "output": done.stdout + done.stderr, "out": out}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("legacy")
    return {name: _run(name, root / name) for name in RUNS}


def _completed(runs: dict[str, dict[str, Any]], name: str) -> Path:
    run = runs[name]
    assert run["code"] == 0, run["output"][-6000:]
    out: Path = run["out"]
    return out


def _manifest(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "checkpoint-2" / "shardcompat" / "manifest.json").read_text())
    return data


@pytest.mark.timeout(1300)
@pytest.mark.parametrize(
    ("name", "backend", "options", "world"),
    ([("bare-flag", "torch-zero", "simple", 2), ("zero_dp_3-offload", "torch-fsdp2", "zero_dp_3 offload", 2)]
     if LEAN else [])
    + ([("one-process-zero_dp_2", "torch-fsdp2", "zero_dp_2", 1)] if FULL else []),
)
def test_the_script_runs_to_completion_and_shards(runs: dict[str, dict[str, Any]], name: str, backend: str,
                                                   options: str, world: int) -> None:
    out = _completed(runs, name)
    manifest = _manifest(out)  # written by every rank of the sharded run, at save_steps
    assert (manifest["backend"], manifest["options"], manifest["world_size"]) == (backend, options, world)
    state = json.loads((out / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "loss" in e] == [1, 2, 3, 4]
    assert json.loads((out / "eval_results.json").read_text())["eval_loss"] > 0
    assert (out / "checkpoint-4" / "shardcompat" / "manifest.json").exists()


@pytest.mark.timeout(1300)
@LEAN_RUNS
def test_the_plan_is_logged_with_the_trainers_own_messages(runs: dict[str, dict[str, Any]]) -> None:
    output = runs["zero_dp_3-offload"]["output"]
    assert "***** Running training *****" in output, output[-4000:]
    assert "sharded_ddp 'zero_dp_3 offload' on torch-fsdp2: fully_shard(module" in output


@pytest.mark.timeout(1300)
@LEAN_RUNS
def test_the_bare_legacy_flag_warns_with_the_new_spelling(runs: dict[str, dict[str, Any]]) -> None:
    output = runs["bare-flag"]["output"]
    assert "FutureWarning: the bare --sharded_ddp flag is the legacy boolean form" in output, output[-4000:]
    assert "Write --sharded_ddp simple" in output


@pytest.mark.timeout(1300)
@LEAN_RUNS
def test_both_runs_train_the_same_model_as_ddp_would(runs: dict[str, dict[str, Any]]) -> None:
    """simple (DDP + ZeRO-1) and zero_dp_3 offload (FSDP2) do DDP's arithmetic: same losses, same weights."""
    import transformers

    first, second = _completed(runs, "bare-flag"), _completed(runs, "zero_dp_3-offload")
    losses = [[e["loss"] for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in e]
              for out in (first, second)]
    assert max(abs(a - b) for a, b in zip(*losses)) <= 1e-4, losses  # 4.x logs 4 decimals
    a, b = (transformers.AutoModelForCausalLM.from_pretrained(out).state_dict() for out in (first, second))
    assert a.keys() == b.keys() and max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-5


def _model_bytes() -> int:
    """The script's GPT-2 (its default sizes), counted as plain parameters: the tied head once."""
    import transformers

    config = transformers.GPT2Config(vocab_size=64, n_positions=8, n_embd=32, n_layer=2, n_head=2)
    return sum(p.numel() * p.element_size() for p in transformers.GPT2LMHeadModel(config).parameters())


def _block(output: str) -> list[str]:
    start = output.index("***** shardcompat: ")
    return output[start:output.index("\n*****\n", start)].splitlines()


@pytest.mark.timeout(1300)
@LEAN_RUNS
@pytest.mark.parametrize(
    ("name", "backend", "options", "params_share"),
    [("bare-flag", "torch-zero", "simple", 1.0), ("zero_dp_3-offload", "torch-fsdp2", "zero_dp_3 offload", 0.5)],
)
def test_the_sharding_block_is_printed_once_and_written_as_json(
    runs: dict[str, dict[str, Any]], name: str, backend: str, options: str, params_share: float,
) -> None:
    """What each rank holds after the first step: ``simple`` (DDP + ZeRO-1) keeps the whole model
    and its gradients and shards AdamW's two moments; ``zero_dp_3`` shards all three."""
    from shardcompat.train.report import format_bytes

    out, output = _completed(runs, name), runs[name]["output"]
    assert output.count("***** shardcompat: ") == 1, output[-6000:]  # once per job, not per rank
    block = _block(output)
    assert block[0] == f"***** shardcompat: '{options}' on {backend}, 2 rank(s) *****"
    assert f"plan (shardcompat explain {shlex.quote(options)} --backend auto --nproc 2 --nnodes 1 --device cpu):" in block
    assert f"  chosen:       {backend}" in block  # explain's own lines
    assert any(line.startswith("state per rank, counted after the first optimizer step") for line in block)
    report = json.loads((out / "shardcompat_sharding.json").read_text())
    psi = _model_bytes()
    assert (report["backend"], report["options"], report["world_size"], report["model_param_bytes"]) == (
        backend, options, 2, psi)
    assert report["explain"]["chosen"] == backend
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for r in report["ranks"]:
        assert abs(r["params"] - params_share * psi) <= 0.02 * psi, (r, psi)
        assert abs(r["grads"] - params_share * psi) <= 0.02 * psi, (r, psi)
        assert abs(r["optim"] - psi) <= 0.02 * psi, (r, psi)  # AdamW's 2 fp32 moments, halved over 2 ranks
        assert r["total"] == r["params"] + r["grads"] + r["optim"]
        assert r["cpu"] == r["total"]  # CPU ranks (and offload) hold everything in host memory
        row = next(line.split() for line in block if line.split()[:1] == [str(r["rank"])])
        cells = [" ".join(row[i:i + 2]) for i in range(1, 11, 2)]
        assert cells == [format_bytes(r[k]) for k in ("params", "grads", "optim", "total", "cpu")], (row, r)
        assert row[-1] == f"{r['params'] / psi:.2f}x"
    if params_share < 1:  # the shards partition the model: together, the whole of it (up to padding)
        assert abs(sum(r["params"] for r in report["ranks"]) - psi) <= 0.02 * psi
