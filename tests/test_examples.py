"""The README's training script is a real file, and it runs both ways the README says.

CI's newcomer job (.ci/newcomer) runs it again in a venv with nothing but the README's
packages; here it runs in the test environment, so a broken example fails the default suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardcompat.launch import free_port

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_script.py"


def test_the_readme_shows_the_example_file_verbatim() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert EXAMPLE.read_text() in blocks, "README's training script differs from examples/train_script.py"


def _check(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    first, last = (float(x) for x in re.findall(r"loss (\d+\.\d+)", out))
    assert last < 0.5 * first, out
    assert "2 ranks; checkpoint " in out and "resumes exactly" in out, out
    assert out.count("resumes exactly") == 1, "only rank 0 prints"
    assert not re.search(r"\w+Warning: ", result.stderr), result.stderr


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_example_runs_under_spawn(tmp_path: Path) -> None:
    _check(subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path / "ckpt")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=170))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_example_runs_under_torchrun_without_starting_more_ranks(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_port()), str(EXAMPLE), str(tmp_path / "ckpt")]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    _check(subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170))
