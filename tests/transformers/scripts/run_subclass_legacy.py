#!/usr/bin/env python
"""A Trainer subclass of the Transformers 4.2x-4.30 era, with the overrides such code copied
about: a ``create_optimizer`` with its own parameter groups that builds fairscale's ``OSS``
when ``self.sharded_ddp == ShardedDDPOption.SIMPLE`` (as 4.30's own did), a custom loss in
``compute_loss(self, model, inputs, return_outputs=False)`` returning ``(loss, outputs)``,
``training_step(self, model, inputs)``, a length-grouped ``_get_train_sampler(self)``,
``_save_checkpoint(self, model, trial, metrics=None)`` and ``_save`` calling ``super()``,
``log(self, logs)``, a QA-style ``evaluate`` that post-processes the predictions before
``compute_metrics``, ``Trainer(...)`` arguments by position in 4.x's order (with
``OPTIMIZER_GIVEN=1``, ``optimizers=(AdamW(...), None)`` too), and the report of its sharding
arguments as 4.x scripts wrote it (``[ShardedDDPOption(o).value for o in args.sharded_ddp]``).  It knows
nothing of shardcompat.  A tiny GPT-2 is built from its config (dropout at its default);
the data are random tokens.  Each rank writes what it saw to ``OUTPUT_DIR/result-RANK.json``.
"""

import json
import os

import numpy as np
import torch
from torch.nn import functional as F
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
)
from transformers.pytorch_utils import ALL_LAYERNORM_LAYERS
from transformers.trainer_pt_utils import LengthGroupedSampler, get_parameter_names
from transformers.trainer_utils import EvalPrediction

try:
    from transformers.trainer_utils import ShardedDDPOption
except ImportError:  # until the legacy-names table serves it at its 4.x path (issue 30.1)
    from shardcompat.transformers._sharded_ddp_option import ShardedDDPOption

SEQ, VOCAB = 8, 64


class Tokens(torch.utils.data.Dataset):
    def __init__(self, size, seed):
        gen = torch.Generator().manual_seed(seed)
        self.inputs = torch.randint(2, VOCAB, (size, SEQ), generator=gen)

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, i):
        return {"input_ids": self.inputs[i], "labels": self.inputs[i]}


def compute_metrics(p):
    return {"accuracy": float((p.predictions == p.label_ids).mean())}


class LegacyTrainer(Trainer):
    recorded = None
    checkpoint_metrics = None

    def create_optimizer(self):
        opt_model = self.model
        if self.optimizer is None:
            decay_parameters = get_parameter_names(opt_model, ALL_LAYERNORM_LAYERS)
            decay_parameters = [name for name in decay_parameters if "bias" not in name]
            optimizer_grouped_parameters = [
                {
                    "params": [p for n, p in opt_model.named_parameters() if n in decay_parameters and p.requires_grad],
                    "weight_decay": self.args.weight_decay,
                },
                {
                    "params": [p for n, p in opt_model.named_parameters() if n not in decay_parameters and p.requires_grad],
                    "weight_decay": 0.0,
                    "lr": self.args.learning_rate * 0.5,
                },
            ]
            optimizer_cls, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args)
            if self.sharded_ddp == ShardedDDPOption.SIMPLE:
                from fairscale.optim import OSS

                self.optimizer = OSS(params=optimizer_grouped_parameters, optim=optimizer_cls, **optimizer_kwargs)
            else:
                self.optimizer = optimizer_cls(optimizer_grouped_parameters, **optimizer_kwargs)
            self.built_optimizer = type(self.optimizer).__name__
        return self.optimizer

    def compute_loss(self, model, inputs, return_outputs=False):
        labels = inputs["labels"]
        outputs = model(input_ids=inputs["input_ids"])
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
        return (loss, outputs) if return_outputs else loss

    def training_step(self, model, inputs):
        loss = super().training_step(model, inputs)
        self.recorded.append(float(loss))
        return loss

    def _get_train_sampler(self):
        lengths = [int((x["input_ids"] > 1).sum()) for x in self.train_dataset]
        return LengthGroupedSampler(
            self.args.train_batch_size * self.args.gradient_accumulation_steps, dataset=self.train_dataset, lengths=lengths
        )

    def _save_checkpoint(self, model, trial, metrics=None):
        self.checkpoint_metrics.append(None if metrics is None else round(metrics["eval_loss"], 6))
        super()._save_checkpoint(model, trial, metrics=metrics)

    def _save(self, output_dir=None, state_dict=None):
        super()._save(output_dir, state_dict=state_dict)
        if self.args.should_save:
            with open(os.path.join(output_dir, "saved_by_subclass.txt"), "w") as f:
                f.write("yes\n")

    def log(self, logs):
        logs["seen_by_subclass"] = 1.0
        super().log(logs)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
        compute_metrics, self.compute_metrics = self.compute_metrics, None
        dataloader = self.get_eval_dataloader(eval_dataset)
        try:
            output = self.evaluation_loop(
                dataloader, description="Evaluation", prediction_loss_only=None, ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
            )
        finally:
            self.compute_metrics = compute_metrics
        logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
        predictions = np.argmax(logits, axis=-1)[:, :-1]  # the post-processing step of a QA trainer
        metrics = self.compute_metrics(EvalPrediction(predictions=predictions, label_ids=output.label_ids[:, 1:]))
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in metrics.items()}
        metrics[f"{metric_key_prefix}_loss"] = output.metrics[f"{metric_key_prefix}_loss"]
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


