"""4.30's SQuAD reading and official scoring (``SquadV1Processor``, ``SquadV2Processor``,
``SquadExample``, ``squad_evaluate``), which 5.0 removed: the layer serves shardcompat's own, which
must read SQuAD's JSON files into the examples 4.x made and score as 4.x did.  What the examples
must hold is written out by hand for a context with tabs, newlines and a narrow no-break space;
where the installed Transformers still ships the layer (4.34.1: the ``transformers(4.34.1)`` CI
session) ours is also compared with it, example for example and score for score."""

from __future__ import annotations

import importlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

from shardcompat.transformers import squad  # noqa: E402

HAS_STOCK = importlib.util.find_spec("transformers.data.processors") is not None
STOCK: Any = importlib.import_module("transformers.data.processors.squad") if HAS_STOCK else None
STOCK_METRICS: Any = importlib.import_module("transformers.data.metrics.squad_metrics") if HAS_STOCK else None

CONTEXT = "The  cat\tsat on\nthe mat,\u202fthen slept."  # words: The cat sat on the mat, then slept.
QAS = [
    {"id": "q1", "question": "Where did the cat sit?", "answers": [{"text": "on the mat", "answer_start": 13},
                                                                   {"text": "the mat", "answer_start": 16}]},
    {"id": "q2", "question": "What did it do then?", "answers": [{"text": "slept.", "answer_start": 30}]},
    {"id": "q3", "question": "Who barked?", "answers": [], "is_impossible": True},
]


def _write(root: Path, name: str) -> Path:
    path = root / name
    path.write_text(json.dumps({"version": "v2.0", "data": [
        {"title": "Cats", "paragraphs": [{"context": CONTEXT, "qas": QAS}]}]}), encoding="utf-8")
    return path


def _fields(example: Any) -> dict[str, Any]:
    return dict(vars(example))


def test_squad_files_read_into_4xs_examples(tmp_path: Path) -> None:
    _write(tmp_path, "train-v2.0.json")
    _write(tmp_path, "mine.json")
    train = squad.SquadV2Processor().get_train_examples(str(tmp_path))
    words = ["The", "cat", "sat", "on", "the", "mat,", "then", "slept."]
    assert [e.doc_tokens for e in train] == [words] * 3
    assert train[0].char_to_word_offset[:17] == [0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4]  # spaces: the word before
    assert [(e.qas_id, e.answer_text, e.start_position, e.end_position, e.is_impossible, e.answers) for e in train] == [
        ("q1", "on the mat", 3, 5, False, []), ("q2", "slept.", 7, 7, False, []), ("q3", None, 0, 0, True, [])]
    dev = squad.SquadV1Processor().get_dev_examples(str(tmp_path), filename="mine.json")
    assert [(e.answer_text, e.start_position, len(e.answers)) for e in dev] == [(None, 0, 2), (None, 0, 1), (None, 0, 0)]
    assert dev[0].title == "Cats" and dev[0].question_text == "Where did the cat sit?"
    with pytest.raises(ValueError, match="SquadV1Processor or SquadV2Processor"):
        squad.SquadProcessor().get_dev_examples(str(tmp_path))
    if STOCK is not None:
        for ours, theirs in ((train, STOCK.SquadV2Processor().get_train_examples(str(tmp_path))),
                             (dev, STOCK.SquadV1Processor().get_dev_examples(str(tmp_path), filename="mine.json"))):
            assert [_fields(e) for e in ours] == [_fields(e) for e in theirs]


