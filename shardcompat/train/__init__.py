"""``shardcompat train``: train the bundled GPT with some sharding options, report what it cost.

The same command runs N local ranks itself (``shardcompat.launch.spawn``) or, when started
by ``torchrun``, runs as one of its ranks, so it scales from a laptop to many machines.
Every run is deterministic across backends and launchers: one seed initialises the model
identically on every rank, and each rank's data depends only on (seed, rank, step), so a
sharded run and plain DDP see the same numbers and their losses can be compared.

The report counts state from the unique storages each rank holds (see
:mod:`shardcompat.memory`), at the point of the last step where it is largest (after
forward, after backward or after the optimizer step: zero_dp_2 holds full parameters after
forward, every stage holds gradients after backward).  Peak RSS is the resident high-water
mark (Linux VmHWM; ru_maxrss elsewhere) of a process that trained that run alone: every run
gets processes of its own, under torchrun too (see :func:`_launch`).  It includes the Python
interpreter and torch itself, unlike the state bytes.  The last step's
collectives are counted at torch's dispatcher (:mod:`shardcompat.comm`: every ``c10d`` call,
DDP's C++ reducer included) and held against the ZeRO model's volume.

With ``--checkpoint-dir`` the run saves a ``step-N`` checkpoint every ``--save-every`` steps
and ``--resume auto`` continues from the newest complete one (:mod:`.resume`): under
``torchrun --max-restarts K`` a job whose worker died restarts there and ends exactly as an
uninterrupted run would, since the model, optimizer, RNG and the losses so far are in the
checkpoint and the data depends only on the step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from ..arguments import add_sharded_ddp_argument
from ..options import BACKEND_CHOICES, ShardingOptions
from .report import RankResult, RunResult, build_report, render_table

if TYPE_CHECKING:
    from .models import ModelConfig

__all__ = ["RunConfig", "configure_parser", "placement", "run", "train_rank"]

@dataclass(frozen=True)
class RunConfig:
    """One training run, as every rank receives it."""

    label: str
    options: str
    backend: str
    model: ModelConfig
    steps: int
    batch_size: int
    lr: float
    seed: int
    device: str  # "cpu" or "cuda"
    progress: str  # "bar", "lines" or "off" (rank 0 only)
    checkpoint_dir: str | None = None  # step-N checkpoints go here
    save_every: int = 0  # steps between checkpoints (0: none)
    resume: str | None = None  # --resume: "auto" or a checkpoint folder


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``train`` arguments to ``parser``."""
    add_sharded_ddp_argument(parser)
    parser.add_argument("--nproc", "--nproc-per-node", type=int, default=None,
                        help="local ranks to start (default 2; on GPUs, one per GPU up to 2); "
                             "under torchrun its --nproc-per-node decides (torchrun itself refuses "
                             "--nproc anywhere on its command line)")
    parser.add_argument("--backend", default="auto", choices=BACKEND_CHOICES,
                        help="which implementation serves the options (default auto)")
    parser.add_argument("--model", choices=("gpt", "mlp"), default="gpt", help="bundled model (default gpt)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps (default 20)")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step (default 8)")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks / hidden layers (default 2)")
    parser.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--vocab", type=int, default=64, help="vocabulary size (default 64)")
    parser.add_argument("--seq-len", type=int, default=32, help="tokens per sequence (default 32)")
    parser.add_argument("--lr", type=float, default=1e-2, help="AdamW learning rate (default 1e-2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model and the data (default 0)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: CUDA (nccl) when GPUs are present, else CPU (gloo)")
    parser.add_argument("--compare-ddp", action="store_true",
                        help="also train plain DDP and report the largest loss difference")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (nothing else on stdout)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="limit for the whole job, seconds (default: none)")
    parser.add_argument("--collective-timeout", type=float, default=None,
                        help="limit for any one collective, seconds, so a lost rank cannot hang the job "
                             "(default: torch's for the backend, 30 min for gloo)")
    parser.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                        help="save step-N checkpoints here (a shared folder when several nodes train)")
    parser.add_argument("--save-every", type=int, default=None, metavar="N",
                        help="save a checkpoint every N steps (needs --checkpoint-dir; default a quarter of --steps)")
    parser.add_argument("--resume", default=None, metavar="auto|PATH",
                        help="continue from a checkpoint: auto = the newest complete step-N in "
                             "--checkpoint-dir (none yet: start afresh), or a checkpoint folder")