def main():
    (training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    # how such scripts reported their arguments (4.30's list of ShardedDDPOption)
    sharded_ddp = [ShardedDDPOption(o).value for o in training_args.sharded_ddp]
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=1)
    model = GPT2LMHeadModel(config)
    optimizers = (None, None)
    if os.environ.get("OPTIMIZER_GIVEN") == "1":  # Trainer(optimizers=(AdamW(...), None)), as scripts passed it
        optimizers = (torch.optim.AdamW(model.parameters(), lr=training_args.learning_rate), None)
    trainer = LegacyTrainer(
        model, training_args, default_data_collator, Tokens(64, 1), Tokens(8, 2), None, None, compute_metrics,
        optimizers=optimizers,
    )
    trainer.recorded, trainer.checkpoint_metrics = [], []
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model(os.path.join(training_args.output_dir, "final"))
    if trainer.is_world_master():  # 3.x's name, which 4.30's own examples/legacy scripts still called
        with open(os.path.join(training_args.output_dir, "written_by_world_master.txt"), "w") as f:
            f.write("yes\n")
    result = {
        "losses": trainer.recorded, "log_history": trainer.state.log_history, "eval": metrics,
        "checkpoint_metrics": trainer.checkpoint_metrics, "seen": internals(trainer),
        "optimizer": getattr(trainer, "built_optimizer", "given"), "arguments": arguments(training_args, sharded_ddp),
    }
    with open(os.path.join(training_args.output_dir, f"result-{training_args.process_index}.json"), "w") as f:
        json.dump(result, f)


def arguments(args, sharded_ddp):
    """The 4.x sharding arguments such code read."""
    return {
        "sharded_ddp": sharded_ddp, "in": ShardedDDPOption.SIMPLE in args.sharded_ddp, "len": len(args.sharded_ddp),
        "fsdp": [str(o.value) for o in args.fsdp], "fsdp_config": args.fsdp_config,
    }


def internals(trainer):
    """The 4.x attributes such code read."""
    return {
        "sharded_ddp": None if trainer.sharded_ddp is None else str(trainer.sharded_ddp.value),
        "fsdp": trainer.fsdp,
        "use_apex": trainer.use_apex, "use_cuda_amp": trainer.use_cuda_amp, "do_grad_scaling": trainer.do_grad_scaling,
        "scaler": type(trainer.scaler).__name__ if hasattr(trainer, "scaler") else "NoneType",
        "amp_dtype": str(trainer.amp_dtype) if hasattr(trainer, "amp_dtype") else "None", "deepspeed": trainer.deepspeed,
        "is_deepspeed_enabled": trainer.is_deepspeed_enabled, "place_model_on_device": trainer.place_model_on_device,
        "model_wrapped": type(trainer.model_wrapped).__name__,
    }


if __name__ == "__main__":
    main()
