"""Step time of the Hugging Face Trainer path against the same model through ``prepare`` in a plain loop.

Both train a GPT-2 built from a config on the same random tokens with the same backend, in one
process group, in alternating blocks (the order swapped each round, so drift in machine load
falls on both alike).  A step is timed from the end of one optimizer step to the end of the
next, so it includes what each side does between steps: the Trainer's data loading through
Accelerate, its loss gathering and logging (``logging_steps`` below), the learning-rate
schedule and callbacks; the loop's own DataLoader, forward, backward, clipping and step.  The
time is the CPU time of the rank's main thread (``time.thread_time``), which does all that work
(one intra-op thread per rank): waiting for a core another program holds is not counted.  The
figure is median(Trainer) / median(loop): what the Trainer costs on top of the sharding; the
ratio of the fastest steps is printed beside it, as it is the steadier one on a loaded machine.

    python -m benchmarks.trainer [--quick] [--nproc 2] [--logging-steps 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from shardcompat.launch import spawn

OPTIONS = ("simple", "zero_dp_2", "zero_dp_3 auto_wrap")
BATCH = 8  # per rank
SEQ = 64
LR = 1e-3


def _model(quick: bool) -> Any:
    import transformers

    torch.manual_seed(0)
    size = dict(n_layer=2, n_embd=64, n_head=4) if quick else dict(n_layer=4, n_embd=128, n_head=4)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=256, n_positions=SEQ, bos_token_id=0, eos_token_id=1, **size,
    ))


class _Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, size: int) -> None:
        self.tokens = torch.randint(0, 256, (size, SEQ), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


def _trainer_block(options: str, steps: int, quick: bool, logging_steps: int, out: str) -> tuple[list[float], str]:
    import transformers

    import shardcompat.transformers as sct

    ends: list[float] = []

    class Clock(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *_: Any, **__: Any) -> None:
            ends.append(time.thread_time())

    args = sct.TrainingArguments(
        out, sharded_ddp=options, max_steps=steps + 1, per_device_train_batch_size=BATCH, learning_rate=LR,
        logging_steps=logging_steps, save_strategy="no", report_to="none", disable_tqdm=True, seed=0,
    )
    trainer = sct.Trainer(model=_model(quick), args=args, train_dataset=_Tokens(BATCH * 2 * (steps + 1)),
                          data_collator=transformers.default_data_collator, callbacks=[Clock()])
    trainer.train()
    return [b - a for a, b in zip(ends, ends[1:])], trainer.prepared.backend


def _loop_block(options: str, steps: int, quick: bool, out: str) -> list[float]:
    import torch.distributed as dist
    import transformers

    import shardcompat

    # The Trainer's own choices, so both sides do the same work: its optimizer (fused AdamW in
    # current releases) and no key/value cache in training forwards.
    args = transformers.TrainingArguments(out, learning_rate=LR, use_cpu=True, report_to="none")
    cls, kwargs = transformers.Trainer.get_optimizer_cls_and_kwargs(args)
    model = _model(quick)
    model.config.use_cache = False
    prepared = shardcompat.prepare(model, lambda ps: cls(ps, **kwargs), options)
    dataset = _Tokens(BATCH * 2 * (steps + 1))
    sampler = torch.utils.data.DistributedSampler(dataset, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=sampler,
                                         collate_fn=transformers.default_data_collator)
    ends = []
    dist.barrier()
    for batch in loader:
        loss = prepared(**batch).loss
        prepared.backward(loss)
        prepared.clip_grad_norm_(1.0)  # the Trainer's default max_grad_norm
        prepared.step()
        prepared.zero_grad()
        ends.append(time.thread_time())
    return [b - a for a, b in zip(ends, ends[1:])]


def _compare(rank: int, world: int, rounds: int, steps: int, quick: bool, logging_steps: int, out: str) -> list[Any]:
    rows = []
    for options in OPTIONS[-1:] if quick else OPTIONS:
        trainer: list[float] = []
        loop: list[float] = []
        backend = ""
        for r in range(rounds):
            for side in ("trainer", "loop") if r % 2 == 0 else ("loop", "trainer"):
                if side == "trainer":
                    times, backend = _trainer_block(options, steps, quick, logging_steps, f"{out}/{rank}")
                    trainer += times
                else:
                    loop += _loop_block(options, steps, quick, f"{out}/{rank}")
        rows.append((options, backend, statistics.median(trainer), statistics.median(loop), min(trainer), min(loop)))
    return rows


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller model, one option, fewer rounds")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--logging-steps", type=int, default=1, help="the Trainer logs (gathers the loss) every N steps")
    args = parser.parse_args(argv)
    rounds, steps = (2, 8) if args.quick else (6, 20)
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as out:
        rows = spawn(_compare, args.nproc, (rounds, steps, args.quick, args.logging_steps, out), timeout=3600)[0]
    print(f"GPT-2 ({'2x64' if args.quick else '4x128'}), {args.nproc} CPU ranks, batch {BATCH}x{SEQ} per rank, "
          f"{rounds} alternating rounds of {steps} timed steps; Trainer logging every {args.logging_steps} step(s)")
    print(f"{'options':<22} {'backend':<12} {'Trainer':>10} {'loop':>10} {'ratio':>6} {'fastest':>8}")
    for options, backend, trainer, loop, best_trainer, best_loop in rows:
        print(f"{options:<22} {backend:<12} {trainer * 1e3:8.1f}ms {loop * 1e3:8.1f}ms {trainer / loop:6.3f} "
              f"{best_trainer / best_loop:8.3f}")
    print("\nratio: median Trainer step / median plain-loop step, the same backend side by side (fastest:")
    print("the same for the fastest step of each); the difference is the Trainer's own work (data loading")
    print("through Accelerate, logging, scheduler, callbacks).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
