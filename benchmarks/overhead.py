"""Step time of ``shardcompat.prepare`` against the same backend constructed by hand.

Both versions of a backend train the same model on the same data in one process group,
in alternating blocks of steps (the order swapped each round, so drift in machine load
falls on both alike); the figure is median(prepare) / median(by hand).  Target: <= 1.02.

    python -m benchmarks.overhead [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from shardcompat import data
from shardcompat.launch import spawn
from shardcompat.models import GPTBlock, ModelConfig, build_model

MODEL = ModelConfig(kind="gpt", layers=2, dim=128, heads=4, vocab=128, seq_len=64)
LR = 1e-3
BATCH = 8
Built = tuple[Callable[..., Any], torch.optim.Optimizer]


def _adamw(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=LR)


# The exact calls each backend's plan names (see `shardcompat explain`), written out by hand.
def _ddp(model: nn.Module) -> Built:
    ddp = nn.parallel.DistributedDataParallel(model)
    return ddp, _adamw(ddp.parameters())


def _ddp_zero(model: nn.Module) -> Built:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    ddp = nn.parallel.DistributedDataParallel(model)
    return ddp, ZeroRedundancyOptimizer(list(ddp.parameters()), optimizer_class=torch.optim.AdamW, lr=LR)


def _fsdp1(model: nn.Module) -> Built:
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

    wrapped = FullyShardedDataParallel(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                                       device_id=torch.device("cpu"), use_orig_params=True)
    return wrapped, _adamw(wrapped.parameters())


def _fsdp2(model: nn.Module) -> Built:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.modules():
        if isinstance(block, GPTBlock):
            fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    return model, _adamw(model.parameters())


# (options, backend) -> the hand-built equivalent
CASES: dict[tuple[str, str], Callable[[nn.Module], Built]] = {
    ("", "torch-zero"): _ddp,
    ("zero_dp_1", "torch-zero"): _ddp_zero,
    ("zero_dp_3", "torch-fsdp1"): _fsdp1,
    ("zero_dp_3 auto_wrap", "torch-fsdp2"): _fsdp2,
}


def _block(step: Callable[[int], None], first: int, count: int) -> list[float]:
    import torch.distributed as dist

    dist.barrier()
    times = []
    for i in range(first, first + count):
        start = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - start)
    return times


def _compare(rank: int, world_size: int, rounds: int, steps: int) -> list[tuple[str, str, float, float]]:
    import shardcompat

    out = []
    for (options, backend), by_hand in CASES.items():
        prepared = shardcompat.prepare(build_model(MODEL, 0), _adamw, options, backend=backend)
        hand_model, hand_optim = by_hand(build_model(MODEL, 0))

        def prepared_step(i: int, p: Any = prepared) -> None:
            inputs, targets = data.batch(MODEL, BATCH, 0, rank, i)
            p.backward(data.loss(MODEL, p(inputs), targets))
            p.step()
            p.zero_grad()

        def hand_step(i: int, m: Any = hand_model, o: Any = hand_optim) -> None:
            inputs, targets = data.batch(MODEL, BATCH, 0, rank, i)
            torch.autograd.backward(data.loss(MODEL, m(inputs), targets))
            o.step()
            o.zero_grad()

        _block(prepared_step, 0, 2)  # warm-up, not timed
        _block(hand_step, 0, 2)
        mine: list[float] = []
        theirs: list[float] = []
        for r in range(rounds):
            order: list[tuple[Callable[[int], None], list[float]]] = [(prepared_step, mine), (hand_step, theirs)]
            for step, times in order if r % 2 == 0 else order[::-1]:
                times += _block(step, 2 + r * steps, steps)
        out.append((options or "ddp", prepared.backend, statistics.median(mine), statistics.median(theirs)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    rounds, steps = (4, 5) if args.quick else (10, 10)
    rows = spawn(_compare, args.nproc, (rounds, steps), timeout=1800)[0]
    print(f"GPT {MODEL.layers}x{MODEL.dim}, {args.nproc} ranks, {rounds} alternating rounds of {steps} steps (rank 0)")
    print(f"{'options':<20} {'backend':<12} {'prepare':>10} {'by hand':>10} {'ratio':>6}")
    for options, backend, mine, theirs in rows:
        print(f"{options:<20} {backend:<12} {mine * 1e3:8.2f}ms {theirs * 1e3:8.2f}ms {mine / theirs:6.3f}")
    worst = max(mine / theirs for _, _, mine, theirs in rows)
    print(f"\nworst ratio {worst:.3f} ({'within' if worst <= 1.02 else 'OUTSIDE'} the 1.02 target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
