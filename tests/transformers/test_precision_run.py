"""``--fp16``/``--bf16`` with and without clipping: an unmodified Trainer script trains through
``shardcompat run`` on every served option with the per-step losses of the stock run.

The stock run is the same script under plain ``torchrun`` (the release's own Trainer, DDP;
``--use_cpu`` where there is no GPU), with the same precision flag and ``--max_grad_norm``.
Tolerances (relative, every logged step): FP16_TOL, BF16_TOL.  On CPU, Accelerate runs
``--fp16`` in fp32, and so does the sharded run (``test_trainer`` checks it exactly; real fp16
scaling is ``tests/backends/test_grad_scaler.py`` and, on CUDA, ``test_gpu``).

The default suite runs the step-1 crash case of issue 21 (``zero_dp_3 auto_wrap --fp16``);
``SHARDCOMPAT_PRECISION_GRID=full`` (``nox -s precision``) runs every option x precision x
clipping: 40 launches, 10-18 minutes on 2 cores, too long for every CI run.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

from tests.transformers._runs import fp16_without_gpu_refused
from tests.transformers._stock import TORCHRUN
from tests.transformers.test_run import SCRIPT

FULL = os.environ.get("SHARDCOMPAT_PRECISION_GRID") == "full"
FP16_TOL, BF16_TOL = 1e-2, 5e-2
ARGS = [
    "--do_train", "--max_steps", "4", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2",
    "--logging_steps", "1", "--learning_rate", "5e-3", "--report_to", "none", "--disable_tqdm", "true",
    "--save_strategy", "no",
]
OPTIONS = ["simple", "zero_dp_2", "zero_dp_3", "zero_dp_3 auto_wrap", "zero_dp_3 offload"]
PRECISIONS = ["fp16", "bf16"]
CLIPS = ["1.0", "0"]
GRID = [(o, p, c) for o in OPTIONS for p in PRECISIONS for c in CLIPS] if FULL else [("zero_dp_3 auto_wrap", "fp16", "1.0")]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@functools.cache
def _run(options: str | None, precision: str, clip: str, root: str) -> list[float]:
    """One command line; the logged loss of each optimizer step."""
    name = f"{options or 'stock'}-{precision}-clip{clip}".replace(" ", "_")
    out = Path(root) / name
    flags = [f"--{precision}", "--max_grad_norm", clip, "--output_dir", str(out)]
    if options is None:
        launcher = TORCHRUN
        flags += [] if _cuda() else ["--use_cpu", "true"]
    else:
        launcher = [sys.executable, "-m", "shardcompat", "run", "--nproc", "2"]
        flags += ["--sharded_ddp", *options.split()]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*launcher, str(SCRIPT), *ARGS, *flags], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [e["loss"] for e in history if "loss" in e]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("precision"))


@pytest.mark.slow
@pytest.mark.timeout(1800 if FULL else 600)
@pytest.mark.parametrize(("options", "precision", "clip"), GRID, ids=lambda v: str(v).replace(" ", "_"))
def test_the_sharded_run_logs_the_stock_runs_losses(root: str, options: str, precision: str, clip: str) -> None:
    refused = fp16_without_gpu_refused() if precision == "fp16" else None
    if refused:
        pytest.skip(refused)  # the stock and the sharded arguments alike
    got, want = _run(options, precision, clip, root), _run(None, precision, clip, root)
    assert len(got) == len(want) == 4, (got, want)
    tol = FP16_TOL if precision == "fp16" else BF16_TOL
    relative = max(abs(a - b) / abs(b) for a, b in zip(got, want))
    assert relative <= tol, (got, want)
