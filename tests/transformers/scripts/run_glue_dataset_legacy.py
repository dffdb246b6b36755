#!/usr/bin/env python
"""Fine-tune a sequence classifier on a GLUE task read from its TSV files: written as the 3.x-4.0
``run_glue.py`` was, which the projects of the 4.x era kept (``GlueDataset``,
``GlueDataTrainingArguments``, ``glue_compute_metrics``, ``glue_output_modes``,
``glue_tasks_num_labels``), with the 4.30 API around it (``send_example_telemetry``,
``use_auth_token``, ``overwrite_output_dir``, ``--evaluation_strategy``).  It knows nothing of shardcompat.  The model, tokenizer and the
task's files are local ones the tests write, so nothing is downloaded.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    EvalPrediction,
    GlueDataset,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    glue_compute_metrics,
    glue_output_modes,
    glue_tasks_num_labels,
    is_torch_tpu_available,
    set_seed,
)
from transformers import GlueDataTrainingArguments as DataTrainingArguments
from transformers.utils import check_min_version, send_example_telemetry

check_min_version("4.30.0")

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "Path to pretrained model or model identifier."})
    cache_dir: Optional[str] = field(default=None, metadata={"help": "Where to store downloaded models."})
    use_auth_token: bool = field(default=False, metadata={"help": "Use the token of `huggingface-cli login`."})


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    send_example_telemetry("run_glue", model_args, data_args)

    if (
        os.path.exists(training_args.output_dir)
        and os.listdir(training_args.output_dir)
        and training_args.do_train
        and not training_args.overwrite_output_dir
    ):
        raise ValueError(f"Output directory ({training_args.output_dir}) already exists and is not empty.")

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s -   %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        level=logging.INFO if training_args.local_rank in [-1, 0] else logging.WARN,
    )
    set_seed(training_args.seed)

    num_labels = glue_tasks_num_labels[data_args.task_name]
    output_mode = glue_output_modes[data_args.task_name]

    config = AutoConfig.from_pretrained(
        model_args.model_name_or_path, num_labels=num_labels, finetuning_task=data_args.task_name,
        cache_dir=model_args.cache_dir, use_auth_token=True if model_args.use_auth_token else None,
    )
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path, cache_dir=model_args.cache_dir,
        use_auth_token=True if model_args.use_auth_token else None,
    )
    model = AutoModelForSequenceClassification.from_pretrained(
        model_args.model_name_or_path, config=config, cache_dir=model_args.cache_dir,
        use_auth_token=True if model_args.use_auth_token else None,
    )

    train_dataset = GlueDataset(data_args, tokenizer=tokenizer) if training_args.do_train else None
    eval_dataset = GlueDataset(data_args, tokenizer=tokenizer, mode="dev") if training_args.do_eval else None

    def build_compute_metrics_fn(task_name: str):
        def compute_metrics_fn(p: EvalPrediction) -> dict:
            if output_mode == "classification":
                preds = np.argmax(p.predictions, axis=1)
            else:
                preds = np.squeeze(p.predictions)
            return glue_compute_metrics(task_name, preds, p.label_ids)

        return compute_metrics_fn

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        compute_metrics=build_compute_metrics_fn(data_args.task_name) if not is_torch_tpu_available() else None,
    )  # no tokenizer=: the default collator takes GlueDataset's InputFeatures as they are

    if training_args.do_train:
        train_result = trainer.train()
        trainer.save_model()
        trainer.log_metrics("train", train_result.metrics)
        trainer.save_metrics("train", train_result.metrics)
        trainer.save_state()
        if trainer.is_world_process_zero():
            tokenizer.save_pretrained(training_args.output_dir)

    if training_args.do_eval:
        logger.info("*** Evaluate ***")
        metrics = trainer.evaluate(eval_dataset=eval_dataset)
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
