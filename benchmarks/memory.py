"""Per-rank state bytes of each sharding mode against the ZeRO paper's model (Adam, fp32).

For Ψ parameters the paper's model holds, per rank on N ranks: DDP 16Ψ (parameters 4Ψ,
gradients 4Ψ, Adam's two moments 8Ψ); stage 1 8Ψ + 8Ψ/N; stage 2 4Ψ + 12Ψ/N; stage 3 16Ψ/N;
offload keeps the sharded part in host memory (``shardcompat.memory.zero_model_bytes``).
Every row is measured by ``shardcompat train``'s own code (unique storages, the largest
point of the last step) on every backend that can serve it here, and printed as
measured/expected against the stage the backend's plan really implements (``Plan.zero_stage``:
torch-zero serves ``simple`` as ZeRO-1, so its row is held to stage 1, not fairscale's stage 2).
Target: every row within 5%, or a one-line reason under the table
(``shardcompat.memory.off_model_reason``, the same note ``shardcompat train`` prints).

    python -m benchmarks.memory [--quick]      # writes docs/img/memory.png
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcompat.launch import spawn
from shardcompat.memory import UNEXPLAINED, off_model_reason, zero_model_bytes
from shardcompat.options import parse_options
from shardcompat.train.models import ModelConfig, build_model, count_parameters
from shardcompat.train.report import format_bytes

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = ("", "simple", "zero_dp_1", "zero_dp_2", "zero_dp_3", "zero_dp_3 auto_wrap", "zero_dp_3 offload",
           "zero_dp_3 auto_wrap offload")
# Every dimension a multiple of 4 so no shard is padded on 2 or 4 ranks.
MODEL = ModelConfig(kind="gpt", layers=4, dim=256, heads=4, vocab=256, seq_len=64)
QUICK_MODEL = ModelConfig(kind="gpt", layers=2, dim=128, heads=4, vocab=128, seq_len=32)


@dataclass(frozen=True)
class Row:
    options: str
    backend: str
    nproc: int
    stage: int  # the ZeRO stage the backend's plan really implements
    measured: int  # the largest rank's total
    measured_cpu: int
    expected: float
    reason: str | None  # why the row is off the model (None: within 5%)

    @property
    def ratio(self) -> float:
        return self.measured / self.expected


def servers(options: str, nproc: int) -> list[tuple[str, int]]:
    """Every backend that can serve ``options`` on ``nproc`` local ranks here, with the
    ZeRO stage its plan really implements."""
    from shardcompat.backends import NoBackendAvailable, Placement, candidates, resolve

    placement = Placement(world_size=nproc, local_world_size=nproc)
    found = []
    for name in candidates("auto"):
        try:
            plan = resolve(parse_options(options), name, placement)
        except (NoBackendAvailable, ImportError):
            continue
        found.append((plan.backend, plan.zero_stage))
    return found


def _measure(rank: int, world_size: int, cases: list[tuple[str, str]], model: ModelConfig) -> list[Any]:
    """On every rank: the state of each (options, backend) case, or why it failed."""
    import torch.distributed as dist

    from shardcompat.train import RunConfig, train_rank

    out: list[Any] = []
    for options, backend in cases:
        config = RunConfig(options or "ddp", options, backend, model, steps=2, batch_size=4,
                           lr=1e-3, seed=0, device="cpu", progress="off")
        try:
            out.append(train_rank(rank, world_size, config).ranks[0].state)
        except Exception as error:  # one case failing must not hide the others
            out.append(f"{type(error).__name__}: {error}")
            dist.barrier()
    return out


def measure(nproc: int, model: ModelConfig) -> tuple[list[Row], list[str]]:
    psi = count_parameters(build_model(model, 0))
    served = [(options, backend, stage) for options in OPTIONS for backend, stage in servers(options, nproc)]
    cases = [(options, backend) for options, backend, _ in served]
    per_rank = spawn(_measure, nproc, (cases, model), timeout=900)
    rows, failures = [], []
    for i, (options, backend, stage) in enumerate(served):
        states = [results[i] for results in per_rank]
        if any(isinstance(s, str) for s in states):
            failures.append(f"{options or 'ddp'} on {backend}, {nproc} ranks: {next(s for s in states if isinstance(s, str))}")
            continue
        worst = max(states, key=lambda s: s.total)
        reason = off_model_reason(options, backend, nproc, psi, worst.total, stage=stage)
        rows.append(Row(options or "ddp", backend, nproc, stage, worst.total, worst.cpu,
                        zero_model_bytes(stage, psi, nproc), reason))
    return rows, failures


def table(rows: list[Row], psi: int) -> str:
    lines = [f"GPT with Ψ = {psi:,} parameters, Adam fp32; per-rank state of the largest rank",
             f"{'options':<27} {'backend':<14} {'N':>2} {'stage':>5} {'measured':>11} {'ZeRO model':>11} {'ratio':>6}    on CPU"]
    for r in rows:
        lines.append(f"{r.options:<27} {r.backend:<14} {r.nproc:>2} {r.stage:>5} {format_bytes(r.measured):>11} "
                     f"{format_bytes(r.expected):>11} {r.ratio:6.3f}{' *' if r.reason else '  '}  {format_bytes(r.measured_cpu)}")
    notes = [f"* {r.options} on {r.backend}, {r.nproc} ranks: {r.reason}" for r in rows if r.reason]
    return "\n".join(lines + (["", *notes] if notes else []))


def plot(rows: list[Row], psi: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = sorted({r.nproc for r in rows})
    fig, axes = plt.subplots(1, len(counts), figsize=(6.5 * len(counts), 4.5), squeeze=False, sharey=True)
    for ax, nproc in zip(axes[0], counts):
        mine = [r for r in rows if r.nproc == nproc]
        xs = range(len(mine))
        colors = ["tab:orange" if r.reason else "tab:blue" for r in mine]
        ax.bar(xs, [r.measured / psi for r in mine], color=colors, label="measured")
        if any(r.reason for r in mine):
            ax.bar([0], [0], color="tab:orange", label="off the model: reason printed under the table")
        ax.scatter(xs, [r.expected / psi for r in mine], color="black", marker="_", s=600, zorder=3,
                   label="ZeRO model")
        ax.set_xticks(list(xs), [f"{r.options}{' *' if r.reason else ''}\n{r.backend} (stage {r.stage})" for r in mine], rotation=60, ha="right", fontsize=8)
        ax.set_title(f"{nproc} ranks")
        ax.set_ylabel("state bytes per rank / Ψ")
        ax.set_ylim(0, 1.4 * max(max(r.measured, r.expected) for r in rows) / psi)  # room for the legend
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"Per-rank parameter + gradient + Adam state, GPT Ψ={psi:,} (fp32)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller model, 2 ranks only")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "memory.png")
    args = parser.parse_args()
    model = QUICK_MODEL if args.quick else MODEL
    psi = count_parameters(build_model(model, 0))
    rows, failures = [], []
    for nproc in (2,) if args.quick else (2, 4):
        measured, failed = measure(nproc, model)
        rows += measured
        failures += failed
    print(table(rows, psi))
    for failure in failures:
        print(f"failed: {failure.splitlines()[0]}")
    unexplained = [r for r in rows if r.reason and UNEXPLAINED in r.reason]
    off = sum(1 for r in rows if r.reason)
    print(f"\n{len(rows) - off} of {len(rows)} rows within 5% of the ZeRO model; {off} off it with the reason "
          f"above{f', {len(unexplained)} of them unexplained' if unexplained else ''}")
    plot(rows, psi, args.plot)
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "memory.json").write_text(json.dumps(
        {"psi": psi, "rows": [{**r.__dict__, "ratio": r.ratio} for r in rows], "failures": failures}, indent=2))
    print(f"wrote {args.plot.resolve().relative_to(ROOT) if args.plot.resolve().is_relative_to(ROOT) else args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
