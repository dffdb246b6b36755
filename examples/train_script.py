"""Train with ZeRO-3 on 2 ranks, save a portable checkpoint, resume from it.

    python examples/train_script.py                          # starts 2 local ranks itself
    torchrun --nproc_per_node 2 examples/train_script.py     # or as torchrun's ranks
"""

import sys
import tempfile

import torch

import shardcompat
from shardcompat.launch import spawn


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))


def prepare() -> shardcompat.Prepared:
    return shardcompat.prepare(
        build_model(),
        lambda params: torch.optim.AdamW(params, lr=1e-2),  # built on the shards, after wrapping
        "zero_dp_3",
    )


def main(rank: int, world_size: int, checkpoint: str) -> float:
    prepared = prepare()
    data = torch.Generator().manual_seed(rank)  # each rank trains on its own batches
    for step in range(20):
        x = torch.randn(32, 16, generator=data)
        loss = torch.nn.functional.mse_loss(prepared(x), torch.tanh(x).roll(1, dims=1))
        prepared.backward(loss)
        prepared.clip_grad_norm_(1.0)
        prepared.step()
        prepared.zero_grad()
        if rank == 0 and step in (0, 19):
            print(f"step {step + 1}: loss {loss.item():.4f}")
    prepared.save_checkpoint(checkpoint)  # any backend and any number of ranks can resume it
    resumed = prepare()
    resumed.load_checkpoint(checkpoint)
    trained, loaded = prepared.full_state_dict(), resumed.full_state_dict()  # full weights on rank 0
    if rank == 0:
        same = all(torch.equal(trained[name], loaded[name]) for name in trained)
        print(f"{world_size} ranks; checkpoint {checkpoint} resumes {'exactly' if same else 'DIFFERENTLY'}")
    return loss.item()


if __name__ == "__main__":  # spawn() starts fresh processes that import this file
    path = sys.argv[1] if len(sys.argv) > 1 else f"{tempfile.gettempdir()}/shardcompat-example"
    spawn(main, nprocs=2, args=(path,))  # under torchrun: runs this rank, starts nothing
