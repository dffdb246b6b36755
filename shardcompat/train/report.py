"""The report ``shardcompat train`` ends with: one data shape, printed as a table or as JSON.

The table is rendered from the same dict ``--json`` prints, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..memory import (
    StateBytes,
    held_whole_from_forward,
    off_model_reason,
    plan_stage,
    zero_model_volume,
)

__all__ = ["RankResult", "RunResult", "align_columns", "build_report", "format_bytes", "render_table"]


@dataclass(frozen=True)
class RankResult:
    """What one rank measured in one run."""

    rank: int
    state: StateBytes
    state_phase: str  # the point of the last step where the state was largest
    peak_rss: int
    peak_device: int | None
    median_step_s: float
    # collective bytes and calls of one optimizer step by kind (shardcompat.comm.CommVolume.as_dict)
    comm: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    """One training run: its options, the backend that served them, global losses, every rank."""

    label: str
    options: str
    backend: str
    losses: list[float]
    ranks: list[RankResult] = field(default_factory=list)
    resumed_from_step: int | None = None  # the checkpoint's step when the run resumed; losses include the saved ones


def _run_dict(run: RunResult) -> dict[str, Any]:
    ranks = []
    for r in run.ranks:
        row = asdict(r)
        row.pop("state")
        ranks.append({"rank": r.rank, **r.state.as_dict(), **{k: v for k, v in row.items() if k != "rank"}})
    return {"label": run.label, "options": run.options, "backend": run.backend, "losses": run.losses, "ranks": ranks}


def max_loss_diff(a: Sequence[float], b: Sequence[float]) -> float:
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def build_report(setup: dict[str, Any], runs: Sequence[RunResult], reference: RunResult | None = None) -> dict[str, Any]:
    """The whole report; with ``reference`` (plain DDP) also its rows and the largest loss difference."""
    report: dict[str, Any] = {**setup, "runs": [_run_dict(r) for r in runs]}
    if reference is not None:
        report["reference"] = _run_dict(reference)
        report["max_loss_diff"] = max(max_loss_diff(r.losses, reference.losses) for r in runs)
    for run in [*report["runs"], *([report["reference"]] if reference is not None else [])]:
        for rank in run["ranks"]:
            ratio = comm_ratio(run, rank, setup["world_size"], setup["model"]["parameters"], setup["device"])
            if ratio is not None:
                rank["comm"]["zero_model_ratio"] = round(ratio, 4)
    return report


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


_COLUMNS = ("run", "backend", "rank", "counted after", "params", "grads", "optim", "total", "on CPU", "peak RSS",
            "step", "comm/step", "calls")


def comm_ratio(run: dict[str, Any], rank: dict[str, Any], world_size: int, parameters: int, device: str) -> float | None:
    """A rank's collective bytes of one step over the ZeRO model's (2Ψ; 3Ψ for stage 3; Ψ in fp32)."""
    if not rank.get("comm"):
        return None
    stage = plan_stage(run["options"], run["backend"], world_size, device) if run["options"] else 0
    return float(rank["comm"]["total"]) / zero_model_volume(stage, 4 * parameters)


def _rows(run: dict[str, Any], reference: dict[str, Any] | None) -> list[list[str]]:
    rows = []
    for i, r in enumerate(run["ranks"]):
        ratio = r.get("comm", {}).get("zero_model_ratio")
        comm = "-" if ratio is None else f"{format_bytes(r['comm']['total'])} ({ratio:.2f}x)"
        calls = "-" if ratio is None else str(r["comm"]["collectives"])
        total = format_bytes(r["total"])
        if reference is not None and reference is not run:
            total += f" ({r['total'] / reference['ranks'][i]['total']:.2f}x)"
        rows.append([
            run["label"], _served_by(run), str(r["rank"]), r["state_phase"].removeprefix("after "),
            format_bytes(r["params"]), format_bytes(r["grads"]),
            format_bytes(r["optim"]), total, format_bytes(r["cpu"]), format_bytes(r["peak_rss"]),
            f"{r['median_step_s'] * 1000:.1f} ms", comm, calls,
        ])
    return rows


def align_columns(table: Sequence[Sequence[str]]) -> list[str]:
    """The rows of ``table`` (its header first) as text lines, each column padded to its widest cell."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]


def render_table(report: dict[str, Any]) -> str:
    """A plain-text summary: the setup, losses, and one row per (run, rank)."""
    model = report["model"]
    lines = [
        f"{model['kind']} ({model['parameters']:,} parameters), {report['world_size']} ranks on "
        f"{report['device']}, {report['steps']} steps, batch {report['batch_size']} per rank",
    ]
    if "placement" in report:
        where = report["placement"]
        mesh = " x ".join(f"{n} {d}" for n, d in zip(where["mesh"], where["mesh_dims"]))
        lines.append(f"placement: {where['nodes']} node(s) x {where['ranks_per_node']} rank(s), mesh {mesh}")
    if report.get("resumed_from_step") is not None:
        lines.append(f"resumed from the checkpoint at step {report['resumed_from_step']} "
                     "(losses before it are the saved ones)")
    reference = report.get("reference")
    runs = [*report["runs"], *([reference] if reference else [])]
    for run in runs:
        losses = run["losses"]
        who = f"{run['label']} on {run['backend']}" if run["options"] else f"{run['label']} (plain torch DDP)"
        lines.append(f"{who}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    lines.append("")
    lines += align_columns([list(_COLUMNS)] + [row for run in runs for row in _rows(run, reference)])
    for run in report["runs"]:  # why a run's state is off the ZeRO model, when it is
        note = off_model_reason(run["options"], run["backend"], report["world_size"], model["parameters"],
                                max(r["total"] for r in run["ranks"]), device=report["device"])
        if note:
            lines.append(f"{run['label']} on {run['backend']}: {note}")
    if "max_loss_diff" in report:
        lines.append(f"\nlargest loss difference vs plain DDP: {report['max_loss_diff']:.3g}")
    legend = ("state = bytes of unique storages this rank holds, counted after the phase of the last step where "
              "they peak; comm/step = collective bytes of the last step (all-reduce counted twice) and (Nx) "
              "against the ZeRO model, 2Ψ or 3Ψ for zero_dp_3")
    if reference is not None:
        legend += "; (Nx) = total against the same rank of plain DDP"
    if "peak_rss_measured" in report:
        legend += f"; peak RSS = {report['peak_rss_measured']}"
    lines.append(f"({legend})")
    for run in runs:  # why a rank's state peaked before any gradient existed
        if any(r["state_phase"] == "after forward" for r in run["ranks"]):
            why = held_whole_from_forward(run["options"], _served_by(run), report["world_size"],
                                          device=report["device"])
            whole = f", and {why}: hence grads 0 B next to whole params" if why else ": hence grads 0 B"
            lines.append(f"({run['label']} on {_served_by(run)} counted after forward: no gradients exist yet{whole})")
    return "\n".join(lines)


def _served_by(run: dict[str, Any]) -> str:
    """The backend, or for a run without sharding what really serves it: torch's DDP."""
    return str(run["backend"]) if run["options"] else "torch-ddp"
