#!/usr/bin/env python
"""Fine-tune a sequence classifier on a GLUE-style task: written as Transformers 4.30's
examples/pytorch/text-classification/run_glue.py was, with the API of that release
(``is_torch_tpu_available``, ``send_example_telemetry``, ``use_auth_token``,
``overwrite_output_dir``, ``Trainer(tokenizer=...)``, ``--evaluation_strategy``, and
``resume_from_checkpoint=`` a local model folder).  It knows
nothing of shardcompat.  The model, tokenizer and data are local files the tests write (JSON
lines with ``sentence1``, ``sentence2`` and ``label``), so nothing is downloaded.
"""

import json
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    EvalPrediction,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
    is_torch_tpu_available,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint
from transformers.utils import check_min_version, send_example_telemetry

check_min_version("4.30.0")

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments:
    train_file: Optional[str] = field(default=None, metadata={"help": "A json lines file with the training data."})
    validation_file: Optional[str] = field(default=None, metadata={"help": "A json lines file with the validation data."})
    max_seq_length: int = field(default=16, metadata={"help": "Sequences are truncated to this length."})
    pad_to_max_length: bool = field(default=True, metadata={"help": "Pad every sample to max_seq_length."})


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "Path to pretrained model or model identifier."})
    cache_dir: Optional[str] = field(default=None, metadata={"help": "Where to store downloaded models."})
    use_auth_token: bool = field(default=False, metadata={"help": "Use the token of `huggingface-cli login`."})


class JsonLines(torch.utils.data.Dataset):
    def __init__(self, path, tokenizer, max_seq_length, padding):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        self.features = [
            dict(tokenizer(r["sentence1"], r["sentence2"], padding=padding, max_length=max_seq_length,
                           truncation=True), label=r["label"])
            for r in rows
        ]

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        return self.features[i]


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=os.path.abspath(sys.argv[1]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    send_example_telemetry("run_glue", model_args, data_args)

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    logger.info(f"Training/evaluation parameters {training_args}")

    # Detecting last checkpoint.
    last_checkpoint = None
    if os.path.isdir(training_args.output_dir) and training_args.do_train and not training_args.overwrite_output_dir:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
        if last_checkpoint is None and len(os.listdir(training_args.output_dir)) > 0:
            raise ValueError(
                f"Output directory ({training_args.output_dir}) already exists and is not empty. "
                "Use --overwrite_output_dir to overcome."
            )
        elif last_checkpoint is not None and training_args.resume_from_checkpoint is None:
            logger.info(f"Checkpoint detected, resuming training at {last_checkpoint}.")

    set_seed(training_args.seed)

    config = AutoConfig.from_pretrained(
        model_args.model_name_or_path, num_labels=2, finetuning_task="mrpc", cache_dir=model_args.cache_dir,
        use_auth_token=True if model_args.use_auth_token else None,
    )
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path, cache_dir=model_args.cache_dir,
        use_auth_token=True if model_args.use_auth_token else None,
    )
    model = AutoModelForSequenceClassification.from_pretrained(
        model_args.model_name_or_path, config=config, cache_dir=model_args.cache_dir,
        use_auth_token=True if model_args.use_auth_token else None,
    )

    padding = "max_length" if data_args.pad_to_max_length else False
    train_dataset = JsonLines(data_args.train_file, tokenizer, data_args.max_seq_length, padding)
    eval_dataset = JsonLines(data_args.validation_file, tokenizer, data_args.max_seq_length, padding)

    def compute_metrics(p: EvalPrediction):
        preds = p.predictions[0] if isinstance(p.predictions, tuple) else p.predictions
        preds = np.argmax(preds, axis=1)
        return {"accuracy": (preds == p.label_ids).astype(np.float32).mean().item()}

    if data_args.pad_to_max_length:
        data_collator = default_data_collator
    else:
        data_collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8 if training_args.fp16 else None)

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset if training_args.do_eval else None,
        compute_metrics=compute_metrics if not is_torch_tpu_available() else None,
        tokenizer=tokenizer,
        data_collator=data_collator,
    )

    if training_args.do_train:
        checkpoint = None
        if training_args.resume_from_checkpoint is not None:
            checkpoint = training_args.resume_from_checkpoint
        elif last_checkpoint is not None:
            checkpoint = last_checkpoint
        elif os.path.isdir(model_args.model_name_or_path):
            # as run_glue.py 4.3-4.5 and 4.30's run_speech_recognition_ctc.py: a local model folder
            # is "resumed", which 4.x took for its weights and a fresh start
            checkpoint = model_args.model_name_or_path
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)
        trainer.save_model()  # Saves the tokenizer too for easy upload
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()

    if training_args.do_eval:
        logger.info("*** Evaluate ***")
        metrics = trainer.evaluate(eval_dataset=eval_dataset)
        metrics["eval_samples"] = len(eval_dataset)
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
