"""Transformers 4.x's SQuAD layer (``transformers.data``: ``SquadV1Processor``,
``SquadV2Processor``, ``SquadExample``, ``squad_convert_examples_to_features``, ``SquadResult``,
``compute_predictions_logits`` and the official evaluation of ``squad_metrics``), which
Transformers 5.0 removed without a successor: written here from what 4.30 did (nothing is copied
from Transformers).  ``shardcompat run`` serves it at its 4.x import paths and
``shardcompat-migrate --transformers-legacy`` imports it from here::

    from shardcompat.transformers.squad import SquadV2Processor, squad_evaluate

The examples (whitespace-split document words, the answer's word span), the spans of the
document the features cut (:mod:`._squad_spans`, as 4.x's slow tokenizers built them), the
decoded answers (:mod:`._squad_answers`) and the scores (exact match and F1 over normalised
answers, per has-answer and no-answer question, and the best no-answer threshold) are 4.30's.
New code reads SQuAD with ``datasets.load_dataset("squad")``, builds features as today's
``run_qa.py`` does and scores with ``evaluate.load("squad")``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.utils.data

from . import _json_cache
from ._data_processors import DataProcessor, tensor_value
from ._squad_answers import (
    compute_predictions_log_probs,
    compute_predictions_logits,
    get_final_text,
)
from ._squad_scores import (
    apply_no_ans_threshold,
    compute_exact,
    compute_f1,
    find_all_best_thresh,
    find_all_best_thresh_v2,
    find_best_thresh,
    find_best_thresh_v2,
    get_raw_scores,
    get_tokens,
    make_eval_dict,
    merge_eval,
    normalize_answer,
    squad_evaluate,
)
from ._squad_spans import (
    MULTI_SEP_TOKENS_TOKENIZERS_SET,
    features_dataset,
    squad_convert_example_to_features,
    squad_convert_example_to_features_init,
    squad_convert_examples_to_features,
)

__all__ = ["MULTI_SEP_TOKENS_TOKENIZERS_SET", "Split", "SquadDataTrainingArguments", "SquadDataset", "SquadExample", "SquadFeatures", "SquadProcessor", "SquadResult",
           "SquadV1Processor", "SquadV2Processor", "apply_no_ans_threshold", "compute_exact", "compute_f1",
           "compute_predictions_log_probs", "compute_predictions_logits", "find_all_best_thresh",
           "find_all_best_thresh_v2", "find_best_thresh", "find_best_thresh_v2", "get_final_text", "get_raw_scores",
           "get_tokens", "make_eval_dict", "merge_eval", "normalize_answer", "squad_convert_example_to_features",
           "squad_convert_example_to_features_init", "squad_convert_examples_to_features", "squad_evaluate"]

_WHITESPACE = frozenset(" \t\r\n\u202f")


class SquadExample:
    """One question on a context: the context split into whitespace-separated words
    (``doc_tokens``), each character's word (``char_to_word_offset``), and, for a training
    answer, its first and last word (``start_position``, ``end_position``; 0 otherwise)."""

    def __init__(self, qas_id: str, question_text: str, context_text: str, answer_text: str | None,
                 start_position_character: int | None, title: str, answers: list[dict[str, Any]] | None = None,
                 is_impossible: bool = False) -> None:
        self.qas_id, self.question_text, self.context_text = qas_id, question_text, context_text
        self.answer_text, self.title, self.is_impossible = answer_text, title, is_impossible
        self.answers = [] if answers is None else answers
        words: list[str] = []
        offsets: list[int] = []
        after_space = True
        for c in context_text:
            if c in _WHITESPACE:
                after_space = True
            elif after_space:
                words.append(c)
                after_space = False
            else:
                words[-1] += c
            offsets.append(len(words) - 1)
        self.doc_tokens, self.char_to_word_offset = words, offsets
        self.start_position, self.end_position = 0, 0
        if start_position_character is not None and not is_impossible:
            last = min(start_position_character + len(answer_text or "") - 1, len(offsets) - 1)
            self.start_position, self.end_position = offsets[start_position_character], offsets[last]


class SquadFeatures:
    """One span of an example as model inputs, with what decoding the answer needs (the holder
    ``squad_convert_examples_to_features`` filled in 4.x)."""

    def __init__(self, input_ids: list[int], attention_mask: list[int], token_type_ids: list[int], cls_index: int,
                 p_mask: list[int], example_index: int, unique_id: int, paragraph_len: int,
                 token_is_max_context: dict[int, bool], tokens: list[str], token_to_orig_map: dict[int, int],
                 start_position: int, end_position: int, is_impossible: bool, qas_id: str | None = None,
                 encoding: Any = None) -> None:
        self.input_ids, self.attention_mask, self.token_type_ids = input_ids, attention_mask, token_type_ids
        self.cls_index, self.p_mask, self.example_index, self.unique_id = cls_index, p_mask, example_index, unique_id
        self.paragraph_len, self.token_is_max_context, self.tokens = paragraph_len, token_is_max_context, tokens
        self.token_to_orig_map, self.start_position, self.end_position = token_to_orig_map, start_position, end_position
        self.is_impossible, self.qas_id, self.encoding = is_impossible, qas_id, encoding


class SquadResult:
    """A model's output for one feature: start and end logits (and XLNet's beam-search tops)."""

    def __init__(self, unique_id: int, start_logits: Any, end_logits: Any, start_top_index: Any = None,
                 end_top_index: Any = None, cls_logits: Any = None) -> None:
        self.unique_id, self.start_logits, self.end_logits = unique_id, start_logits, end_logits
        if start_top_index:  # as 4.x: only a beam-search head's result has these
            self.start_top_index, self.end_top_index, self.cls_logits = start_top_index, end_top_index, cls_logits


class SquadProcessor(DataProcessor):
    """SQuAD's JSON files (``data`` / ``paragraphs`` / ``qas``) as examples: a training question
    keeps its first answer and where it starts; an evaluation question all its answers."""

    train_file: str | None = None
    dev_file: str | None = None

    def get_train_examples(self, data_dir: str | None, filename: str | None = None) -> list[SquadExample]:
        return self._read(data_dir, filename, self.train_file, "train")

    def get_dev_examples(self, data_dir: str | None, filename: str | None = None) -> list[SquadExample]:
        return self._read(data_dir, filename, self.dev_file, "dev")

    def _read(self, data_dir: str | None, filename: str | None, default: str | None, set_type: str) -> list[SquadExample]:
        if default is None:
            raise ValueError("SquadProcessor reads through SquadV1Processor or SquadV2Processor, which name the files")
        with open(os.path.join(data_dir or "", filename or default), encoding="utf-8") as f:
            return self._create_examples(json.load(f)["data"], set_type)

    def _create_examples(self, input_data: list[dict[str, Any]], set_type: str) -> list[SquadExample]:
        training = set_type == "train"
        examples = []
        for entry in input_data:
            for paragraph in entry["paragraphs"]:
                for qa in paragraph["qas"]:
                    impossible = qa.get("is_impossible", False)
                    first = qa["answers"][0] if training and not impossible else None
                    examples.append(SquadExample(
                        qa["id"], qa["question"], paragraph["context"], first and first["text"],
                        first and first["answer_start"], entry["title"],
                        answers=qa["answers"] if not training and not impossible else [], is_impossible=impossible))
        return examples

    def _get_example_from_tensor_dict(self, tensor_dict: Mapping[str, Any], evaluate: bool = False) -> SquadExample:
        answers = tensor_dict["answers"]
        if evaluate:
            given = [{"answer_start": tensor_value(s), "text": tensor_value(t)}
                     for s, t in zip(answers["answer_start"], answers["text"])]
            text, start = None, None
        else:
            given, text, start = [], tensor_value(answers["text"][0]), tensor_value(answers["answer_start"][0])
        return SquadExample(tensor_value(tensor_dict["id"]), tensor_value(tensor_dict["question"]),
                            tensor_value(tensor_dict["context"]), text, start, tensor_value(tensor_dict["title"]), answers=given)

    def get_examples_from_dataset(self, dataset: Mapping[str, Iterable[Any]], evaluate: bool = False) -> list[SquadExample]:
        """Examples of a TensorFlow-datasets ``squad`` split (validation when ``evaluate``)."""
        split = dataset["validation" if evaluate else "train"]
        return [self._get_example_from_tensor_dict(row, evaluate=evaluate) for row in split]


class SquadV1Processor(SquadProcessor):
    train_file = "train-v1.1.json"
    dev_file = "dev-v1.1.json"


class SquadV2Processor(SquadProcessor):
    train_file = "train-v2.0.json"
    dev_file = "dev-v2.0.json"


# ---------------------------------------------------------------------- SquadDataset
def _help(text: str, default: Any) -> Any:
    return dataclasses.field(default=default, metadata={"help": text})


@dataclasses.dataclass
class SquadDataTrainingArguments:
    """The data arguments of 4.x's SQuAD scripts (``HfArgumentParser`` makes flags of them)."""

    model_type: str = _help("The model's type (bert, xlnet, ...): which inputs SquadDataset gives it", None)
    data_dir: str = _help("The input data dir. Should contain the .json files for the SQuAD task.", None)
    max_seq_length: int = _help("The maximum total input sequence length after tokenization. Sequences longer than "
                                "this will be truncated, sequences shorter will be padded.", 128)
    doc_stride: int = _help("When splitting up a long document into chunks, how much stride to take between "
                            "chunks.", 128)
    max_query_length: int = _help("The maximum number of tokens for the question. Questions longer than this will "
                                  "be truncated to this length.", 64)
    max_answer_length: int = _help("The maximum length of an answer that can be generated. This is needed because "
                                   "the start and end predictions are not conditioned on one another.", 30)
    overwrite_cache: bool = _help("Overwrite the cached training and evaluation sets", False)
    version_2_with_negative: bool = _help("If true, the SQuAD examples contain some that do not have an answer.",
                                          False)
    null_score_diff_threshold: float = _help("If null_score - best_non_null is greater than the threshold predict "
                                             "null.", 0.0)
    n_best_size: int = _help("How many of the best answers the n-best file lists.", 20)
    lang_id: int = _help("language id of input for language-specific xlm models", 0)
    threads: int = _help("multiple threads for converting example to features", 1)


