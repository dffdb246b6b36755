"""4.30's SQuAD answer decoding (``compute_predictions_logits`` for BERT-style heads,
``compute_predictions_log_probs`` for XLNet's beam-search head, and ``get_final_text``): the best
spans of each example's features, projected back onto the original words, with their n-best
lists and (SQuAD 2.0) the no-answer choice.  Written here from that behaviour; the basic
tokenization ``get_final_text`` aligns with is the ``tokenizers`` library's BERT normaliser and
pre-tokenizer (4.x's ``BasicTokenizer`` did the same).  Served by :mod:`.squad`."""

from __future__ import annotations

import collections
import functools
import json
import logging
import math
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)


def _basic_tokens(text: str, do_lower_case: bool) -> list[str]:
    """4.x's ``BasicTokenizer(do_lower_case).tokenize``: cleaned, CJK characters spaced, lower-cased
    without accents when asked, split on whitespace and punctuation."""
    import tokenizers

    normalized = tokenizers.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=do_lower_case,
    ).normalize_str(unicodedata.normalize("NFC", text))
    return [piece for piece, _ in tokenizers.pre_tokenizers.BertPreTokenizer().pre_tokenize_str(normalized)]


def _without_spaces(text: str) -> tuple[str, dict[int, int]]:
    """The text without spaces, and each kept character's index in the text."""
    kept = [(i, c) for i, c in enumerate(text) if c != " "]
    return "".join(c for _, c in kept), {n: i for n, (i, _) in enumerate(kept)}


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool, verbose_logging: bool = False) -> str:
    """The part of ``orig_text`` (the original words) that the predicted, tokenized text covers;
    all of ``orig_text`` when the two cannot be aligned character for character."""
    tok_text = " ".join(_basic_tokens(orig_text, do_lower_case))
    start = tok_text.find(pred_text)
    if start == -1:
        if verbose_logging:
            logger.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
        return orig_text
    end = start + len(pred_text) - 1
    orig_stripped, orig_map = _without_spaces(orig_text)
    tok_stripped, tok_map = _without_spaces(tok_text)
    if len(orig_stripped) != len(tok_stripped):
        if verbose_logging:
            logger.info("Length not equal after stripping spaces: '%s' vs '%s'", orig_stripped, tok_stripped)
        return orig_text
    tok_to_stripped = {i: n for n, i in tok_map.items()}
    bounds = [orig_map.get(tok_to_stripped[p]) if p in tok_to_stripped else None for p in (start, end)]
    if bounds[0] is None or bounds[1] is None:
        if verbose_logging:
            logger.info("Couldn't map %s position", "start" if bounds[0] is None else "end")
        return orig_text
    return orig_text[bounds[0]:bounds[1] + 1]


def _best_indexes(logits: Sequence[float], n_best_size: int) -> list[int]:
    return [i for i, _ in sorted(enumerate(logits), key=lambda x: x[1], reverse=True)[:n_best_size]]