class _Tensor:
    """What TensorFlow datasets yields: ``.numpy()`` gives bytes or a number."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def numpy(self) -> Any:
        return self.value.encode() if isinstance(self.value, str) else self.value


def test_tensorflow_dataset_rows_read_as_4x_read_them() -> None:
    row = {"id": _Tensor("q1"), "question": _Tensor("Where?"), "context": _Tensor(CONTEXT), "title": _Tensor("Cats"),
           "answers": {"text": [_Tensor("on the mat"), _Tensor("the mat")],
                       "answer_start": [_Tensor(13), _Tensor(16)]}}
    dataset = {"train": [row], "validation": [row]}
    train = squad.SquadV1Processor().get_examples_from_dataset(dataset)
    dev = squad.SquadV1Processor().get_examples_from_dataset(dataset, evaluate=True)
    assert (train[0].answer_text, train[0].start_position, train[0].end_position) == ("on the mat", 3, 5)
    assert dev[0].answers == [{"answer_start": 13, "text": "on the mat"}, {"answer_start": 16, "text": "the mat"}]
    if STOCK is not None:
        processor = STOCK.SquadV1Processor()
        assert _fields(train[0]) == _fields(processor._get_example_from_tensor_dict(row))
        assert _fields(dev[0]) == _fields(processor._get_example_from_tensor_dict(row, evaluate=True))


def test_the_official_scores(tmp_path: Path) -> None:
    _write(tmp_path, "dev-v2.0.json")
    examples = squad.SquadV2Processor().get_dev_examples(str(tmp_path))
    preds = {"q1": "The mat!", "q2": "then slept", "q3": ""}
    scores = squad.squad_evaluate(examples, preds)
    # q1: "the mat" matches exactly after normalising; q2: F1 of {then, slept} vs {slept} = 2/3; q3: no answer, right
    assert dict(scores) == pytest.approx({
        "exact": 200 / 3, "f1": 100 * (1 + 2 / 3 + 1) / 3, "total": 3, "HasAns_exact": 50.0,
        "HasAns_f1": 100 * (1 + 2 / 3) / 2, "HasAns_total": 2, "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": 1,
        "best_exact": 200 / 3, "best_exact_thresh": 0.0, "best_f1": 100 * (1 + 2 / 3 + 1) / 3, "best_f1_thresh": 0.0})
    assert list(scores)[:3] == ["exact", "f1", "total"]
    assert squad.normalize_answer("  The, Cat's  an apple ") == "cats apple"
    assert squad.compute_f1("", "") == 1 and squad.compute_f1("a cat", "") == 0 and squad.compute_f1("x", "y") == 0
    # a no-answer probability above the threshold: q2 counted as "no answer" (wrong), q3 stays right
    thresholded = squad.squad_evaluate(examples, preds, {"q1": 0.1, "q2": 0.9, "q3": 0.8}, 0.5)
    assert thresholded["exact"] == pytest.approx(200 / 3) and thresholded["f1"] == pytest.approx(200 / 3)
    assert thresholded["best_f1_thresh"] == 0.9


def test_the_scores_equal_4xs_over_random_predictions() -> None:
    if STOCK_METRICS is None:
        pytest.skip("this Transformers no longer ships squad_metrics to compare with; the transformers(4.34.1) "
                    "session compares them")
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", ""]
    examples = []
    for i in range(60):
        answers = [{"text": " ".join(rng.sample(words, rng.randint(1, 3))), "answer_start": 0}
                   for _ in range(rng.randint(0, 2))]
        examples.append(squad.SquadExample(f"q{i}", "?", "ctx", None, None, "t", answers=answers))
    preds = {e.qas_id: " ".join(rng.sample(words, rng.randint(0, 3))) for e in examples}
    probs = {qid: round(rng.random(), 2) for qid in preds}
    for extra in ((), (probs, 0.5), (probs, 1.0)):
        assert squad.squad_evaluate(examples, preds, *extra) == STOCK_METRICS.squad_evaluate(examples, preds, *extra)
    exact, f1 = squad.get_raw_scores(examples, preds)
    has = {e.qas_id: bool(e.answers) for e in examples}
    ours: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    squad.find_all_best_thresh_v2(ours, preds, exact, f1, probs, has)
    STOCK_METRICS.find_all_best_thresh_v2(theirs, preds, exact, f1, probs, has)
    assert ours == theirs and set(ours) >= {"has_ans_exact", "has_ans_f1"}