class Split(enum.Enum):
    train = "train"
    dev = "dev"


def _as_row(feature: SquadFeatures) -> dict[str, Any]:
    row = {k: v for k, v in vars(feature).items() if k != "encoding"}  # None from 4.x's slow spans
    for name in ("token_is_max_context", "token_to_orig_map"):  # int keys: pairs, as JSON keys are strings
        row[name] = list(row[name].items())
    return row


def _from_row(row: dict[str, Any]) -> SquadFeatures:
    return SquadFeatures(**{**row, "token_is_max_context": dict(row["token_is_max_context"]),
                            "token_to_orig_map": dict(row["token_to_orig_map"])})


def _feature_rows(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(row, dict) for row in value)


class SquadDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A SQuAD split's features as the model's inputs (those its ``model_type`` takes, and the
    answer positions when training), built from the version's JSON file in ``args.data_dir``.
    ``examples``, ``features`` and ``dataset`` are there for the answers' decoding, as in 4.x.
    The features are cached as JSON under a lock (4.x saved them with ``torch.save``, a pickle
    this never loads), keyed by the tokenizer, the settings and the data file."""

    def __init__(self, args: SquadDataTrainingArguments, tokenizer: Any, limit_length: int | None = None,
                 mode: str | Split = Split.train, is_language_sensitive: bool | None = False,
                 cache_dir: str | None = None, dataset_format: str | None = "pt") -> None:
        self.args = args
        self.is_language_sensitive = is_language_sensitive
        self.processor = SquadV2Processor() if args.version_2_with_negative else SquadV1Processor()
        if isinstance(mode, str):
            try:
                mode = Split[mode]
            except KeyError:
                raise KeyError(f"mode {mode!r} is not a split name: one of {', '.join(Split.__members__)}") from None
        self.mode = mode
        training = mode == Split.train
        version = "v2" if args.version_2_with_negative else "v1"
        name = f"cached_{mode.value}_{type(tokenizer).__name__}_{args.max_seq_length}_{version}.shardcompat.json"
        cache = os.path.join(cache_dir if cache_dir is not None else args.data_dir, name)
        data_file = os.path.join(args.data_dir, self.processor.train_file if training else self.processor.dev_file)
        key = _json_cache.key(tokenizer, data_file, max_seq_length=args.max_seq_length, doc_stride=args.doc_stride,
                              max_query_length=args.max_query_length, split=mode.value, version=version)
        read = self.processor.get_train_examples if training else self.processor.get_dev_examples
        self.examples = read(args.data_dir)  # cheap to read again; the cache keeps what is dear

        def build() -> list[dict[str, Any]]:
            features = squad_convert_examples_to_features(
                examples=self.examples, tokenizer=tokenizer, max_seq_length=args.max_seq_length,
                doc_stride=args.doc_stride, max_query_length=args.max_query_length, is_training=training,
                threads=args.threads)
            return [_as_row(f) for f in features]

        self.features: list[SquadFeatures] = [
            _from_row(row) for row in _json_cache.once(cache, key, build, _feature_rows, args.overwrite_cache)]
        if dataset_format not in (None, "pt"):
            raise ValueError(f"dataset_format={dataset_format!r}: Transformers 5.x is PyTorch only; use 'pt'")
        self.dataset = features_dataset(self.features, training)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        """The model's inputs for feature ``i``: no token types for the models without them, XLNet's
        and XLM's ``cls_index``, ``p_mask`` (and ``is_impossible``, ``langs``), the answer when training."""
        feature = self.features[i]
        inputs = {"input_ids": torch.tensor(feature.input_ids, dtype=torch.long),
                  "attention_mask": torch.tensor(feature.attention_mask, dtype=torch.long)}
        if self.args.model_type not in ("xlm", "roberta", "distilbert", "camembert"):
            inputs["token_type_ids"] = torch.tensor(feature.token_type_ids, dtype=torch.long)
        if self.args.model_type in ("xlnet", "xlm"):
            inputs["cls_index"] = torch.tensor(feature.cls_index, dtype=torch.long)
            inputs["p_mask"] = torch.tensor(feature.p_mask, dtype=torch.float)
            if self.args.version_2_with_negative:
                inputs["is_impossible"] = torch.tensor(feature.is_impossible, dtype=torch.float)
            if self.is_language_sensitive:
                inputs["langs"] = torch.ones(len(feature.input_ids), dtype=torch.int64) * self.args.lang_id
        if self.mode == Split.train:
            inputs["start_positions"] = torch.tensor(feature.start_position, dtype=torch.long)
            inputs["end_positions"] = torch.tensor(feature.end_position, dtype=torch.long)
        return inputs
