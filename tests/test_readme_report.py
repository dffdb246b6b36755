"""The README's Quickstart is what the program does: its sample report is the first command's
real output (only the figures measured afresh on every run, peak RSS and step time, may
differ), and every "other run to try" is a whole command that trains what its comment says."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BIN = ".venv/bin/shardcompat "


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", README, flags=re.S)


def _first_command() -> list[str]:
    quickstart = next(b for b in _blocks("bash") if "# 1. " in b)
    line = next(line for line in quickstart.splitlines() if BIN in line)
    return shlex.split(line.split(BIN, 1)[1])


def _tries() -> list[list[str]]:
    block = next(b for b in _blocks("bash") if b.lstrip().startswith(BIN))
    return [shlex.split(line.split(BIN, 1)[1], comments=True) for line in block.splitlines() if line.strip()]


def _shardcompat(args: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "shardcompat", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, f"shardcompat {shlex.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done


# Peak RSS and the median step time, side by side in each row, are the only measured figures.
_MEASURED = re.compile(r"\d+(?:\.\d+)? [KMG]iB +\d+(?:\.\d+)? ms")


def _comparable(report: str) -> list[str]:
    return [" ".join(_MEASURED.sub("<peak RSS> <step>", line).split()) for line in report.strip().splitlines()]


@pytest.mark.slow
def test_the_readme_sample_report_is_the_first_commands_real_output() -> None:
    args = _first_command()
    assert args[0] == "train" and "--compare-ddp" in args, args
    sample = next(b for b in _blocks("text") if "largest loss difference vs plain DDP" in b)
    real = _shardcompat(args).stdout
    assert _comparable(real) == _comparable(sample), f"README's sample differs from the real output:\n{real}"
    assert sum(1 for line in _comparable(real) if "<peak RSS> <step>" in line) == 4  # 2 runs x 2 ranks


@pytest.mark.slow
@pytest.mark.parametrize("args", _tries(), ids=shlex.join)
def test_each_run_to_try_is_a_whole_command_that_trains_what_it_says(args: list[str]) -> None:
    """Shortened to 2 steps; the options, backend, rank count and output kind are the README's."""
    out = _shardcompat([*args, "--steps", "2"]).stdout
    options = args[args.index("--sharded_ddp") + 1]
    if "--json" in args:
        import json

        report = json.loads(out)
        assert [run["options"] for run in report["runs"]] == [options], report["runs"]
        return
    assert f"{options} on " in out, out
    if "--backend" in args:
        assert f"{options} on {args[args.index('--backend') + 1]}: loss" in out, out
    nproc = int(args[args.index("--nproc") + 1]) if "--nproc" in args else 2
    assert f"{nproc} ranks on cpu" in out, out
    if "--compare-ddp" in args:
        assert "largest loss difference vs plain DDP: 0\n" in out, out
