"""What ``shardcompat run`` costs a Trainer script over plain ``torchrun`` with the same drop-in.

The same user script (``tests/transformers/scripts/observe_dropin.py --observe_benchmark``: a
tiny GPT-2 with its default dropout, trained through ``Trainer.train()`` with the
``shardcompat.transformers`` drop-in) is launched both ways, 2 ranks on the CPU, in rounds that
alternate which goes first, so drift in the machine's load falls on both alike.  The only
difference between the arms is what ``shardcompat run`` adds: the sharding block after the
first optimizer step (explain, the state count, one all_gather) and its launcher.

Each rank times every optimizer step in wall clock, from the end of one to the end of the next
(the first from the start of ``train()``); a step's time is the slowest rank's.  Printed per
mode: the median first step and steady step (steps 2 onward) of each arm, and the ratios
run/torchrun side by side.  A first-step ratio near 1 means the block is cheap.

    python -m benchmarks.first_step [--quick] [--rounds N] [--steps N] [--mode simple ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "transformers" / "scripts" / "observe_dropin.py"
MODES = ("simple", "zero_dp_2", "zero_dp_3 auto_wrap")
ARMS = {
    "shardcompat run": [sys.executable, "-m", "shardcompat", "run", "--nproc", "2"],
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
}


def launch(arm: str, mode: str, steps: int, out: Path) -> list[float]:
    """One job; the slowest rank's time for each optimizer step."""
    args = ["--observe_benchmark", "true", "--observe_samples", str(8 * steps), "--max_steps", str(steps),
            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2", "--learning_rate", "5e-3",
            "--logging_steps", "1", "--report_to", "none", "--disable_tqdm", "true", "--save_strategy", "no",
            "--seed", "0", "--use_cpu", "true", "--output_dir", str(out), "--sharded_ddp", mode]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*ARMS[arm], str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    records = [out / f"observed-rank{r}.json" for r in range(2)]
    if not all(r.exists() for r in records):
        raise SystemExit(f"{arm} '{mode}' failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    per_rank = [json.loads(r.read_text())["step_s"] for r in records]
    return [max(times) for times in zip(*per_rank)]


def measure(modes: list[str], rounds: int, steps: int) -> dict[str, dict[str, dict[str, list[float]]]]:
    """``{mode: {arm: {"first": [...], "steady": [...]}}}``, one first step and the steady steps per job."""
    found: dict[str, dict[str, dict[str, list[float]]]] = {
        m: {a: {"first": [], "steady": []} for a in ARMS} for m in modes}
    with tempfile.TemporaryDirectory(prefix="shardcompat-first-step-") as root:
        for r in range(rounds):
            for mode in modes:
                order = list(ARMS) if r % 2 == 0 else list(reversed(ARMS))
                for arm in order:
                    times = launch(arm, mode, steps, Path(root) / f"{r}-{mode.replace(' ', '_')}-{arm.replace(' ', '_')}")
                    found[mode][arm]["first"].append(times[0])
                    found[mode][arm]["steady"].extend(times[1:])
                print(f"round {r + 1}/{rounds}: {mode} done", file=sys.stderr, flush=True)
    return found


def report(found: dict[str, dict[str, dict[str, list[float]]]], rounds: int, steps: int) -> str:
    run, ref = ARMS
    rows = [["mode", f"first: {run}", "torchrun", "ratio", f"steady: {run}", "torchrun", "ratio"]]
    for mode, arms in found.items():
        row = [mode]
        for part in ("first", "steady"):
            a, b = (statistics.median(arms[arm][part]) for arm in (run, ref))
            row += [f"{a * 1000:.0f} ms", f"{b * 1000:.0f} ms", f"{a / b:.2f}x"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"shardcompat run vs torchrun, the same drop-in Trainer script, 2 CPU ranks: {rounds} round(s), "
             f"{steps} optimizer steps a job, medians (a step: the slowest rank's wall time)"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: one round, one mode, 3 steps")
    parser.add_argument("--rounds", type=int, default=None, help="launches of each arm per mode (default 5)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps a job (default 10)")
    parser.add_argument("--mode", action="append", default=None, help=f"repeatable; default {', '.join(MODES)}")
    args = parser.parse_args(argv)
    modes = args.mode or (MODES[:1] if args.quick else list(MODES))
    rounds = args.rounds or (1 if args.quick else 5)
    steps = args.steps or (3 if args.quick else 10)
    found: Any = measure(modes, rounds, steps)
    print(report(found, rounds, steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
