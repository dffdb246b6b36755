"""The first run on a CUDA machine: every backend and stage, in one table.

    python -m benchmarks.gpu_check            # on a GPU machine: runs everything (a few minutes)
    python -m benchmarks.gpu_check --plan     # only print what it would run (what it does on CPU)

For each backend and stage (simple, zero_dp_1, zero_dp_2, zero_dp_3, zero_dp_3 offload,
auto_wrap, fp16, bf16) it trains a GPT with ``shardcompat train``'s own unit of work
(:func:`shardcompat.train.train_rank`) next to plain DDP in the same process group, and
prints: whether it ran (or why not), the largest loss difference from plain DDP, the peak
CUDA memory of the largest rank (``torch.cuda.max_memory_allocated``, above what was
allocated before the run) against the ZeRO model's per-rank bytes on the device for the
stage the plan implements, and the median step time.

World sizes: 1 rank with NCCL; then 2 ranks, with NCCL on 2 GPUs when the machine has them,
else sharing GPU 0 through gloo (NCCL refuses two ranks on one device; gloo runs only some
collectives on CUDA tensors, so backends needing others fail there: which ones is printed).
Each world runs every case in one process group; a case that kills its group is reported
and the rest continue in a new one.  Exit status 1 when a case failed or missed its loss
tolerance under NCCL; 0 otherwise, and on a machine without CUDA (after printing the plan).
"""

from __future__ import annotations

import argparse
import gc
import pickle
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcompat.memory import plan_stage, zero_model_bytes, zero_model_host_bytes
from shardcompat.options import BACKEND_NAMES, parse_options
from shardcompat.train.models import ModelConfig, build_model, count_parameters
from shardcompat.train.report import format_bytes

# Big enough that optimizer state, not activations or cuBLAS workspaces, dominates memory.
MODEL = ModelConfig(kind="gpt", layers=4, dim=512, heads=8, vocab=512, seq_len=32)
BATCH, LR, STEPS = 4, 1e-3, 10
STAGES = ("simple", "zero_dp_1", "zero_dp_2", "zero_dp_3", "zero_dp_3 offload", "auto_wrap", "fp16", "bf16")
# Largest loss difference from fp32 plain DDP over the run (GPU kernels are not bit-exact).
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 5e-2}
REFERENCE = ("", "torch-zero")  # plain DDP


def options_for(stage: str, backend: str) -> str:
    """The options of a stage row; mixed precision rides on the deepest stage the backend serves."""
    if stage == "auto_wrap":
        return "zero_dp_3 auto_wrap"
    if stage in ("fp16", "bf16"):
        base = {"torch-zero": "zero_dp_1", "fairscale-sdp": "simple"}.get(backend, "zero_dp_3 auto_wrap")
        return f"{base} mixed_precision={stage}"
    return stage


@dataclass(frozen=True)
class World:
    nproc: int
    backend: str  # the process group's: nccl or gloo
    shared: bool  # ranks share GPU 0
    device: str = "cuda"  # "cpu" only for the test of this script's own plumbing

    def __str__(self) -> str:
        where = "sharing GPU 0" if self.shared else ("1 GPU" if self.nproc == 1 else "1 GPU each")
        return f"{self.nproc} rank{'s' if self.nproc > 1 else ''} {self.backend}, {where}"


def worlds(gpus: int) -> list[World]:
    """World size 1 with NCCL; 2 with NCCL on 2 GPUs, else 2 sharing GPU 0 over gloo."""
    return [World(1, "nccl", False), World(2, "nccl", False) if gpus >= 2 else World(2, "gloo", True)]


@dataclass
class Row:
    world: World
    backend: str
    stage: str
    options: str
    status: str = "to run"  # "to run", "ran", or why not / what failed
    losses: list[float] | None = None
    peak: int | None = None  # bytes, largest rank, above its baseline
    step_s: float | None = None
    model: float | None = None  # the ZeRO model's bytes on the device
    loss_diff: float | None = None

    @property
    def precision(self) -> str:
        mixed = parse_options(self.options).mixed_precision
        return "fp32" if mixed is None else mixed.value

    @property
    def failed(self) -> bool:
        over = self.loss_diff is not None and self.loss_diff > TOLERANCE[self.precision]
        return (self.status.startswith("FAILED") or over) and not self.world.shared