def _softmax(scores: list[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    return [e / sum(exps) for e in exps]


class _Candidate(NamedTuple):
    feature_index: int
    start_index: int
    end_index: int
    start: float  # logit or log-probability
    end: float


def _text(features: list[Any], example: Any, tokenizer: Any, do_lower_case: bool, verbose: bool,
          candidate: _Candidate, cls_is_no_answer: bool = False) -> str:
    """The original words a candidate span covers ("" for the no-answer at [CLS] where it is one)."""
    if cls_is_no_answer and candidate.start_index == 0:
        return ""
    feature = features[candidate.feature_index]
    pieces = feature.tokens[candidate.start_index:candidate.end_index + 1]
    words = example.doc_tokens[feature.token_to_orig_map[candidate.start_index]:
                               feature.token_to_orig_map[candidate.end_index] + 1]
    predicted = " ".join(tokenizer.convert_tokens_to_string(pieces).strip().split())
    return get_final_text(predicted, " ".join(words), do_lower_case, verbose)


def _grouped(all_features: Iterable[Any], all_results: Iterable[Any]) -> tuple[dict[int, list[Any]], dict[int, Any]]:
    by_example: dict[int, list[Any]] = collections.defaultdict(list)
    for feature in all_features:
        by_example[feature.example_index].append(feature)
    return by_example, {r.unique_id: r for r in all_results}


def _distinct(candidates: list[_Candidate], n_best_size: int,
              text_of: Callable[[_Candidate], str]) -> list[tuple[str, float, float]]:
    """The best ``n_best_size`` candidates with distinct texts: (text, start, end), best first."""
    seen: set[str] = set()
    entries: list[tuple[str, float, float]] = []
    for candidate in sorted(candidates, key=lambda c: c.start + c.end, reverse=True):
        if len(entries) >= n_best_size:
            break
        text = text_of(candidate)
        if text not in seen:
            seen.add(text)
            entries.append((text, candidate.start, candidate.end))
    return entries


class _Answers:
    """What both decoders give: each question's answer, its n-best list and its no-answer score."""

    def __init__(self) -> None:
        self.predictions: collections.OrderedDict[str, str] = collections.OrderedDict()
        self.nbest: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.null_odds: collections.OrderedDict[str, float] = collections.OrderedDict()

    def write(self, prediction_file: str | None, nbest_file: str | None,
              null_odds_file: str | None) -> collections.OrderedDict[str, str]:
        """Writes each to its file where one is named (the no-answer scores for SQuAD 2.0 only)."""
        for path, value in ((prediction_file, self.predictions), (nbest_file, self.nbest),
                            (null_odds_file, self.null_odds)):
            if path:
                with open(path, "w") as f:
                    f.write(json.dumps(value, indent=4) + "\n")
        return self.predictions


def _nbest_json(entries: list[tuple[str, float, float]], names: tuple[str, str]) -> list[dict[str, Any]]:
    probabilities = _softmax([s + e for _, s, e in entries])
    return [collections.OrderedDict([("text", text), ("probability", p), (names[0], s), (names[1], e)])
            for (text, s, e), p in zip(entries, probabilities)]


def compute_predictions_logits(all_examples: list[Any], all_features: list[Any], all_results: list[Any],
                               n_best_size: int, max_answer_length: int, do_lower_case: bool,
                               output_prediction_file: str | None, output_nbest_file: str | None,
                               output_null_log_odds_file: str | None, verbose_logging: bool,
                               version_2_with_negative: bool, null_score_diff_threshold: float,
                               tokenizer: Any) -> collections.OrderedDict[str, str]:
    """Each example's answer from its features' start and end logits (the n-best spans that lie in
    the document, where the feature gives the start its most context, at most
    ``max_answer_length`` tokens); with ``version_2_with_negative`` "" when the no-answer score beats
    the best span by more than ``null_score_diff_threshold``.  Writes the predictions, n-best lists
    and no-answer score differences to the files given."""
    by_example, results = _grouped(all_features, all_results)
    answers = _Answers()
    for example_index, example in enumerate(all_examples):
        features = by_example[example_index]
        candidates: list[_Candidate] = []
        null = (1000000.0, 0, 0.0, 0.0)  # the lowest no-answer score: score, feature, start logit, end logit
        for feature_index, feature in enumerate(features):
            result = results[feature.unique_id]
            if version_2_with_negative and result.start_logits[0] + result.end_logits[0] < null[0]:
                null = (result.start_logits[0] + result.end_logits[0], feature_index, result.start_logits[0],
                        result.end_logits[0])
            for start in _best_indexes(result.start_logits, n_best_size):
                for end in _best_indexes(result.end_logits, n_best_size):
                    if (start < len(feature.tokens) and end < len(feature.tokens) and start in feature.token_to_orig_map
                            and end in feature.token_to_orig_map and feature.token_is_max_context.get(start, False)
                            and start <= end < start + max_answer_length):
                        candidates.append(_Candidate(feature_index, start, end, result.start_logits[start],
                                                     result.end_logits[end]))
        if version_2_with_negative:
            candidates.append(_Candidate(null[1], 0, 0, null[2], null[3]))
        entries = _distinct(candidates, n_best_size, functools.partial(
            _text, features, example, tokenizer, do_lower_case, verbose_logging, cls_is_no_answer=True))
        if version_2_with_negative:
            if all(text for text, _, _ in entries):
                entries.append(("", null[2], null[3]))
            if len(entries) == 1:  # only the no-answer: an empty placeholder keeps a span to compare with
                entries.insert(0, ("empty", 0.0, 0.0))
        if not entries:
            entries.append(("empty", 0.0, 0.0))
        nbest = _nbest_json(entries, ("start_logit", "end_logit"))
        if not version_2_with_negative:
            answers.predictions[example.qas_id] = nbest[0]["text"]
        else:
            best = next(e for e in entries if e[0])
            diff = answers.null_odds[example.qas_id] = null[0] - best[1] - best[2]
            answers.predictions[example.qas_id] = "" if diff > null_score_diff_threshold else best[0]
        answers.nbest[example.qas_id] = nbest
    return answers.write(output_prediction_file, output_nbest_file,
                         output_null_log_odds_file if version_2_with_negative else None)


def compute_predictions_log_probs(all_examples: list[Any], all_features: list[Any], all_results: list[Any],
                                  n_best_size: int, max_answer_length: int, output_prediction_file: str,
                                  output_nbest_file: str, output_null_log_odds_file: str, start_n_top: int,
                                  end_n_top: int, version_2_with_negative: bool, tokenizer: Any,
                                  verbose_logging: bool) -> collections.OrderedDict[str, str]:
    """XLNet's beam-search head: each example's answer from the top start and end log-probabilities
    (``start_top_index`` / ``end_top_index``), the no-answer score being the lowest ``cls_logits``."""
    by_example, results = _grouped(all_features, all_results)
    lower = getattr(tokenizer, "do_lower_case", None)
    do_lower_case = bool(getattr(tokenizer, "do_lowercase_and_remove_accent", False) if lower is None else lower)
    answers = _Answers()
    for example_index, example in enumerate(all_examples):
        features = by_example[example_index]
        candidates: list[_Candidate] = []
        null = 1000000.0
        for feature_index, feature in enumerate(features):
            result = results[feature.unique_id]
            null = min(null, result.cls_logits)
            for i in range(start_n_top):
                for j in range(end_n_top):
                    start, end = result.start_top_index[i], result.end_top_index[i * end_n_top + j]
                    if (start < feature.paragraph_len - 1 and end < feature.paragraph_len - 1
                            and feature.token_is_max_context.get(start, False) and start <= end < start + max_answer_length):
                        candidates.append(_Candidate(feature_index, start, end, result.start_logits[i],
                                                     result.end_logits[i * end_n_top + j]))
        entries = _distinct(candidates, n_best_size,
                            functools.partial(_text, features, example, tokenizer, do_lower_case, verbose_logging))
        if not entries:
            entries.append(("", -1e6, -1e6))
        answers.nbest[example.qas_id] = _nbest_json(entries, ("start_log_prob", "end_log_prob"))
        answers.null_odds[example.qas_id] = null
        answers.predictions[example.qas_id] = entries[0][0]
    return answers.write(output_prediction_file, output_nbest_file,
                         output_null_log_odds_file if version_2_with_negative else None)
