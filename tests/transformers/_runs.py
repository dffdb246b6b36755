"""Real Trainer runs for the tests: tiny models built from configs, synthetic tokens, 2 gloo ranks.

Every case trains the same model (same seed) on the same data through ``Trainer.train()``.
The reference is the installed release's own ``transformers.Trainer`` with its own
``TrainingArguments`` (plain DDP through Accelerate), not shardcompat's, so a bug in the
drop-ins cannot hide in it.  One ``spawn`` runs a whole list of cases (starting ranks and
importing Transformers is the slow part), and each case records, per rank, the unrounded loss
of every micro-batch (some releases round the logged loss to 4 decimals).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

STEPS = 4
ACCUMULATE = 2  # every case accumulates: the sharded runs go through no_sync
BATCH = 2  # per device
LR = 5e-3
SEQ = 8
VOCAB = 64


@dataclass(frozen=True)
class Case:
    """One ``Trainer.train()``; ``sharded_ddp=None`` is the release's own Trainer (plain DDP)."""

    name: str
    model: str = "gpt2"  # or "t5" (Seq2SeqTrainer)
    sharded_ddp: str | None = None
    backend: str = "auto"
    bf16: bool = False
    fp16: bool = False  # on CPU Accelerate trains --fp16 in fp32 (stock and sharded alike)
    max_grad_norm: float = 1.0  # the release's default; 0 turns clipping off
    optim: str = ""  # --optim (the release's default when empty)
    save_steps: int | None = None  # write checkpoint-N every N steps (and save_model at the end)
    resume: str | None = None  # resume from checkpoint-2 of the case with this name
    weight_decay: float = 0.0
    measure: bool = False  # count the state each rank holds at the second optimizer step

    @property
    def reference(self) -> str:
        precision = "-bf16" if self.bf16 else "-fp16" if self.fp16 else ""
        decay = "-weight-decay" if self.weight_decay else ""
        clip = "" if self.max_grad_norm == 1.0 else f"-clip{self.max_grad_norm:g}"
        optim = f"-{self.optim}" if self.optim else ""
        return f"ddp-{self.model}{precision}{decay}{clip}{optim}"


@dataclass
class Outcome:
    losses: list[float]  # this rank's loss at every micro-batch, unrounded
    logged: list[dict[str, float]]  # the Trainer's log_history entries that have a training loss
    eval_loss: float | None = None
    predictions: Any = None  # rank 0: predict()'s logits (gpt2) or generated tokens (t5)
    saved: str | None = None  # where save_model wrote (rank 0)
    backend: str = ""
    call: str = ""
    no_sync: int = 0  # how often the backend's no_sync was entered
    state: dict[str, Any] = field(default_factory=dict)  # per phase: {"params", "grads", "optim"} bytes
    psi: int = 0  # the model's parameter bytes (tied weights once)
    manifest: dict[str, Any] = field(default_factory=dict)  # checkpoint-2's portable manifest
    scaler: str = ""  # the grad scaler Accelerate's backward and step use, and whether it is the backend's
    groups: list[float] = field(default_factory=list)  # the sharded optimizer's groups' weight decay
    unscales: list[int] = field(default_factory=list)  # fp16: gradient unscalings before each optimizer step
    skipped: list[bool] = field(default_factory=list)  # fp16: whether the grad scaler skipped each step
    error: str | None = None


def fp16_without_gpu_refused() -> str | None:
    """Why this release refuses ``--fp16`` without a GPU (4.x's ``TrainingArguments`` do), else None.

    Releases that accept it run it in fp32 there (Accelerate has no fp16 on CPU), and so does
    the sharded run; on a release that refuses it, the sharded arguments refuse it alike.
    """
    import tempfile

    import transformers

    if torch.cuda.is_available():
        return None
    try:
        with tempfile.TemporaryDirectory() as out:
            transformers.TrainingArguments(out, fp16=True, use_cpu=True, report_to="none")
    except ValueError as error:
        return f"this Transformers release refuses --fp16 without a GPU: {error}"
    finally:
        for name in [n for n in os.environ if n.startswith(("ACCELERATE_", "FSDP_"))]:
            del os.environ[name]
    return None