def plan_rows(world: World) -> list[Row]:
    """Every backend x stage, with why a row cannot run here (not installed, not served)."""
    from shardcompat.backends import Placement, UnsupportedOptions, get

    placement = Placement(world_size=world.nproc, local_world_size=world.nproc, device="cuda:0")
    psi = count_parameters(build_model(MODEL, 0))
    rows = [Row(world, REFERENCE[1], "plain DDP", REFERENCE[0])]
    for backend in BACKEND_NAMES:
        impl = get(backend)
        probe = impl.probe()
        for stage in STAGES:
            row = Row(world, backend, stage, options_for(stage, backend))
            options = parse_options(row.options)
            if not probe:
                row.status = f"not installed: {probe.reason}"
            elif options.stage not in impl.serves:
                row.status = f"not served: {backend} does not serve {options.stage}"
            else:
                try:
                    impl.plan(options, placement)
                except UnsupportedOptions as error:
                    row.status = f"not served: {error.reason}"
            rows.append(row)
    for row in rows:
        if row.status == "to run":
            zero = plan_stage(row.options, row.backend, world.nproc, "cuda")
            offload = zero_model_host_bytes(zero, psi, world.nproc) if parse_options(row.options).offload else 0
            row.model = zero_model_bytes(zero, psi, world.nproc) - offload
    return rows


# ----------------------------------------------------------------------------- the runs
def _case(rank: int, world_size: int, options: str, backend: str, steps: int, model: ModelConfig,
          device: str) -> dict[str, Any]:
    """One case on this rank: ``shardcompat train``'s own measurement of it, or its error."""
    import torch

    from shardcompat.train import RunConfig, train_rank

    cuda = device == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated() if cuda else 0  # a previous case's leftovers
    config = RunConfig(options or "ddp", options, backend, model, steps=steps, batch_size=BATCH, lr=LR,
                       seed=0, device=device, progress="off")
    run = train_rank(rank, world_size, config)
    mine = run.ranks[0]
    return {"losses": run.losses, "backend": run.backend, "step_s": mine.median_step_s,
            "peak": None if mine.peak_device is None else mine.peak_device - baseline}


def _job(rank: int, world_size: int, cases: list[tuple[str, str]], out: str, steps: int, model: ModelConfig,
         device: str) -> None:
    """Every case in order, each rank writing its result (or error) as soon as it has it."""
    import torch.distributed as dist

    for i, (options, backend) in enumerate(cases):
        try:
            result: dict[str, Any] = _case(rank, world_size, options, backend, steps, model, device)
        except Exception as error:  # reported in the table; the others still run
            result = {"error": f"{type(error).__name__}: {error}".splitlines()[0][:200]}
            dist.barrier()
        Path(out, f"{i}-{rank}.pkl").write_bytes(pickle.dumps(result))


def run_world(world: World, rows: list[Row], steps: int, model: ModelConfig = MODEL) -> None:
    """Run the world's runnable rows; a case that kills the process group is marked and skipped."""
    from shardcompat.launch import WorkerFailed, WorkerTimeout, spawn

    todo = [row for row in rows if row.status == "to run"]
    while todo:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as out:
            cases = [(row.options, row.backend) for row in todo]
            try:
                spawn(_job, world.nproc, (cases, out, steps, model, world.device), backend=world.backend, timeout=600,
                      collective_timeout=30 if world.shared else 60)
                crash = ""
            except (WorkerFailed, WorkerTimeout) as error:
                said = [line for line in str(error).splitlines() if line.strip() and not line.startswith("(")]
                crash = said[-1][:200] if said else type(error).__name__
            done = 0
            for i, row in enumerate(todo):
                results = [Path(out, f"{i}-{r}.pkl") for r in range(world.nproc)]
                if not all(p.exists() for p in results):
                    break
                _record(row, [pickle.loads(p.read_bytes()) for p in results])
                done += 1
        if done < len(todo):
            todo[done].status = f"FAILED (killed the process group): {crash}"
            done += 1
        todo = todo[done:]
    reference = next((row for row in rows if row.stage == "plain DDP"), None)
    for row in rows:
        if row is not reference and reference is not None and row.losses and reference.losses:
            row.loss_diff = max(abs(a - b) for a, b in zip(row.losses, reference.losses))


def _record(row: Row, per_rank: list[dict[str, Any]]) -> None:
    errors = [r["error"] for r in per_rank if "error" in r]
    if errors:
        row.status = f"FAILED: {errors[0]}"
        return
    row.status = "ran" if per_rank[0]["backend"] == row.backend else f"ran on {per_rank[0]['backend']}"
    row.losses = per_rank[0]["losses"]
    peaks = [r["peak"] for r in per_rank if r["peak"] is not None]
    row.peak = max(peaks) if peaks else None
    row.step_s = max(r["step_s"] for r in per_rank)


