#!/usr/bin/env python
"""A user's drop-in Trainer script that records, on every rank, everything observing must not change.

It imports ``shardcompat.transformers`` itself (the one-line switch a user makes), so it runs
alike under plain ``torchrun`` (no sharding block) and under ``shardcompat run`` (which prints
the block after the first optimizer step).  A tiny GPT-2 with its default configuration
(dropout on) trains through ``Trainer.train()`` with gradient accumulation; on every rank it
records, into ``output_dir/observed-rank<R>.json``:

- each micro-batch's unrounded loss;
- around every optimizer step, a fingerprint of the torch CPU (and, once initialised, every
  CUDA device's), NumPy and Python ``random`` states: before the step (an optimizer pre-hook)
  and after it (a post-hook registered after the sharding block's, so it runs after the block);
- a digest of the gradients this rank holds before each step, and of its parameters and
  optimizer state after it (``Prepared.local_tensors()``: the shards themselves).

``--observe_benchmark`` instead times each optimizer step (wall clock, from the end of one step
to the end of the next; the first from the start of training) for ``benchmarks/first_step.py``.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy
import torch
import transformers

from shardcompat.transformers import HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ObserveArguments:
    observe_benchmark: bool = field(default=False, metadata={"help": "Time each optimizer step instead."})
    observe_samples: int = field(default=64, metadata={"help": "Training examples."})


class RandomTokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, size: int, seed: int) -> None:
        self.tokens = torch.randint(0, 64, (size, 8), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


def rng_fingerprint() -> dict[str, str]:
    """A short hash of each random stream this process has."""
    def short(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()[:16]

    name, keys, pos, has_gauss, cached = numpy.random.get_state()
    found = {
        "torch": short(torch.get_rng_state().numpy().tobytes()),
        "numpy": short(f"{name}{pos}{has_gauss}{cached}".encode() + keys.tobytes()),
        "python": short(repr(random.getstate()).encode()),
    }
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        found["cuda"] = short(b"".join(s.numpy().tobytes() for s in torch.cuda.get_rng_state_all()))
    return found


def tensor_digest(tensors: list[torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for t in tensors:
        if t.untyped_storage().nbytes() < t.numel() * t.element_size():
            continue  # a buffer FSDP has freed (storage resized to 0): it holds nothing
        digest.update(t.detach().cpu().clone().reshape(-1).view(torch.uint8).numpy().tobytes())  # a copy: numpy() pins a storage FSDP resizes
    return digest.hexdigest()[:16]


class Recording(Trainer):  # a user's subclass, as scripts have
    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        loss: torch.Tensor = super().training_step(*args, **kwargs)
        self.recorded["losses"].append(float(loss))
        return loss


class Observe(transformers.TrainerCallback):  # type: ignore[misc]
    def __init__(self, trainer: Recording, benchmark: bool) -> None:
        self.trainer, self.benchmark = trainer, benchmark

    def on_train_begin(self, *_: Any, **__: Any) -> None:
        prepared = self.trainer.prepared
        record = self.trainer.recorded
        rank = self.trainer.args.process_index
        record["steps"], record["step_s"] = [], []
        clock = {"last": time.perf_counter()}

        def held(kind: str) -> str:
            return tensor_digest([t for k, t in prepared.local_tensors() if k == kind])

        def before(*_: Any) -> None:
            if not self.benchmark:
                record["steps"].append({"before": rng_fingerprint(), "grads": held("grad")})

        def after(*_: Any) -> None:
            if self.benchmark:
                now = time.perf_counter()
                record["step_s"].append(now - clock["last"])
                clock["last"] = now
                return
            step = record["steps"][-1]
            step.update(after=rng_fingerprint(), params=held("param"), optim=held("optim"))
            print(f"[observe] rank {rank} after optimizer step {len(record['steps'])}", flush=True)

        prepared.optimizer.register_step_pre_hook(before)
        prepared.optimizer.register_step_post_hook(after)  # after the sharding block's hook


def main() -> None:
    parser = HfArgumentParser((ObserveArguments, TrainingArguments))
    observe, training_args = parser.parse_args_into_dataclasses()
    transformers.set_seed(training_args.seed)
    config = transformers.GPT2Config(vocab_size=64, n_positions=8, n_embd=32, n_layer=2, n_head=2,
                                     bos_token_id=0, eos_token_id=1)  # every dropout at its default
    model = transformers.GPT2LMHeadModel(config)
    trainer = Recording(model=model, args=training_args, train_dataset=RandomTokens(observe.observe_samples, 1),
                        data_collator=transformers.default_data_collator)
    trainer.recorded = {"losses": [], "dropout": [config.resid_pdrop, config.embd_pdrop, config.attn_pdrop]}
    trainer.add_callback(Observe(trainer, observe.observe_benchmark))
    trainer.train()
    record = trainer.recorded
    record["end"] = rng_fingerprint()
    out = Path(training_args.output_dir) / f"observed-rank{training_args.process_index}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record))


if __name__ == "__main__":
    main()