def model_config(kind: str) -> Any:
    """The case's tiny config: sizes and special tokens only, every dropout left at the
    model's default (users train with it on; ``test_trainer`` checks that it stays so)."""
    import transformers

    if kind == "gpt2":
        return transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=1,
        )
    return transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )


def build_model(kind: str) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = model_config(kind)
    if kind == "gpt2":
        return transformers.GPT2LMHeadModel(config)
    return transformers.T5ForConditionalGeneration(config)


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Random token sequences (the same in every run); T5 gets shorter targets."""

    def __init__(self, kind: str, size: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.inputs = torch.randint(2, VOCAB, (size, SEQ), generator=gen)
        self.labels = self.inputs.clone() if kind == "gpt2" else torch.randint(2, VOCAB, (size, SEQ - 2), generator=gen)

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.inputs[i], "labels": self.labels[i]}


def _arguments(case: Case, out: Path, stock: bool) -> Any:
    import transformers

    import shardcompat.transformers as sct

    seq2seq = case.model == "t5"
    if stock:
        cls = transformers.Seq2SeqTrainingArguments if seq2seq else transformers.TrainingArguments
    else:
        cls = sct.Seq2SeqTrainingArguments if seq2seq else sct.TrainingArguments
    kwargs: dict[str, Any] = dict(
        output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH, gradient_accumulation_steps=ACCUMULATE, learning_rate=LR,
        weight_decay=case.weight_decay, logging_steps=1, seed=0, report_to="none", disable_tqdm=True,
        save_strategy="steps" if case.save_steps else "no", save_steps=case.save_steps or 500,
        bf16=case.bf16, fp16=case.fp16, max_grad_norm=case.max_grad_norm,
    )
    if case.optim:
        kwargs["optim"] = case.optim
    if seq2seq:
        kwargs.update(predict_with_generate=True, generation_max_length=SEQ - 2)
    if stock:
        kwargs["use_cpu"] = not torch.cuda.is_available()  # the release's own way to DDP on CPU
    else:
        kwargs["sharded_ddp"] = case.sharded_ddp
    return cls(**kwargs)


def _trainer_class(case: Case, stock: bool) -> type:
    import transformers

    import shardcompat.transformers as sct

    seq2seq = case.model == "t5"
    if stock:
        base = transformers.Seq2SeqTrainer if seq2seq else transformers.Trainer
    else:
        base = sct.Seq2SeqTrainer if seq2seq else sct.Trainer

    class Recording(base):  # type: ignore[misc,valid-type]
        """Keeps the unrounded loss of every micro-batch (and is a user subclass, as scripts have)."""

        def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            loss: torch.Tensor = super().training_step(*args, **kwargs)
            self.recorded.append(float(loss))
            return loss

    return Recording


def _probe_state(trainer: Any, outcome: Outcome) -> None:
    """Count the state this rank holds during its second optimizer step (shardcompat.memory).

    Phases: ``forward`` (first micro-batch, no gradients yet), ``accumulate`` (second
    micro-batch, after a backward under no_sync), ``backward`` (before the optimizer step) and
    ``step`` (after it).
    """
    from shardcompat.memory import count_state

    prepared = trainer.prepared
    seen = {"steps": 0, "forwards": 0}

    def snap(phase: str) -> None:
        got = count_state(prepared.local_tensors())
        outcome.state[phase] = {"params": got.params, "grads": got.grads, "optim": got.optim, "cpu": got.cpu}

    def after_forward(module: Any, *_: Any) -> None:
        if seen["steps"] == 1 and module.training:
            seen["forwards"] += 1
            snap(("forward", "accumulate")[min(seen["forwards"], 2) - 1])

    def before_step(*_: Any) -> None:
        if seen["steps"] == 1:
            snap("backward")

    def after_step(*_: Any) -> None:
        seen["steps"] += 1
        if seen["steps"] == 2:
            snap("step")

    trainer.model.register_forward_hook(after_forward)
    prepared.optimizer.register_step_pre_hook(before_step)
    prepared.optimizer.register_step_post_hook(after_step)


def _count_unscales(trainer: Any, outcome: Outcome) -> None:
    """How often the grad scaler really divides the gradients before each optimizer step
    (its ``_unscale_grads_``, whoever asked), and whether the step was skipped."""
    import transformers

    scaler = trainer.prepared.scaler
    if scaler is None:
        return
    inner = scaler._unscale_grads_
    seen = {"now": 0}

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen["now"] += 1
        return inner(*args, **kwargs)

    scaler._unscale_grads_ = counted

    class Steps(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *_: Any, **__: Any) -> None:  # after the step, taken or skipped
            outcome.unscales.append(seen["now"])
            outcome.skipped.append(bool(trainer.accelerator.optimizer_step_was_skipped))
            seen["now"] = 0

    trainer.add_callback(Steps())


def _count_no_sync(trainer: Any, outcome: Outcome) -> None:
    inner = trainer.prepared.no_sync

    def counted() -> Any:
        outcome.no_sync += 1
        return inner()

    trainer.prepared.no_sync = counted


def run(case: Case, root: Path) -> Outcome:
    """Train ``case`` on this rank (every rank calls it); its files go under ``root/case.name``."""
    import transformers

    from shardcompat.memory import count_state

    stock = case.sharded_ddp is None
    out = root / case.name
    # TrainingArguments export their settings for Accelerate into the environment for good
    # (4.x keeps an earlier instance's mixed precision there): every case starts clean.
    for name in [n for n in os.environ if n.startswith(("ACCELERATE_", "FSDP_"))]:
        del os.environ[name]
    model = build_model(case.model)
    psi = count_state(("param", p) for p in model.parameters()).params
    args = _arguments(case, out, stock)
    kwargs: dict[str, Any] = {"backend": case.backend} if not stock else {}
    trainer = _trainer_class(case, stock)(
        model=model, args=args, train_dataset=Tokens(case.model, 64, 1), eval_dataset=Tokens(case.model, 8, 2),
        data_collator=transformers.default_data_collator, **kwargs,
    )
    trainer.recorded = []
    outcome = Outcome([], [], psi=psi)

    class Hooks(transformers.TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, *_: Any, **__: Any) -> None:
            if trainer.prepared is not None:
                _count_no_sync(trainer, outcome)
                _count_unscales(trainer, outcome)
                if case.measure:
                    _probe_state(trainer, outcome)

    if not stock:
        trainer.add_callback(Hooks())
    resume = str(root / case.resume / "checkpoint-2") if case.resume else None
    trainer.train(resume_from_checkpoint=resume)
    outcome.losses = list(trainer.recorded)
    outcome.logged = [e for e in trainer.state.log_history if "loss" in e]
    outcome.eval_loss = trainer.evaluate()["eval_loss"]
    prediction = trainer.predict(Tokens(case.model, 4, 3))
    if trainer.args.process_index == 0:
        predictions = prediction.predictions
        outcome.predictions = predictions[0] if isinstance(predictions, tuple) else predictions
    trainer.save_model(str(out / "final"))
    outcome.saved = str(out / "final")
    if not stock:
        outcome.backend = trainer.prepared.backend
        scaler = trainer.accelerator.scaler
        outcome.scaler = f"{type(scaler).__name__}{' (the backend’s)' if scaler is trainer.prepared.scaler else ''}"
        outcome.call = trainer.prepared.plan.call
        outcome.groups = [g["weight_decay"] for g in trainer.prepared.optimizer.param_groups]
        manifest = out / "checkpoint-2" / "shardcompat" / "manifest.json"
        if manifest.exists():
            outcome.manifest = json.loads(manifest.read_text())
    return outcome


def run_cases(rank: int, world: int, cases: list[Case], root: str) -> dict[str, Outcome]:
    """Every case in order, on every rank; a failing case is recorded, not fatal to the others."""
    import torch.distributed as dist

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results: dict[str, Outcome] = {}
    for case in cases:
        try:
            results[case.name] = run(case, Path(root))
        except Exception as error:  # one case failing must not hide the others
            import traceback

            results[case.name] = Outcome([], [], error=f"{type(error).__name__}: {error}\n{traceback.format_exc()}")
            dist.barrier()
    return results


def with_name(case: Case, name: str) -> Case:
    return replace(case, name=name)