# ----------------------------------------------------------------------------- the table
def table(rows: list[Row]) -> str:
    """The rows that run (or ran), then in one line each: what is not served, not installed, failed."""
    head = (f"{'world':<28} {'backend':<14} {'stage':<17} {'result':<8} {'loss diff':>9} "
            f"{'peak CUDA':>10} {'ZeRO model':>10} {'ratio':>6} {'step':>9}")
    lines = [head]
    missing: dict[str, str] = {}  # backend -> why it is not installed
    refused: dict[str, list[str]] = {}  # backend -> the stages it does not serve (any world)
    failures = []
    for row in rows:
        if row.status.startswith("not installed"):
            missing[row.backend] = row.status
            continue
        if row.status.startswith("not served"):
            stages = refused.setdefault(row.backend, [])
            if row.stage not in stages:
                stages.append(row.stage)
            continue
        if row.status.startswith("FAILED"):
            failures.append(f"{row.world} / {row.backend} / {row.stage}: {row.status}")
        result = row.status.split(":")[0].split(" (")[0]
        over = row.loss_diff is not None and row.loss_diff > TOLERANCE[row.precision]
        diff = "-" if row.loss_diff is None else f"{row.loss_diff:.1e}" + ("!" if over else "")
        ratio = "-" if not (row.peak and row.model) else f"{row.peak / row.model:.2f}"
        step = "-" if row.step_s is None else f"{row.step_s * 1e3:.1f} ms"
        lines.append(f"{row.world!s:<28} {row.backend:<14} {row.stage:<17} {result:<8} {diff:>9} "
                     f"{format_bytes(row.peak):>10} {format_bytes(row.model):>10} {ratio:>6} {step:>9}")
    tolerances = ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items())
    lines.append(f"(loss diff: largest against plain DDP in the same world, '!' over the tolerance ({tolerances}); "
                 "peak CUDA: max_memory_allocated of the largest rank; ZeRO model: its per-rank bytes on the "
                 "device, offload's sharded part excluded; ratio: peak / model, activations and workspaces included)")
    lines.append("")
    lines += [f"{backend} does not serve: {', '.join(stages)}" for backend, stages in refused.items()]
    lines += [f"{backend}: {why}" for backend, why in missing.items()]
    return "\n".join(lines + failures)


def gloo_cuda_collectives() -> str:
    """Which collectives gloo runs on CUDA tensors here (what decides the shared-GPU rows)."""
    from shardcompat.launch import spawn

    return ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in spawn(_probe_gloo, 2, timeout=120)[0].items())


def _probe_gloo(rank: int, world_size: int) -> dict[str, bool]:
    import torch
    import torch.distributed as dist

    t = torch.ones(4, device="cuda")
    ops: dict[str, Callable[[], Any]] = {
        "all_reduce": lambda: dist.all_reduce(t.clone()),
        "broadcast": lambda: dist.broadcast(t.clone(), 0),
        "reduce": lambda: dist.reduce(t.clone(), 0),
        "all_gather": lambda: dist.all_gather([torch.empty_like(t) for _ in range(world_size)], t),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(torch.empty(4 * world_size, device="cuda"), t),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(torch.empty(4 // world_size, device="cuda"),
                                                                    torch.ones(4, device="cuda")),
    }
    found = {}
    for name, op in ops.items():  # every rank makes the same calls, so a refusal is symmetric
        try:
            op()
            torch.cuda.synchronize()
            found[name] = True
        except Exception:
            found[name] = False
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plan", action="store_true", help="print what would run, and exit")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"optimizer steps per case (default {STEPS})")
    parser.add_argument("--backend", action="append", choices=BACKEND_NAMES,
                        help="only this backend (repeatable); plain DDP always runs as the reference")
    args = parser.parse_args(argv)
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    psi = count_parameters(build_model(MODEL, 0))
    print(f"gpt {MODEL.layers}x{MODEL.dim} (Ψ = {psi:,} parameters), batch {BATCH} per rank, {args.steps} steps, "
          f"AdamW fp32 master weights; torch {torch.__version__}, CUDA {torch.version.cuda}, {gpus} GPU(s)")
    every = [row for world in worlds(max(gpus, 1)) for row in plan_rows(world)]
    if args.backend:
        every = [row for row in every if row.backend in args.backend or row.stage == "plain DDP"]
    if not gpus or args.plan:
        if not gpus:
            print("no CUDA device here, so nothing runs: this is what a machine with one GPU would run "
                  "(with two, the second world is 2 ranks with NCCL, one GPU each)")
        runnable = sum(row.status == "to run" for row in every)
        print(f"{runnable} runs in {len(worlds(max(gpus, 1)))} worlds\n")
        print(table(every))
        return 0
    for world in worlds(gpus):
        if world.shared:
            try:
                print(f"gloo on CUDA tensors here: {gloo_cuda_collectives()}")
            except Exception as error:  # the table still says what ran
                print(f"gloo on CUDA tensors here: could not probe ({type(error).__name__}: {error})")
        run_world(world, [row for row in every if row.world == world], args.steps)
    print()
    print(table(every))
    failed = [row for row in every if row.failed]
    print(f"\n{sum(row.status.startswith('ran') for row in every)} ran, {len(failed)} failed or over tolerance "
          "(rows sharing one GPU through gloo are not counted)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
