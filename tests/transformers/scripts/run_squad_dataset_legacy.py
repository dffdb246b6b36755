#!/usr/bin/env python
"""Fine-tune an extractive question-answering model on SQuAD's JSON files: written as the 4.x
``examples/legacy/question-answering`` scripts were, which the projects of the era kept
(``SquadDataset`` and ``SquadDataTrainingArguments`` for the data; ``SquadResult``,
``compute_predictions_logits`` and ``squad_evaluate`` to decode and score the answers), with the
4.30 API around it (``use_auth_token``, ``overwrite_output_dir``, ``--evaluation_strategy``,
``send_example_telemetry``).  It knows nothing of shardcompat.  The model, tokenizer and SQuAD files
are local ones the tests write, so nothing is downloaded.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from transformers import (
    AutoConfig,
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    HfArgumentParser,
    SquadDataset,
    Trainer,
    TrainingArguments,
    set_seed,
)
from transformers import SquadDataTrainingArguments as DataTrainingArguments
from transformers.data.metrics.squad_metrics import compute_predictions_logits, squad_evaluate
from transformers.data.processors.squad import SquadResult
from transformers.utils import check_min_version, send_example_telemetry

check_min_version("4.30.0")

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "Path to pretrained model or model identifier."})
    cache_dir: Optional[str] = field(default=None, metadata={"help": "Where to store downloaded models."})
    use_auth_token: bool = field(default=False, metadata={"help": "Use the token of `huggingface-cli login`."})
    do_lower_case: bool = field(default=False, metadata={"help": "Whether the tokenizer lower-cases."})


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    send_example_telemetry("run_squad", model_args, data_args)

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

    config = AutoConfig.from_pretrained(
        model_args.model_name_or_path, cache_dir=model_args.cache_dir,
        use_auth_token=True if model_args.use_auth_token else None,
    )
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path, cache_dir=model_args.cache_dir,
        use_auth_token=True if model_args.use_auth_token else None,
    )
    model = AutoModelForQuestionAnswering.from_pretrained(
        model_args.model_name_or_path, config=config, cache_dir=model_args.cache_dir,
        use_auth_token=True if model_args.use_auth_token else None,
    )

    is_language_sensitive = hasattr(model.config, "lang2id")
    train_dataset = (
        SquadDataset(data_args, tokenizer=tokenizer, is_language_sensitive=is_language_sensitive,
                     cache_dir=model_args.cache_dir)
        if training_args.do_train
        else None
    )
    eval_dataset = (
        SquadDataset(data_args, tokenizer=tokenizer, mode="dev", is_language_sensitive=is_language_sensitive,
                     cache_dir=model_args.cache_dir)
        if training_args.do_eval
        else None
    )

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
    )  # no tokenizer=, as the legacy run_squad_trainer.py: the default collator stacks SquadDataset's tensors

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
        start_logits, end_logits = trainer.predict(eval_dataset).predictions
        results = [
            SquadResult(feature.unique_id, start.tolist(), end.tolist())
            for feature, start, end in zip(eval_dataset.features, start_logits, end_logits)
        ]
        writes = trainer.is_world_process_zero()
        out = training_args.output_dir
        predictions = compute_predictions_logits(
            eval_dataset.examples,
            eval_dataset.features,
            results,
            data_args.n_best_size,
            data_args.max_answer_length,
            model_args.do_lower_case,
            os.path.join(out, "predictions.json") if writes else None,
            os.path.join(out, "nbest_predictions.json") if writes else None,
            os.path.join(out, "null_odds.json") if writes else None,
            False,
            data_args.version_2_with_negative,
            data_args.null_score_diff_threshold,
            tokenizer,
        )
        scores = squad_evaluate(eval_dataset.examples, predictions)
        metrics = {f"eval_{name}": value for name, value in scores.items()}
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
