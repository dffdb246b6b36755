#!/usr/bin/env python
"""A sequence-to-sequence fine-tuning project of the Transformers 4.2x era, in the shape such
projects took (and run by its own scripts with ``--sharded_ddp simple --adafactor``): a
``Seq2SeqTrainer`` subclass whose ``compute_loss(self, model, inputs)`` adds label smoothing,
labels encoded inside ``with tokenizer.as_target_tokenizer():``, ``is_offline_mode`` from
``transformers.utils``, and the trainer built with its arguments by position in 4.x's order.
It knows nothing of shardcompat.  Model, tokenizer and data are local files the tests write
(JSON lines of ``{"translation": {"en": ..., "de": ...}}``); each rank writes what it saw to
``OUTPUT_DIR/result-RANK.json``.
"""

import json
import logging
import os
from dataclasses import dataclass, field

import numpy as np
from torch.nn import functional as F
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    set_seed,
)
from transformers.utils import is_offline_mode

logger = logging.getLogger(__name__)


@dataclass
class ProjectArguments:
    model_name_or_path: str = field(metadata={"help": "The model folder."})
    train_file: str = field(metadata={"help": "JSON lines of translation pairs."})
    validation_file: str = field(metadata={"help": "JSON lines of translation pairs."})
    max_source_length: int = field(default=16)
    max_target_length: int = field(default=8)
    label_smoothing: float = field(default=0.1, metadata={"help": "Epsilon of the label-smoothed loss."})


class Pairs:
    def __init__(self, path, tokenizer, args):
        with open(path) as f:
            pairs = [json.loads(line)["translation"] for line in f if line.strip()]
        sources = [p["en"] for p in pairs]
        targets = [p["de"] for p in pairs]
        model_inputs = tokenizer(sources, max_length=args.max_source_length, truncation=True)
        # Setup the tokenizer for targets
        with tokenizer.as_target_tokenizer():
            labels = tokenizer(targets, max_length=args.max_target_length, truncation=True)
        self.features = [
            {"input_ids": ids, "attention_mask": mask, "labels": lab}
            for ids, mask, lab in zip(model_inputs["input_ids"], model_inputs["attention_mask"], labels["input_ids"])
        ]

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        return self.features[i]


class LabelSmoothedTrainer(Seq2SeqTrainer):
    label_smoothing = 0.0
    seen = None

    def compute_loss(self, model, inputs):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100,
                               label_smoothing=self.label_smoothing)
        self.seen.append(float(loss))
        return loss


def main():
    parser = HfArgumentParser((ProjectArguments, Seq2SeqTrainingArguments))
    project, training_args = parser.parse_args_into_dataclasses()
    logging.basicConfig(level=logging.INFO)
    if is_offline_mode():
        logger.info("offline: the model and data are local")
    set_seed(training_args.seed)

    tokenizer = AutoTokenizer.from_pretrained(project.model_name_or_path)
    model = AutoModelForSeq2SeqLM.from_pretrained(project.model_name_or_path)
    train_dataset = Pairs(project.train_file, tokenizer, project)
    eval_dataset = Pairs(project.validation_file, tokenizer, project)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)

    def compute_metrics(eval_preds):
        preds, labels = eval_preds
        preds = np.where(preds != -100, preds, tokenizer.pad_token_id)
        labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
        decoded = tokenizer.batch_decode(preds, skip_special_tokens=True)
        wanted = tokenizer.batch_decode(labels, skip_special_tokens=True)
        return {"exact_match": float(np.mean([p.strip() == w.strip() for p, w in zip(decoded, wanted)]))}

    trainer = LabelSmoothedTrainer(
        model, training_args, collator, train_dataset, eval_dataset, tokenizer, None, compute_metrics
    )
    trainer.label_smoothing, trainer.seen = project.label_smoothing, []
    trainer.train()
    metrics = trainer.evaluate(max_length=project.max_target_length, num_beams=1)
    trainer.save_model(os.path.join(training_args.output_dir, "final"))
    result = {"losses": trainer.seen, "log_history": trainer.state.log_history, "eval": metrics,
              "optimizer": optimizer_names(trainer.optimizer)}
    with open(os.path.join(training_args.output_dir, f"result-{training_args.process_index}.json"), "w") as f:
        json.dump(result, f)


def optimizer_names(optimizer):
    """The optimizer and those it wraps (an Accelerate wrapper, fairscale's OSS)."""
    names = []
    while optimizer is not None and len(names) < 4:
        names.append(type(optimizer).__name__)
        optimizer = getattr(optimizer, "optimizer", None) or getattr(optimizer, "optim", None)
    return names


if __name__ == "__main__":
    main()