def run(args: argparse.Namespace) -> int:
    """Train as ``args`` say and print the report; the exit code (non-zero if a rank failed).

    Everything that can be checked before a rank starts is: a bad size, device or option
    fails here in a second with exit 2 and no traceback; so does a refusal a rank raises
    (:mod:`shardcompat._refusal`: a checkpoint that does not fit, a backend's), printed once;
    tracebacks are for crashes inside training.
    """
    from .._refusal import EXIT_CODE, is_refusal
    from ..launch import WorkerFailed, WorkerTimeout, deferred_ctrl_c, launched

    try:
        configs = _configs(args)
        nproc = int(os.environ["WORLD_SIZE"]) if launched() else _nproc(args, configs[0].device)
        _warn_ignored_nproc(args)
        _plan(configs, nproc)
    except ValueError as error:
        print(f"shardcompat train: error: {error}", file=sys.stderr)
        return 2
    # After the checks, which answer from package metadata without torch (seconds on a small machine).
    with deferred_ctrl_c():  # a Ctrl-C inside torch's import would abort it: it is raised after
        import torch  # noqa: F401
    try:
        runs = _launch(configs, nproc, args.timeout, args.collective_timeout)
    except (WorkerFailed, WorkerTimeout) as error:
        refused = getattr(error, "error", None)
        if refused is not None and is_refusal(refused):  # e.g. a checkpoint of another model: one line
            if int(os.environ.get("RANK", "0")) == 0:  # once per job, from global rank 0
                print(f"shardcompat train: error: {refused}", file=sys.stderr)
            return EXIT_CODE
        print(f"shardcompat train: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the ranks are stopped by spawn; no traceback
        print("shardcompat train: interrupted", file=sys.stderr)
        return 130
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, global rank 0 reports
        reference = runs[1] if len(runs) > 1 else None
        report = build_report(_setup(configs, nproc), runs[:1], reference)
        report["resumed_from_step"] = runs[0].resumed_from_step
        report["peak_rss_measured"] = _peak_rss_scope(len(runs))
        print(json.dumps(report, indent=2) if args.json else render_table(report))
    return 0


# --------------------------------------------------------------------------- setup


def _configs(args: argparse.Namespace) -> list[RunConfig]:
    """The requested run, and plain DDP after it with ``--compare-ddp``."""
    options: ShardingOptions = args.sharded_ddp
    _check_numbers(args)
    for flag in ("steps", "batch_size", "layers", "dim", "heads", "vocab", "seq_len"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    from ..backends import refuse_uninstalled

    refuse_uninstalled(options, args.backend)
    import torch  # after the checks that need no torch: they answer at once

    from .models import ModelConfig, build_model

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but no CUDA device is available; use --device cpu")
    progress = "off" if args.json else ("bar" if sys.stderr.isatty() else "lines")
    model = ModelConfig(kind=args.model, layers=args.layers, dim=args.dim, heads=args.heads,
                        vocab=args.vocab, seq_len=args.seq_len)
    build_model(model, args.seed)  # sizes that cannot build a model fail here, not in every rank
    main = RunConfig(str(options) or "ddp", str(options), args.backend, model, args.steps,
                     args.batch_size, args.lr, args.seed, device, progress, *_checkpointing(args))
    plain = replace(main, label="ddp", options="", backend="auto", checkpoint_dir=None, save_every=0,
                    resume=None)  # the reference run is never saved or resumed
    return [main, plain] if args.compare_ddp else [main]


def _check_numbers(args: argparse.Namespace) -> None:
    """``--lr`` and the limits: argparse's float() also takes nan, inf and negatives."""
    if not (math.isfinite(args.lr) and args.lr >= 0):
        raise ValueError(f"--lr must be a finite number >= 0, got {args.lr}")
    for flag in ("timeout", "collective_timeout"):
        value = getattr(args, flag)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"--{flag.replace('_', '-')} must be a positive number of seconds, got {value}; "
                             "leave it out for the default")


def _checkpointing(args: argparse.Namespace) -> tuple[str | None, int, str | None]:
    """``(checkpoint_dir, save_every, resume)``, checked before any rank starts."""
    from .resume import resolve_resume

    save_every = args.save_every
    if save_every is not None and args.checkpoint_dir is None:
        raise ValueError("--save-every needs --checkpoint-dir: the folder for the step-N checkpoints")
    if save_every is not None and save_every < 1:
        raise ValueError(f"--save-every must be at least 1, got {save_every}")
    if args.checkpoint_dir is not None and save_every is None:
        save_every = max(1, args.steps // 4)
    resolve_resume(args.resume, args.checkpoint_dir, args.steps)  # a bad --resume fails here, not in a rank
    return args.checkpoint_dir, save_every or 0, args.resume


def _warn_ignored_nproc(args: argparse.Namespace) -> None:
    """Under a launcher the layout is the launcher's: say so when the command line asked for another."""
    from ..launch import launched

    local = os.environ.get("LOCAL_WORLD_SIZE")
    if launched() and args.nproc is not None and local is not None and str(args.nproc) != local:
        print(f"shardcompat train: warning: --nproc-per-node {args.nproc} is ignored under torchrun, which "
              f"started {local} rank(s) on this node (its own --nproc-per-node decides)", file=sys.stderr)


def _nproc(args: argparse.Namespace, device: str) -> int:
    if args.nproc is not None:
        if args.nproc < 1:
            raise ValueError(f"--nproc must be at least 1, got {args.nproc}")
        return int(args.nproc)
    if device == "cuda":
        import torch

        return min(2, torch.cuda.device_count())
    return 2


def _plan(configs: list[RunConfig], world_size: int) -> None:
    """Resolve every run's options against the probed backends, as each rank will (read-only:
    the random streams stay where they were)."""
    from .. import _rng
    from ..backends import Placement, resolve
    from ..options import parse_options

    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    placement = Placement(world_size=world_size, local_world_size=local, device=configs[0].device)
    with _rng.unchanged():
        for config in configs:
            resolve(parse_options(config.options), config.backend, placement)


def _setup(configs: list[RunConfig], world_size: int) -> dict[str, Any]:
    from .models import build_model, count_parameters

    model = configs[0].model
    return {
        "model": {**asdict(model), "parameters": count_parameters(build_model(model, configs[0].seed))},
        "world_size": world_size,
        "device": configs[0].device,
        "steps": configs[0].steps,
        "batch_size": configs[0].batch_size,
        "lr": configs[0].lr,
        "seed": configs[0].seed,
        "placement": placement(configs[0].options, world_size),
    }


def placement(options: str, world_size: int) -> dict[str, Any]:
    """Nodes, ranks per node and the mesh the sharding runs over, from the launcher's layout.

    ``LOCAL_WORLD_SIZE`` (torchrun's ranks per node) when launched, else one node.  Hybrid
    options shard within a node and replicate across nodes: a ``[nodes, ranks per node]``
    mesh; everything else runs over all ranks as one dimension.
    """
    from ..options import parse_options

    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    nodes = max(1, world_size // max(1, local))
    hybrid = parse_options(options).hybrid
    return {
        "nodes": nodes,
        "ranks_per_node": local,
        "mesh": [nodes, world_size // nodes] if hybrid else [world_size],
        "mesh_dims": ["replicate", "shard"] if hybrid else ["shard" if options else "replicate"],
    }


# --------------------------------------------------------------------------- launchers


def _launch(
    configs: list[RunConfig], nproc: int, timeout: float | None, collective_timeout: float | None
) -> list[RunResult]:
    """Every run, merged across ranks.

    Each run gets processes of its own, so each rank's peak RSS is that run's alone:
    started here, a new group of ranks per run; under torchrun with several runs, each rank
    starts a child per run, and the children of all ranks form that run's group
    (:func:`~shardcompat.launch.spawn` with ``fresh``).  A single run under torchrun trains
    in the rank itself: nothing ran before it there, and torchrun sees its worker die as is.
    """
    from ..launch import spawn

    backend = "nccl" if configs[0].device == "cuda" else "gloo"
    runs = []
    for job in _jobs(configs):
        per_rank = spawn(_train_ranks, nproc, (job,), backend=backend, timeout=timeout,
                         collective_timeout=collective_timeout, fresh=len(configs) > 1)
        runs += [_merge([outcomes[i] for outcomes in per_rank]) for i in range(len(job))]
    return runs


def _jobs(configs: list[RunConfig]) -> list[list[RunConfig]]:
    """The runs grouped by the processes that train them: one group per run where it can be
    (:func:`~shardcompat.launch.fresh_processes`), else all in this rank, one after another."""
    from ..launch import fresh_processes

    return [[config] for config in configs] if fresh_processes() else [configs]


def _peak_rss_scope(runs: int) -> str:
    """How the report's peak RSS was measured, in words (the table's legend and ``--json``)."""
    from ..launch import fresh_processes, launched
    from ..memory import peak_rss_method

    counter = peak_rss_method()
    if not launched():
        return f"{counter} of a fresh process per run and rank"
    if runs == 1:
        return f"{counter} of the torchrun worker itself, which also did this rank's setup"
    if fresh_processes():
        return f"{counter} of a fresh child process of each torchrun worker per run"
    return (f"{counter} of the torchrun worker, which trained all {runs} runs in turn: a later run's peak "
            "includes what the earlier ones left resident")


def _merge(per_rank: list[RunResult]) -> RunResult:
    """One run from every rank's view of it (losses are global, so rank 0's serve)."""
    first = per_rank[0]
    return replace(first, ranks=[r for outcome in per_rank for r in outcome.ranks])


# --------------------------------------------------------------------------- one rank


def _train_ranks(rank: int, world_size: int, configs: list[RunConfig]) -> list[RunResult]:
    """Every rank calls this in an initialised process group; one result per config."""
    return [train_rank(rank, world_size, config) for config in configs]


def train_rank(rank: int, world_size: int, config: RunConfig) -> RunResult:
    """Train ``config`` as ``rank`` of an initialised process group (every rank calls it).

    The CLI's unit of work, public so benchmarks measure exactly what the command measures.
    """
    import torch
    import torch.distributed as dist

    import shardcompat

    from ..comm import CommCounter
    from ..memory import peak_rss, reset_peak_rss
    from .models import build_model

    cuda = config.device == "cuda"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    reset_peak_rss()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model = build_model(config.model, config.seed).to(device)
    prepared = shardcompat.prepare(
        model, lambda params: torch.optim.AdamW(params, lr=config.lr), config.options,
        backend=config.backend, device=device,
    )
    losses, resumed_from = _resume(prepared, config)
    start_step = resumed_from or 0
    times: list[float] = []
    snapshots: dict[str, Any] = {}
    with _progress(config, rank) as report_loss:
        for step in range(start_step, config.steps):
            last = step == config.steps - 1
            start = time.perf_counter()
            if last:  # the last step also counts its collectives (it is not timed)
                with CommCounter() as counter:
                    loss = _step(prepared, config, rank, step, device, snapshots)
            else:
                loss = _step(prepared, config, rank, step, device, None)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            total = loss.detach().float().reshape(1)
            dist.all_reduce(total)
            losses.append(float(total) / world_size)
            report_loss(step, losses[-1])
            _maybe_save(prepared, config, step + 1, losses)
    phase, state = max(snapshots.items(), key=lambda item: item[1].total)
    timed = times[:-1] or times  # the last step took the memory snapshots
    result = RankResult(
        rank=rank, state=state, state_phase=phase, peak_rss=peak_rss(),
        peak_device=int(torch.cuda.max_memory_allocated()) if cuda else None,
        median_step_s=statistics.median(timed), comm=counter.volume.as_dict(),
    )
    return RunResult(config.label, config.options, prepared.backend, losses, [result],
                     resumed_from_step=resumed_from)


def _resume(prepared: Any, config: RunConfig) -> tuple[list[float], int | None]:
    """The losses so far and the step resumed from (``None``: a fresh start).

    Rank 0 resolves ``--resume`` now (``auto``: the newest complete checkpoint at this
    moment, which is what a restarted attempt needs) and tells the others, so every rank
    loads the same checkpoint even if their views of the folder differ.
    """
    import torch.distributed as dist

    from .resume import ResumeError, resolve_resume

    if config.resume is None:
        return [], None
    choice: list[str | None] = [None, None]  # the checkpoint, or why there is none to take
    if dist.get_rank() == 0:
        try:
            found = resolve_resume(config.resume, config.checkpoint_dir, config.steps)
            choice[0] = None if found is None else str(found)
        except ValueError as error:  # every rank raises it, none waits for rank 0
            choice[1] = str(error)
    dist.broadcast_object_list(choice, src=0)
    if choice[1] is not None:
        raise ResumeError(choice[1])
    if choice[0] is None:
        return [], None
    loaded = prepared.load_checkpoint(choice[0])  # model, optimizer, step count and each rank's RNG
    return [float(x) for x in loaded.get("losses", [])], int(loaded["step"])


def _maybe_save(prepared: Any, config: RunConfig, done: int, losses: list[float]) -> None:
    """Save ``step-<done>`` when it is due (never after the last step: nothing would resume from it)."""
    if config.checkpoint_dir is None or done % config.save_every or done >= config.steps:
        return
    from .resume import checkpoint_path

    prepared.save_checkpoint(checkpoint_path(config.checkpoint_dir, done), step=done, losses=list(losses))


def _step(prepared: Any, config: RunConfig, rank: int, step: int, device: Any,
          snapshots: dict[str, Any] | None) -> Any:
    """One optimizer step; with ``snapshots``, the state held after each phase of it."""
    from .. import _rng
    from ..memory import count_state
    from . import data

    def snapshot(phase: str) -> None:
        if snapshots is not None:
            with _rng.unchanged():  # measuring is read-only
                snapshots[phase] = count_state(prepared.local_tensors())

    inputs, targets = data.batch(config.model, config.batch_size, config.seed, rank, step)
    loss = data.loss(config.model, prepared(inputs.to(device)), targets.to(device))
    snapshot("after forward")
    prepared.backward(loss)
    snapshot("after backward")
    prepared.step()
    snapshot("after step")
    prepared.zero_grad()
    return loss


@contextlib.contextmanager
def _progress(config: RunConfig, rank: int) -> Iterator[Any]:
    """A callback ``(step, loss)``: a tqdm bar on a TTY; otherwise a line after the first step
    trained (so a log shows that training has begun) and every tenth of the run."""
    if rank != 0 or config.progress == "off":
        yield lambda step, loss: None
        return
    if config.progress == "bar":
        from tqdm import tqdm

        with tqdm(total=config.steps, desc=config.label, file=sys.stderr, leave=False) as bar:
            def advance(step: int, loss: float) -> None:
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
                bar.update(1)

            yield advance
        return
    every = max(1, config.steps // 10)
    started = [False]  # the first step this run trains gets a line: training has begun

    def line(step: int, loss: float) -> None:
        first, started[0] = not started[0], True
        if first or (step + 1) % every == 0 or step == config.steps - 1:
            print(f"[{config.label}] step {step + 1}/{config.steps} loss {loss:.4f}", file=sys.stderr, flush=True)

    yield line
