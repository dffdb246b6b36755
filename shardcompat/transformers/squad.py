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

import collections
import json
import os
import re
import string
from collections.abc import Iterable, Mapping
from typing import Any

from ._data_processors import DataProcessor, tensor_value
from ._squad_answers import (
    compute_predictions_log_probs,
    compute_predictions_logits,
    get_final_text,
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


# ---------------------------------------------------------------------- the official evaluation
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower case, without punctuation, articles or repeated whitespace."""
    text = "".join(c for c in s.lower() if c not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def get_tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def compute_exact(a_gold: str, a_pred: str) -> int:
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    """Token F1 of the normalised answers (a no-answer scores 1 against a no-answer, else 0)."""
    gold, pred = get_tokens(a_gold), get_tokens(a_pred)
    if not gold or not pred:
        return int(gold == pred)
    same = sum((collections.Counter(gold) & collections.Counter(pred)).values())
    if same == 0:
        return 0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def get_raw_scores(examples: Iterable[SquadExample], preds: Mapping[str, str]) -> tuple[dict[str, int], dict[str, float]]:
    """Each question's best exact match and F1 over its gold answers ("" for no answer)."""
    exact: dict[str, int] = {}
    f1: dict[str, float] = {}
    for example in examples:
        gold = [a["text"] for a in example.answers if normalize_answer(a["text"])] or [""]
        if example.qas_id not in preds:
            print(f"Missing prediction for {example.qas_id}")
            continue
        prediction = preds[example.qas_id]
        exact[example.qas_id] = max(compute_exact(a, prediction) for a in gold)
        f1[example.qas_id] = max(compute_f1(a, prediction) for a in gold)
    return exact, f1


def apply_no_ans_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                           qid_to_has_ans: Mapping[str, bool], na_prob_thresh: float) -> dict[str, float]:
    """A question predicted unanswerable (probability above the threshold) scores 1 if it is."""
    return {qid: float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else s for qid, s in scores.items()}


def make_eval_dict(exact_scores: Mapping[str, float], f1_scores: Mapping[str, float],
                   qid_list: list[str] | None = None) -> collections.OrderedDict[str, float]:
    """Percent exact and F1 over ``qid_list`` (every question when empty), and how many."""
    qids = list(qid_list) if qid_list else list(exact_scores)
    total = len(qids)
    return collections.OrderedDict([("exact", 100.0 * sum(exact_scores[k] for k in qids) / total),
                                    ("f1", 100.0 * sum(f1_scores[k] for k in qids) / total), ("total", total)])


def merge_eval(main_eval: dict[str, Any], new_eval: Mapping[str, Any], prefix: str) -> None:
    main_eval.update((f"{prefix}_{k}", v) for k, v in new_eval.items())


def _sweep(preds: Mapping[str, str], scores: Mapping[str, float], na_probs: Mapping[str, float],
           qid_to_has_ans: Mapping[str, bool]) -> tuple[float, float, list[str]]:
    """The best percent score over no-answer thresholds, swept in order of no-answer probability
    (starting from "every question unanswered"), the threshold that gives it, and that order."""
    score: float = sum(1 for has in qid_to_has_ans.values() if not has)
    best = score
    threshold = 0.0
    order = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in order:
        if qid not in scores:
            continue
        score += scores[qid] if qid_to_has_ans[qid] else (-1 if preds[qid] else 0)
        if score > best:
            best, threshold = score, na_probs[qid]
    return 100.0 * best / len(scores), threshold, order


def find_best_thresh(preds: Mapping[str, str], scores: Mapping[str, float], na_probs: Mapping[str, float],
                     qid_to_has_ans: Mapping[str, bool]) -> tuple[float, float]:
    best, threshold, _ = _sweep(preds, scores, na_probs, qid_to_has_ans)
    return best, threshold


def find_best_thresh_v2(preds: Mapping[str, str], scores: Mapping[str, float], na_probs: Mapping[str, float],
                        qid_to_has_ans: Mapping[str, bool]) -> tuple[float, float, float]:
    """:func:`find_best_thresh`, and the mean score of the answerable questions."""
    best, threshold, order = _sweep(preds, scores, na_probs, qid_to_has_ans)
    answerable = [qid for qid in order if qid_to_has_ans[qid]]
    return best, threshold, sum(scores[qid] for qid in answerable if qid in scores) / len(answerable)


def find_all_best_thresh(main_eval: dict[str, Any], preds: Mapping[str, str], exact_raw: Mapping[str, float],
                         f1_raw: Mapping[str, float], na_probs: Mapping[str, float],
                         qid_to_has_ans: Mapping[str, bool]) -> None:
    for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
        main_eval[f"best_{name}"], main_eval[f"best_{name}_thresh"] = find_best_thresh(preds, raw, na_probs,
                                                                                       qid_to_has_ans)


def find_all_best_thresh_v2(main_eval: dict[str, Any], preds: Mapping[str, str], exact_raw: Mapping[str, float],
                            f1_raw: Mapping[str, float], na_probs: Mapping[str, float],
                            qid_to_has_ans: Mapping[str, bool]) -> None:
    for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
        best, threshold, has_ans = find_best_thresh_v2(preds, raw, na_probs, qid_to_has_ans)
        main_eval[f"best_{name}"], main_eval[f"best_{name}_thresh"], main_eval[f"has_ans_{name}"] = (
            best, threshold, has_ans)


def squad_evaluate(examples: list[SquadExample], preds: Mapping[str, str],
                   no_answer_probs: Mapping[str, float] | None = None,
                   no_answer_probability_threshold: float = 1.0) -> collections.OrderedDict[str, Any]:
    """SQuAD's scores of predicted answer texts by question id: exact and F1 overall, for the
    answerable (``HasAns_``) and unanswerable (``NoAns_``) questions, and the best no-answer
    thresholds."""
    has_answer = {e.qas_id: bool(e.answers) for e in examples}
    if no_answer_probs is None:
        no_answer_probs = {k: 0.0 for k in preds}
    exact, f1 = get_raw_scores(examples, preds)
    exact_t = apply_no_ans_threshold(exact, no_answer_probs, has_answer, no_answer_probability_threshold)
    f1_t = apply_no_ans_threshold(f1, no_answer_probs, has_answer, no_answer_probability_threshold)
    evaluation = make_eval_dict(exact_t, f1_t)
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid, has in has_answer.items() if has is wanted]
        if qids:
            merge_eval(evaluation, make_eval_dict(exact_t, f1_t, qid_list=qids), prefix)
    if no_answer_probs:
        find_all_best_thresh(evaluation, preds, exact, f1, no_answer_probs, has_answer)
    return evaluation
