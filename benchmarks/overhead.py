"""What ``shardcompat.prepare`` costs over the same backend built by hand, measured so that
the answer does not depend on how loaded the machine is.

1. Step ratio.  Each backend trains the default ``shardcompat train`` model twice in one
   process group: through ``prepare`` and built by hand with the exact call its plan names.
   Many short pairs interleave the two (one step each, the order swapped every pair, the same
   batch for both), and each step is timed in CPU time of the rank's main thread
   (``time.thread_time``): time spent waiting for a busy CPU or a slower rank does not count.
   The main thread does all the computing (one intra-op thread per rank) and runs every line
   of the shim; gloo's own threads move the same bytes in both arms, and counting them
   (``process_time``) nearly tripled the spread of zero_dp_1's ratios.  A pair's ratio is the
   shim's step over the hand-built one, summed over the ranks; the figure is the median of the
   pairs' ratios with a bootstrap 95% interval.  Pairs
   run in rounds (every backend in each round, so drift in the load falls on all alike) until
   each interval lies wholly on one side of 1.02 or ``--max-pairs`` is reached.
   Verdict: ``<= 1.02`` when the whole interval is at or below 1.02.
2. Per-call bound.  Each ``Prepared`` method on the hot path against the call it wraps, in
   microseconds of thread CPU time (median over repetitions of many calls).  ``__call__``,
   ``backward``, ``step`` and ``zero_grad`` only delegate, so they are timed with the wrapped
   model, loss and optimizer replaced by no-op stand-ins: what remains is the shim's own work,
   to the tenth of a microsecond, not hidden in a millisecond forward.  ``no_sync`` and
   ``clip_grad_norm_`` have backend logic of their own and are timed on the real objects,
   against what a user would call by hand.  Their sum over one step's calls is set against
   the hand-built step's CPU time.

    python -m benchmarks.overhead [--quick] [--pairs N] [--max-pairs N] [--nproc N]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from shardcompat.launch import spawn
from shardcompat.train import data
from shardcompat.train.models import GPTBlock, ModelConfig, build_model, count_parameters

TARGET = 1.02
METHODS = ("__call__", "backward", "step", "zero_grad", "no_sync", "clip_grad_norm_")
PER_STEP = ("__call__", "backward", "step", "zero_grad")  # what every step of `shardcompat train` calls
Built = tuple[Any, Any]  # (what is called, the optimizer)


def train_defaults() -> tuple[ModelConfig, int, float]:
    """The model, per-rank batch and learning rate ``shardcompat train`` uses by default."""
    from shardcompat.train import configure_parser

    parser = argparse.ArgumentParser()
    configure_parser(parser)
    a = parser.parse_args([])
    model = ModelConfig(kind=a.model, layers=a.layers, dim=a.dim, heads=a.heads, vocab=a.vocab, seq_len=a.seq_len)
    return model, a.batch_size, a.lr


# ------------------------------------------------------------------------------- by hand
# The exact calls each backend's plan names (see `shardcompat explain`), written out by hand.
def _adamw(lr: float) -> Callable[[Any], torch.optim.Optimizer]:
    return lambda params: torch.optim.AdamW(params, lr=lr)


def _ddp(model: nn.Module, lr: float) -> Built:
    ddp = nn.parallel.DistributedDataParallel(model)
    return ddp, _adamw(lr)(ddp.parameters())


def _ddp_zero(model: nn.Module, lr: float) -> Built:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from shardcompat.backends._zero_hook import Owners, reduce_scatter_to_owners

    ddp = nn.parallel.DistributedDataParallel(model)
    zero = ZeroRedundancyOptimizer(list(ddp.parameters()), optimizer_class=torch.optim.AdamW,
                                   parameters_as_bucket_view=True, lr=lr)
    # The hook the plan registers (gradients reduce-scattered to their owners): what a user
    # serving ZeRO-1 at 2Ψ by hand would write, so both arms move the same bytes.
    ddp.register_comm_hook(Owners(zero, None), reduce_scatter_to_owners)
    return ddp, zero


def _fsdp1(model: nn.Module, lr: float) -> Built:
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

    wrapped = FullyShardedDataParallel(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                                       device_id=torch.device("cpu"), use_orig_params=True)
    return wrapped, _adamw(lr)(wrapped.parameters())


def _fsdp2(model: nn.Module, lr: float) -> Built:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.modules():
        if isinstance(block, GPTBlock):
            fully_shard(block, mesh=mesh)  # torch's defaults: units reshard after forward,
    fully_shard(model, mesh=mesh)  # the root does not (backward needs it at once)
    return model, _adamw(lr)(model.parameters())


def _sharded_ddp(model: nn.Module, lr: float) -> Built:
    from fairscale.nn.data_parallel import ShardedDataParallel
    from fairscale.optim.oss import OSS

    oss = OSS(model.parameters(), optim=torch.optim.AdamW, lr=lr)
    return ShardedDataParallel(model, oss, reduce_buffer_size=0), oss


def _fairscale_fsdp(model: nn.Module, lr: float) -> Built:
    import importlib

    from shardcompat.backends._fairscale_cpu import FSDP_MODULE, cpu_compat, hold

    module = importlib.import_module(FSDP_MODULE)  # on CPU only through shardcompat's layer
    with cpu_compat(module):
        wrapped = module.FullyShardedDataParallel(model, reshard_after_forward=True, bucket_cap_mb=0,
                                                  compute_device=torch.device("cpu"))
        hold(module, wrapped)
    return wrapped, _adamw(lr)(wrapped.parameters())


@dataclass(frozen=True)
class Case:
    options: str
    backend: str
    by_hand: Callable[[nn.Module, float], Built]
    # what a user calls by hand where Prepared has logic of its own: (model, optimizer) -> call
    no_sync: Callable[[Any, Any], contextlib.AbstractContextManager[Any]]
    clip: Callable[[Any, Any], Any] | None  # None: the hand-built call cannot run here


def _model_no_sync(model: Any, optim: Any) -> contextlib.AbstractContextManager[Any]:
    return model.no_sync()  # type: ignore[no-any-return]


@contextlib.contextmanager
def _fsdp2_no_sync(model: Any, optim: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)  # recurses into every fully_shard-ed module
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _clip(model: Any, optim: Any) -> Any:
    return nn.utils.clip_grad_norm_(model.parameters(), 1e9)


def _owners_clip(model: Any, optim: Any) -> Any:
    from shardcompat.backends._zero_hook import clip_sharded_grad_norm_

    return clip_sharded_grad_norm_(list(model.parameters()), 1e9, 2.0, None)  # each rank owns its grads


def _own_clip(model: Any, optim: Any) -> Any:
    return model.clip_grad_norm_(1e9)  # FSDP1's


def _oss_clip(model: Any, optim: Any) -> Any:
    return optim.clip_grad_norm(1e9)  # fairscale OSS's


CASES = [
    Case("", "torch-zero", _ddp, _model_no_sync, _clip),
    Case("zero_dp_1", "torch-zero", _ddp_zero, _model_no_sync, _owners_clip),
    Case("zero_dp_3", "torch-fsdp1", _fsdp1, _model_no_sync, _own_clip),
    Case("zero_dp_3 auto_wrap", "torch-fsdp2", _fsdp2, _fsdp2_no_sync, _clip),
    Case("simple", "fairscale-sdp", _sharded_ddp, _model_no_sync, _oss_clip),
    # fairscale FSDP's own clip_grad_norm_ moves the norm to CUDA: not runnable on CPU.
    Case("zero_dp_3", "fairscale-fsdp", _fairscale_fsdp, _model_no_sync, None),
]


def runnable() -> tuple[list[Case], list[str]]:
    """The cases whose backend can run here, and why the others cannot."""
    from shardcompat.backends import get

    found, skipped = [], []
    for case in CASES:
        probe = get(case.backend).probe()
        if probe:
            found.append(case)
        else:
            skipped.append(f"{case.backend}: {probe.reason}")
    return found, skipped


# ------------------------------------------------------------------------------- 1. step pairs
@dataclass
class Arms:
    """One backend built twice on this rank: through ``prepare`` and by hand."""

    case: Case
    prepared: Any
    model: Any
    optim: Any

    @classmethod
    def build(cls, case: Case, config: ModelConfig, lr: float) -> Arms:
        import shardcompat

        prepared = shardcompat.prepare(build_model(config, 0), _adamw(lr), case.options, backend=case.backend)
        return cls(case, prepared, *case.by_hand(build_model(config, 0), lr))

    def shim(self, config: ModelConfig, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        self.prepared.backward(data.loss(config, self.prepared(inputs), targets))
        self.prepared.step()
        self.prepared.zero_grad()

    def hand(self, config: ModelConfig, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        data.loss(config, self.model(inputs), targets).backward()
        self.optim.step()
        self.optim.zero_grad()

    def pairs(self, config: ModelConfig, batch: int, rank: int, first: int, count: int) -> list[tuple[float, float]]:
        """``count`` pairs: (shim step, hand-built step) in CPU seconds of this rank's main thread,
        the order swapped every pair, both steps on the same batch (made before the clock starts)."""
        out = []
        for i in range(first, first + count):
            inputs, targets = data.batch(config, batch, 0, rank, i)
            spent = {}
            for arm in (self.shim, self.hand) if i % 2 == 0 else (self.hand, self.shim):
                start = time.thread_time()
                arm(config, inputs, targets)
                spent[arm.__name__] = time.thread_time() - start
            out.append((spent["shim"], spent["hand"]))
        return out


# ------------------------------------------------------------------------------- 2. per call
class _NoOp:
    """Stands in for the model, the loss and the optimizer: every call returns at once."""

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def backward(self) -> None:
        return None

    def step(self) -> None:
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None


def _added(shim: Callable[[], Any], wrapped: Callable[[], Any], calls: int, reps: int) -> tuple[float, float]:
    """(median added seconds per call of ``shim`` over ``wrapped``, median seconds of ``wrapped``),
    in thread CPU time, ``reps`` interleaved repetitions of ``calls`` calls each."""
    diffs, base = [], []
    for r in range(reps):
        spent = {}
        for name, fn in ((("shim", shim), ("wrapped", wrapped)) if r % 2 == 0 else (("wrapped", wrapped), ("shim", shim))):
            start = time.thread_time()
            for _ in range(calls):
                fn()
            spent[name] = (time.thread_time() - start) / calls
        diffs.append(spent["shim"] - spent["wrapped"])
        base.append(spent["wrapped"])
    return statistics.median(diffs), statistics.median(base)


def _per_call(arms: Arms, config: ModelConfig, batch: int, rank: int, quick: bool) -> dict[str, tuple[float, float] | None]:
    case, prepared, model, optim = arms.case, arms.prepared, arms.model, arms.optim
    reps = 5 if quick else 31
    out: dict[str, tuple[float, float] | None] = {}
    # The delegating methods, each around a no-op: a copy of the real Prepared (its backend's class).
    stub, noop = copy.copy(prepared), _NoOp()
    stub.model, stub.optimizer, stub.scaler = noop, noop, None
    x = torch.zeros(1)
    calls = 200 if quick else 2000
    out["__call__"] = _added(lambda: stub(x), lambda: noop(x), calls, reps)
    out["backward"] = _added(lambda: stub.backward(noop), noop.backward, calls, reps)
    out["step"] = _added(stub.step, noop.step, calls, reps)
    out["zero_grad"] = _added(stub.zero_grad, lambda: noop.zero_grad(set_to_none=True), calls, reps)

    def enter(cm: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
        with cm():
            pass

    out["no_sync"] = _added(lambda: enter(prepared.no_sync), lambda: enter(lambda: case.no_sync(model, optim)),
                            20 if quick else 200, reps)
    # clip_grad_norm_ with gradients present (a collective: every rank makes the same calls).
    inputs, targets = data.batch(config, batch, 0, rank, 0)
    prepared.backward(data.loss(config, prepared(inputs), targets))
    data.loss(config, model(inputs), targets).backward()
    out["clip_grad_norm_"] = None
    clip = case.clip
    if clip is not None:
        out["clip_grad_norm_"] = _added(lambda: prepared.clip_grad_norm_(1e9), lambda: clip(model, optim),
                                        2 if quick else 5, reps)
    else:
        out["clip_grad_norm_ (shim alone)"] = _added(lambda: prepared.clip_grad_norm_(1e9), lambda: None,
                                                     2 if quick else 5, reps)
    prepared.zero_grad()
    optim.zero_grad()
    return out


@dataclass
class Result:
    case: Case
    pairs: list[list[tuple[float, float]]] = field(default_factory=list)  # per rank
    per_call: dict[str, tuple[float, float] | None] = field(default_factory=dict)  # rank 0's


def _job(rank: int, world_size: int, indices: list[int], rounds: tuple[int, int], quick: bool) -> list[Any]:
    """On every rank: step pairs of every backend, round after round (so drift in the machine's
    load falls on all of them alike) until each one's interval lies on one side of TARGET or
    ``most`` pairs are done; then each backend's per-call costs.  Every rank sees every rank's
    times (all_gather_object) and so takes the same decisions."""
    import torch.distributed as dist

    config, batch, lr = train_defaults()
    size, most = rounds
    every = [Arms.build(CASES[i], config, lr) for i in indices]
    for arms in every:  # warm-up, not timed
        for i in range(3):
            arms.shim(config, *data.batch(config, batch, 0, rank, i))
            arms.hand(config, *data.batch(config, batch, 0, rank, i))
    mine: list[list[tuple[float, float]]] = [[] for _ in every]
    gathered: list[Any] = [None] * world_size
    undecided = list(range(len(every)))
    while undecided:
        gc.collect()
        gc.disable()  # a collection would land in one arm at random: noise, not overhead
        try:
            for n in undecided:
                mine[n] += every[n].pairs(config, batch, rank, 3 + len(mine[n]), size)
        finally:
            gc.enable()
        dist.all_gather_object(gathered, mine)
        undecided = [n for n in undecided
                     if len(mine[n]) < most and not decided(*bootstrap_median(pair_ratios([g[n] for g in gathered]))[1:])]
    calls = [_per_call(arms, config, batch, rank, quick) for arms in every]
    return [(mine[n], calls[n]) for n in range(len(every))]


# ------------------------------------------------------------------------------- statistics
def bootstrap_median(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the median and its bootstrap 95% percentile interval."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.median(values), medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def pair_ratios(per_rank: list[list[tuple[float, float]]]) -> list[float]:
    """Per pair: the shim's step over the hand-built one, CPU time summed over the ranks."""
    return [sum(r[i][0] for r in per_rank) / sum(r[i][1] for r in per_rank) for i in range(len(per_rank[0]))]


