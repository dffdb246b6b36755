"""The memory planner against measurement: every backend, every option, two model sizes.

For each option and each backend that can serve it here, ``shardcompat train``'s own code
(``train_rank``: unique storages, the largest point of the last step) measures the bytes
of parameters, gradients and optimizer state on every rank; the planner
(``shardcompat.planner.estimate``, what ``shardcompat explain --model`` prints) predicts
them from the model's layout alone; likewise the collective bytes of one step by kind
(counted at the dispatcher, ``shardcompat.comm``) against ``shardcompat.planner.volume``.
Each part of the largest rank and each collective kind is compared; target: all within 5%
(fp32, AdamW, CPU).

    python -m benchmarks.planner [--quick] [--nproc 2 4] [--backend NAME...] [--json]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from typing import Any

from shardcompat.comm import KINDS
from shardcompat.launch import spawn
from shardcompat.options import parse_options
from shardcompat.planner import Estimate, estimate, layout_of, volume
from shardcompat.train.models import ModelConfig, build_model
from shardcompat.train.report import format_bytes

from .memory import OPTIONS, servers

TOLERANCE = 0.05
PARTS = ("params", "grads", "optimizer")
MODELS = {
    "small": ModelConfig(kind="gpt", layers=2, dim=64, heads=4, vocab=64, seq_len=32),  # train's default
    "medium": ModelConfig(kind="gpt", layers=4, dim=256, heads=4, vocab=256, seq_len=64),
}


@dataclass(frozen=True)
class Row:
    model: str
    options: str
    backend: str
    nproc: int
    measured: dict[str, int]  # params, grads, optimizer of the largest rank
    phase: str
    planned: dict[str, float]
    planned_phase: str
    comm_measured: dict[str, int]  # collective bytes of one step by kind
    comm_planned: dict[str, float]

    def ratio(self, part: str) -> float:
        """Planned over measured for a state part, or for a collective kind."""
        measured, planned = (self.measured[part], self.planned[part]) if part in PARTS else \
            (self.comm_measured[part], self.comm_planned[part])
        return 1.0 if measured == planned == 0 else (planned / measured if measured else float("inf"))

    @property
    def worst(self) -> float:
        """The part or collective kind furthest from the measurement, as |ratio - 1|."""
        return max(abs(self.ratio(part) - 1) for part in (*PARTS, *KINDS))


def _measure(rank: int, world_size: int, cases: list[tuple[str, str]], model: ModelConfig) -> list[Any]:
    """On every rank: (state, phase) of each (options, backend) case, or why it failed."""
    import torch.distributed as dist

    from shardcompat.train import RunConfig, train_rank

    out: list[Any] = []
    for options, backend in cases:
        # 3 steps: DDP's second broadcasts its rebuilt buckets, once; the last step is a steady one
        config = RunConfig(options or "ddp", options, backend, model, steps=3, batch_size=2,
                           lr=1e-3, seed=0, device="cpu", progress="off")
        try:
            result = train_rank(rank, world_size, config).ranks[0]
            out.append((result.state, result.state_phase, result.comm["bytes"]))
        except Exception as error:  # one case failing must not hide the others
            out.append(f"{type(error).__name__}: {error}")
            dist.barrier()
    return out


def planned(options: str, backend: str, stage: int, model: ModelConfig, nproc: int) -> tuple[Estimate, dict[str, float]]:
    parsed = parse_options(options)
    layout = layout_of(build_model(model, 0), parsed)
    return (estimate(parsed, backend, stage, layout, nproc, precision="fp32"),
            volume(parsed, backend, stage, layout, nproc, precision="fp32"))


def measure(name: str, model: ModelConfig, nproc: int, options: tuple[str, ...] = OPTIONS,
            backends: tuple[str, ...] | None = None) -> tuple[list[Row], list[str]]:
    served = [(o, b, s) for o in options for b, s in servers(o, nproc) if backends is None or b in backends]
    per_rank = spawn(_measure, nproc, ([(o, b) for o, b, _ in served], model), timeout=900)
    rows, failures = [], []
    for i, (options_, backend, stage) in enumerate(served):
        results = [r[i] for r in per_rank]
        failed = next((r for r in results if isinstance(r, str)), None)
        if failed:
            failures.append(f"{options_ or 'ddp'} on {backend}, {nproc} ranks: {failed.splitlines()[0]}")
            continue
        state, phase, comm = max(results, key=lambda r: r[0].total)
        plan, moved = planned(options_, backend, stage, model, nproc)
        rows.append(Row(name, options_ or "ddp", backend, nproc,
                        {"params": state.params, "grads": state.grads, "optimizer": state.optim}, phase,
                        {part: getattr(plan, part) for part in PARTS}, plan.phase, comm, moved))
    return rows, failures


def table(rows: list[Row]) -> str:
    head = (f"{'model':<7} {'options':<27} {'backend':<14} {'N':>2}  "
            + "  ".join(f"{part + ' measured / planned':<34}" for part in (*PARTS, "comm/step"))
            + "  peak phase (measured / planned)")
    lines = [head]
    for r in rows:
        cells = "  ".join(f"{format_bytes(m):>10} / {format_bytes(p):>10} {p / m if m else 1:7.3f}x " for m, p in (
            *((r.measured[part], r.planned[part]) for part in PARTS),
            (sum(r.comm_measured.values()), sum(r.comm_planned.values()))))
        mark = " *" if r.worst > TOLERANCE else ""
        lines.append(f"{r.model:<7} {r.options:<27} {r.backend:<14} {r.nproc:>2}  {cells}  "
                     f"{r.phase} / {r.planned_phase}{mark}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the small model only")
    parser.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--backend", nargs="+", default=None, help="only these backends (default: all here)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows, failures = [], []
    for name, model in MODELS.items():
        if args.quick and name != "small":
            continue
        for nproc in args.nproc:
            found, failed = measure(name, model, nproc, backends=tuple(args.backend) if args.backend else None)
            rows += found
            failures += failed
    if args.json:
        print(json.dumps({"rows": [asdict(r) for r in rows], "failures": failures}, indent=2))
        return 0
    print(table(rows))
    for failure in failures:
        print(f"failed: {failure}")
    off = [r for r in rows if r.worst > TOLERANCE]
    print(f"\n{len(rows) - len(off)} of {len(rows)} rows: every part within {TOLERANCE:.0%} of the measurement"
          + (f"; {len(off)} off (*)" if off else ""))
    return 1 if off or failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
