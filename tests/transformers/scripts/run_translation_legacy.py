#!/usr/bin/env python
"""Fine-tune a sequence-to-sequence model for translation: written as Transformers 4.30's
examples/pytorch/translation/run_translation.py was, with the API of that release
(``send_example_telemetry``, ``use_auth_token``, ``overwrite_output_dir``,
``Seq2SeqTrainer(tokenizer=...)``, ``--evaluation_strategy``).  It knows nothing of
shardcompat.  Model, tokenizer and data are local files the tests write (JSON lines of
``{"translation": {"en": ..., "de": ...}}``), so nothing is downloaded.
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
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint
from transformers.utils import check_min_version, send_example_telemetry

check_min_version("4.30.0")

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "Path to pretrained model or model identifier."})
    use_auth_token: bool = field(default=False, metadata={"help": "Use the token of `huggingface-cli login`."})


@dataclass
class DataTrainingArguments:
    source_lang: str = field(default="en", metadata={"help": "Source language id for translation."})
    target_lang: str = field(default="de", metadata={"help": "Target language id for translation."})
    train_file: Optional[str] = field(default=None, metadata={"help": "A jsonlines training file."})
    validation_file: Optional[str] = field(default=None, metadata={"help": "A jsonlines validation file."})
    max_source_length: Optional[int] = field(default=12, metadata={"help": "Source sequences are truncated."})
    max_target_length: Optional[int] = field(default=8, metadata={"help": "Target sequences are truncated."})
    num_beams: Optional[int] = field(default=1, metadata={"help": "Beams for evaluate and predict."})


class Translations(torch.utils.data.Dataset):
    def __init__(self, path, tokenizer, data_args):
        with open(path) as f:
            pairs = [json.loads(line)["translation"] for line in f if line.strip()]
        inputs = [p[data_args.source_lang] for p in pairs]
        targets = [p[data_args.target_lang] for p in pairs]
        model_inputs = tokenizer(inputs, max_length=data_args.max_source_length, truncation=True)
        labels = tokenizer(text_target=targets, max_length=data_args.max_target_length, truncation=True)
        self.features = [
            {"input_ids": ids, "attention_mask": mask, "labels": lab}
            for ids, mask, lab in zip(model_inputs["input_ids"], model_inputs["attention_mask"], labels["input_ids"])
        ]

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        return self.features[i]


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, Seq2SeqTrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    send_example_telemetry("run_translation", model_args, data_args)

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)

    last_checkpoint = None
    if os.path.isdir(training_args.output_dir) and training_args.do_train and not training_args.overwrite_output_dir:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
        if last_checkpoint is None and len(os.listdir(training_args.output_dir)) > 0:
            raise ValueError(
                f"Output directory ({training_args.output_dir}) already exists and is not empty. "
                "Use --overwrite_output_dir to overcome."
            )

    set_seed(training_args.seed)

    config = AutoConfig.from_pretrained(
        model_args.model_name_or_path, use_auth_token=True if model_args.use_auth_token else None
    )
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path, use_auth_token=True if model_args.use_auth_token else None
    )
    model = AutoModelForSeq2SeqLM.from_pretrained(
        model_args.model_name_or_path, config=config, use_auth_token=True if model_args.use_auth_token else None
    )

    train_dataset = Translations(data_args.train_file, tokenizer, data_args)
    eval_dataset = Translations(data_args.validation_file, tokenizer, data_args)
    data_collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)

    def compute_metrics(eval_preds):
        preds, labels = eval_preds
        if isinstance(preds, tuple):
            preds = preds[0]
        preds = np.where(preds != -100, preds, tokenizer.pad_token_id)
        labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
        decoded_preds = tokenizer.batch_decode(preds, skip_special_tokens=True)
        decoded_labels = tokenizer.batch_decode(labels, skip_special_tokens=True)
        exact = [p.strip() == lab.strip() for p, lab in zip(decoded_preds, decoded_labels)]
        return {"exact_match": float(np.mean(exact)), "gen_len": float(np.mean([len(p.split()) for p in decoded_preds]))}

    trainer = Seq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset if training_args.do_eval else None,
        tokenizer=tokenizer,
        data_collator=data_collator,
        compute_metrics=compute_metrics if training_args.predict_with_generate else None,
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
        metrics = trainer.evaluate(max_length=data_args.max_target_length, num_beams=data_args.num_beams,
                                   metric_key_prefix="eval")
        metrics["eval_samples"] = len(eval_dataset)
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
