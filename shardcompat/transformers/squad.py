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

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

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
    squad_convert_example_to_features,
    squad_convert_example_to_features_init,
    squad_convert_examples_to_features,
)

__all__ = ["MULTI_SEP_TOKENS_TOKENIZERS_SET", "SquadExample", "SquadFeatures", "SquadProcessor", "SquadResult",
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
