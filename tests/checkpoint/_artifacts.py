"""Real checkpoints written by the real tools, built once per test session (nothing committed).

One spawn of 2 gloo ranks writes a torch DCP folder through FSDP2 + ``dcp.save`` (model and
AdamW state after one real step), a ``ZeroRedundancyOptimizer.consolidate_state_dict`` file
(rank 0's ``torch.save`` of its consolidated ``state_dict()``) and a shardcompat sharded and
full checkpoint; the parent process then runs a real Transformers ``Trainer`` step on a
tiny GPT-2 built from a config (its ``checkpoint-1`` folder, safetensors) and a
``save_pretrained`` with a small ``max_shard_size`` (a sharded ``*.index.json``), and 4.x's
``pytorch_model.bin``, whole and sharded with its index.  Each rank returns the names, shapes and dtypes it saw, for the tests to
compare the readers' descriptions against.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from shardcompat.launch import spawn

DIM = 8


class Net(nn.Module):
    """Two layers and a norm, dropout on (as models train)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(DIM, 2 * DIM)
        self.drop = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(2 * DIM)
        self.out = nn.Linear(2 * DIM, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.drop(torch.relu(self.inp(x)))))


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, rank: int) -> None:
    generator = torch.Generator().manual_seed(100 + rank)
    loss = model(torch.randn(4, DIM, generator=generator)).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def _table(model: nn.Module) -> dict[str, Any]:
    return {n: [list(p.shape), str(p.dtype).removeprefix("torch.")] for n, p in model.named_parameters()}


def _ranks(rank: int, world: int, root: str) -> dict[str, Any]:
    from torch.distributed.checkpoint import save as dcp_save
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    import shardcompat

    out = Path(root)
    result: dict[str, Any] = {}

    torch.manual_seed(0)
    model = Net()
    result["params"] = _table(model)
    result["order"] = [n for n, _ in model.named_parameters()]
    fully_shard(model.inp)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _step(model, optimizer, rank)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp_save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(out / "dcp"))
    full = {k: v.full_tensor() for k, v in model_sd.items()}
    if rank == 0:
        torch.save(full, out / "dcp-weights.pt")  # the weights as FSDP2 holds them, for comparison

    torch.manual_seed(0)
    plain = Net()
    ddp = DistributedDataParallel(plain)
    zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=1e-2)
    _step(ddp, zero, rank)
    zero.consolidate_state_dict(to=0)
    if rank == 0:
        torch.save(zero.state_dict(), out / "zero-optimizer.pt")
        torch.save(plain.state_dict(), out / "zero-model.pt")

    for sharded, options in ((False, "zero_dp_2"), (True, "zero_dp_3")):
        torch.manual_seed(0)
        prepared = shardcompat.prepare(
            Net(), optimizer=functools.partial(torch.optim.AdamW, lr=1e-2), options=options, backend="torch-fsdp2"
        )
        _step(prepared.model, prepared.optimizer, rank)
        prepared.step_count = 1
        prepared.save_checkpoint(out / ("own-sharded" if sharded else "own-full"), sharded=sharded)
    dist.barrier()
    return result


def build(root: Path) -> dict[str, Any]:
    """Write every artifact under ``root``; return what the writers saw."""
    seen = spawn(_ranks, 2, (str(root),), timeout=180)[0]
    seen["hf"] = _huggingface(root)
    return seen


def _huggingface(root: Path) -> dict[str, Any]:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    config = GPT2Config(n_layer=2, n_embd=16, n_head=2, n_positions=16, vocab_size=64)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))} for _ in range(4)]
    args = TrainingArguments(
        output_dir=str(root / "trainer"), max_steps=1, per_device_train_batch_size=2, save_steps=1,
        report_to=[], use_cpu=True, logging_steps=1, disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=data).train()
    model.save_pretrained(root / "hf-sharded", max_shard_size="20KB")
    state = model.state_dict()
    # What 4.x's save_pretrained(safe_serialization=False) wrote (5.x writes safetensors only):
    # torch.save of the state dict without the tied head, beside the config.
    model.save_pretrained(root / "hf-bin")
    (root / "hf-bin" / "model.safetensors").unlink()
    tied = {k for k in state if k not in dict(model.named_parameters()) and k.endswith("lm_head.weight")}
    kept = {k: v for k, v in state.items() if k not in tied}
    torch.save(kept, root / "hf-bin" / "pytorch_model.bin")
    # And 4.x's sharded form of it: pytorch_model-0000N-of-00002.bin and their index, as
    # 4.x's save_pretrained(max_shard_size=..., safe_serialization=False) laid them out.
    folder = root / "hf-bin-sharded"
    folder.mkdir()
    names = list(kept)
    shards = {f"pytorch_model-0000{i + 1}-of-00002.bin": names[i::2] for i in range(2)}
    for file, part in shards.items():
        torch.save({k: kept[k] for k in part}, folder / file)
    index = {"metadata": {"total_size": sum(t.nbytes for t in kept.values())},
             "weight_map": {k: file for file, part in shards.items() for k in part}}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2))
    return {
        "state": {n: [list(t.shape), str(t.dtype).removeprefix("torch."), t.nbytes] for n, t in state.items()},
        "params": [n for n, _ in model.named_parameters()],
        "tied": sorted(tied),
    }