def decided(low: float, high: float) -> bool:
    """Whether a 95% interval lies wholly on one side of TARGET."""
    return high <= TARGET or low > TARGET


def verdict(low: float, high: float) -> str:
    if high <= TARGET:
        return f"<= {TARGET}"
    if low > TARGET:
        return f"> {TARGET}: OVER"
    return f"undecided (interval spans {TARGET}: raise --max-pairs)"


def _cell(got: tuple[float, float] | None, real: bool) -> str:
    if got is None:
        return "n/a"
    return f"{got[0] * 1e6:+.2f}" + (f"/{got[1] * 1e6:.0f}" if real else "")


def report(results: list[Result], nproc: int, skipped: list[str]) -> tuple[str, bool]:
    """The printed report, and whether every backend's interval lies at or below the target."""
    config, batch, _ = train_defaults()
    psi = count_parameters(build_model(config, 0))
    lines = [f"Step CPU time (main thread) through shardcompat.prepare / built by hand: the default `shardcompat train` model "
             f"(gpt, {psi:,} parameters, batch {batch}), {nproc} ranks, interleaved pairs of one step each",
             f"{'backend':<15} {'options':<20} {'pairs':>5} {'by hand':>9} {'ratio':>6}  {'95% interval':<16} verdict"]
    ok = True
    steps = []
    for r in results:
        ratio, low, high = bootstrap_median(pair_ratios(r.pairs))
        count = len(r.pairs[0])
        steps.append(statistics.median(sum(rank[i][1] for rank in r.pairs) / len(r.pairs) for i in range(count)))
        ok = ok and high <= TARGET
        lines.append(f"{r.case.backend:<15} {r.case.options or 'ddp':<20} {count:>5} {steps[-1] * 1e3:6.2f} ms "
                     f"{ratio:6.3f}  [{low:.3f}, {high:.3f}]   {verdict(low, high)}")
    lines += ["", "Added cost per call, µs of thread CPU time: the shim minus the call it wraps (median of repetitions);",
              "no_sync and clip_grad_norm_ run on the real objects: added/the wrapped call's own µs",
              f"{'backend':<15} {'options':<20} " + " ".join(f"{m:>13}" for m in METHODS) + f" {'per step':>9} {'of step':>8}"]
    for r, step in zip(results, steps):
        cells = [_cell(r.per_call.get(m), m not in PER_STEP) for m in METHODS]
        per_step = sum(got[0] for m in PER_STEP if (got := r.per_call.get(m)))
        lines.append(f"{r.case.backend:<15} {r.case.options or 'ddp':<20} " + " ".join(f"{c:>13}" for c in cells)
                     + f" {per_step * 1e6:+9.2f} {per_step / step:8.4%}")
    lines.append("(per step: __call__ + backward + step + zero_grad, what every step of `shardcompat train` "
                 "calls; of step: that over the hand-built step's CPU time per rank)")
    for r in results:
        alone = r.per_call.get("clip_grad_norm_ (shim alone)")
        if alone:
            lines.append(f"{r.case.backend}: clip_grad_norm_ n/a: the hand-built call cannot run on CPU "
                         f"(fairscale FSDP's moves the norm to CUDA); shardcompat's takes {alone[0] * 1e6:.0f} µs")
    lines += [f"not measured: {why}" for why in skipped]
    lines.append(f"\n{'every' if ok else 'NOT every'} backend's interval lies at or below {TARGET}")
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: few pairs and calls (figures are noise)")
    parser.add_argument("--pairs", type=int, default=None,
                        help="pairs per round, until each interval is decided (default 100; quick 6, one round)")
    parser.add_argument("--max-pairs", type=int, default=None, help="stop a backend after this many pairs (default 1000)")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--backend", action="append", default=None, metavar="NAME",
                        help="measure only this backend (repeatable; default every one that can run)")
    args = parser.parse_args(argv)
    size = args.pairs or (6 if args.quick else 100)
    most = args.max_pairs or (size if args.quick else 1000)
    cases, skipped = runnable()
    if args.backend:
        cases = [case for case in cases if case.backend in args.backend]
        skipped = [why for why in skipped if why.split(":")[0] in args.backend]
    indices = [CASES.index(case) for case in cases]
    per_rank = spawn(_job, args.nproc, (indices, (size, most), args.quick), timeout=3600)
    results = [Result(case, [rank[i][0] for rank in per_rank], per_rank[0][i][1]) for i, case in enumerate(cases)]
    text, _ = report(results, args.nproc, skipped)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
