"""4.30's official SQuAD evaluation (``transformers.data.metrics.squad_metrics``): exact match and
F1 over normalised answers, per has-answer and no-answer question, and the best no-answer
threshold.  Served by :mod:`.squad`."""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .squad import SquadExample


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
