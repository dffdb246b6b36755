#!/usr/bin/env python
"""Train a causal language model: a script in the style of Transformers' examples of the
4.4-4.34 era (run_clm.py), left as such scripts are.  It knows nothing of shardcompat; the
tests start it with ``shardcompat run`` and with ``torchrun -m shardcompat.transformers``,
passing ``--sharded_ddp`` as users did.  No downloads: the model is built from a config and
the data are random tokens.
"""

import logging
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import torch
import transformers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    """Arguments pertaining to which model/config we are going to train from scratch."""

    n_layer: int = field(default=2, metadata={"help": "Number of transformer blocks."})
    n_embd: int = field(default=32, metadata={"help": "Hidden size."})
    n_head: int = field(default=2, metadata={"help": "Attention heads."})
    vocab_size: int = field(default=64, metadata={"help": "Vocabulary size."})


@dataclass
class DataTrainingArguments:
    """Arguments pertaining to what data we are going to input our model for training and eval."""

    block_size: int = field(default=8, metadata={"help": "Sequence length."})
    max_train_samples: Optional[int] = field(default=64, metadata={"help": "Training examples."})
    max_eval_samples: Optional[int] = field(default=8, metadata={"help": "Evaluation examples."})


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, size, block_size, vocab_size, seed):
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab_size, (size, block_size), generator=generator)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


class CLMTrainer(Trainer):
    """Scripts of that era often subclassed the Trainer for their loss."""

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        return super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=os.path.abspath(sys.argv[1]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    logger.warning(
        f"Process rank: {training_args.local_rank}, device: {training_args.device}, n_gpu: {training_args.n_gpu}, "
        f"distributed training: {bool(training_args.local_rank != -1)}, world size: {training_args.world_size}"
    )
    logger.info(f"Training/evaluation parameters {training_args}")

    last_checkpoint = None
    if os.path.isdir(training_args.output_dir) and training_args.do_train:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)

    set_seed(training_args.seed)
    config = GPT2Config(
        vocab_size=model_args.vocab_size, n_positions=data_args.block_size, n_embd=model_args.n_embd,
        n_layer=model_args.n_layer, n_head=model_args.n_head, bos_token_id=0, eos_token_id=1,
    )
    model = GPT2LMHeadModel(config)
    train_dataset = RandomTokens(data_args.max_train_samples, data_args.block_size, config.vocab_size, 1)
    eval_dataset = RandomTokens(data_args.max_eval_samples, data_args.block_size, config.vocab_size, 2)

    trainer = CLMTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset if training_args.do_eval else None,
        data_collator=default_data_collator,
    )

    if training_args.do_train:
        checkpoint = training_args.resume_from_checkpoint or last_checkpoint
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()

    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["eval_samples"] = len(eval_dataset)
        metrics["perplexity"] = math.exp(metrics["eval_loss"])
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
