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

from ._untrusted import plant

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

import torch  # noqa: E402

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


# ---------------------------------------------------------------------- spans and answers
PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat", "then", "slept", "dog",
          "ran", "far", "away", "##s", "##ed", "who", "where", "did", "what", "it", "do", ",", ".", "?", "bark"]
LONG = ("The cat sat on the mat, then slept. The dog ran far away. A cat barked? The dogs sat on a mat, "
        "then the cat ran away.")
LONG_QAS = [
    {"id": "l1", "question": "Where did the cat sit?", "answers": [{"text": "on the mat", "answer_start": 12}]},
    {"id": "l2", "question": "What did the dogs do?", "answers": [{"text": "sat on a mat", "answer_start": 81}]},
    {"id": "l3", "question": "Who ran far away?", "answers": [{"text": "The dog", "answer_start": 36}]},
    {"id": "l4", "question": "Who did bark?", "answers": [], "is_impossible": True},
]


def _long_examples(tmp_path: Path, processor: Any, training: bool) -> list[Any]:
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"data": [{"title": "Pets", "paragraphs": [{"context": LONG, "qas": LONG_QAS}]}]}))
    read = processor.get_train_examples if training else processor.get_dev_examples
    return list(read(str(tmp_path), filename="long.json"))


def _bert(tmp_path: Path) -> Any:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(PIECES) + "\n", encoding="utf-8")
    return transformers.BertTokenizer(str(vocab))


SETTINGS = {"max_seq_length": 24, "doc_stride": 8, "max_query_length": 6}


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_the_document_is_cut_into_4xs_spans(tmp_path: Path, training: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = _bert(tmp_path)
    examples = _long_examples(tmp_path, squad.SquadV2Processor(), training)
    features, dataset = squad.squad_convert_examples_to_features(
        examples, tokenizer, is_training=training, return_dataset="pt", **SETTINGS)
    doc = [p for w in examples[0].doc_tokens for p in tokenizer.tokenize(w)]
    spans = [f for f in features if f.example_index == 0]
    assert len(spans) == 4 and len(doc) == 35  # spans of up to 16 document tokens, 8 apart
    for f in features:
        query = tokenizer.encode(examples[f.example_index].question_text, add_special_tokens=False)[:6]
        assert f.input_ids[:len(query) + 2] == [tokenizer.cls_token_id, *query, tokenizer.sep_token_id]
        assert len(f.input_ids) == len(f.attention_mask) == len(f.p_mask) == 24
        assert f.tokens == tokenizer.convert_ids_to_tokens(f.input_ids[:sum(f.attention_mask)])
        for at, word in f.token_to_orig_map.items():  # each document token maps back to its word
            assert f.tokens[at].lstrip("#") in examples[f.example_index].doc_tokens[word].lower()
        assert [i for i, m in enumerate(f.p_mask) if m == 0] == [0, *sorted(f.token_to_orig_map)]
    offset = len(tokenizer.encode(examples[0].question_text, add_special_tokens=False)[:6]) + 2
    for position in range(len(doc)):  # each document token has its most context in exactly one span
        assert sum(f.token_is_max_context.get(offset + position - 8 * k, False) for k, f in enumerate(spans)
                   if 0 <= position - 8 * k < f.paragraph_len) == 1
    assert [f.unique_id for f in features] == list(range(1000000000, 1000000000 + len(features)))
    in_workers = squad.squad_convert_examples_to_features(examples, tokenizer, is_training=training, threads=2,
                                                          tqdm_enabled=False, **SETTINGS)
    assert [_fields(f) for f in in_workers] == [_fields(f) for f in features]  # 4.x's worker processes: the same
    assert len(dataset) == len(features) and len(dataset[0]) == (8 if training else 6)
    if training:
        for f in features:
            answer = examples[f.example_index].answer_text
            if f.is_impossible:
                assert f.start_position == f.end_position == 0  # cls: not in this span, or none at all
            else:
                found = tokenizer.convert_tokens_to_string(f.tokens[f.start_position:f.end_position + 1])
                assert found == answer.lower()
    if HAS_STOCK:
        # 4.x's np.where(list == id) is a 0-d where, which NumPy 2 refuses (NumPy 1 found nothing and
        # went on): the reference runs with NumPy 1's answer for it, and nothing else changed
        monkeypatch.setattr(STOCK, "np", _NumPy1Where())
        stock = STOCK.squad_convert_examples_to_features(examples, tokenizer, is_training=training, threads=1,
                                                         tqdm_enabled=False, **SETTINGS)
        assert [_fields(f) for f in features] == [_fields(f) for f in stock]


class _NumPy1Where:
    """numpy, whose ``where`` of a 0-d condition answers as NumPy 1 did (nothing found)."""

    def __getattr__(self, name: str) -> Any:
        import numpy

        return getattr(numpy, name)

    def where(self, condition: Any, *args: Any) -> Any:
        import numpy

        return numpy.where(numpy.atleast_1d(condition), *args)


def test_the_answers_are_decoded_as_4x_decoded_them(tmp_path: Path) -> None:
    tokenizer = _bert(tmp_path)
    examples = _long_examples(tmp_path, squad.SquadV2Processor(), training=False)
    features = squad.squad_convert_examples_to_features(examples, tokenizer, is_training=False, **SETTINGS)
    rng = random.Random(1)
    results = [squad.SquadResult(f.unique_id, [rng.gauss(0, 1) for _ in range(24)], [rng.gauss(0, 1) for _ in range(24)])
               for f in features]
    # the first span of l1: its best span is made "on the mat" (a word with its comma: "mat,")
    first = features[0]
    start = next(i for i, t in enumerate(first.tokens) if t == "on" and i in first.token_to_orig_map)
    results[0].start_logits[start], results[0].end_logits[start + 2] = 9.0, 9.0
    outputs = {}
    for v2 in (False, True):
        files = [tmp_path / f"{name}-{v2}.json" for name in ("predictions", "nbest", "null_odds")]
        predictions = squad.compute_predictions_logits(examples, features, results, 5, 10, True, *map(str, files),
                                                       False, v2, 0.0, tokenizer)
        outputs[v2] = (dict(predictions), *(json.loads(f.read_text()) if f.exists() else None for f in files))
    assert outputs[False][0]["l1"] == "on the mat"  # the original words: "mat," without its comma
    assert set(outputs[False][0]) == {"l1", "l2", "l3", "l4"} and outputs[False][3] is None
    assert all(abs(sum(e["probability"] for e in nbest) - 1) < 1e-9 for nbest in outputs[True][2].values())
    assert set(outputs[True][3]) == {"l1", "l2", "l3", "l4"}  # the no-answer score differences
    assert squad.get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
    assert squad.get_final_text("nowhere", "Steve Smith's", True) == "Steve Smith's"
    if HAS_STOCK:
        for v2 in (False, True):
            files = [tmp_path / f"stock-{name}-{v2}.json" for name in ("predictions", "nbest", "null_odds")]
            theirs = STOCK_METRICS.compute_predictions_logits(examples, features, results, 5, 10, True,
                                                              *map(str, files), False, v2, 0.0, tokenizer)
            assert (dict(theirs), *(json.loads(f.read_text()) if f.exists() else None for f in files)) == outputs[v2]


def test_xlnets_beam_answers_are_decoded_as_4x_decoded_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # XLNet's layout (the document first: a tokenizer that pads on the left), and its beam-search
    # head's results: the top starts, for each the top ends, and the no-answer logit
    tokenizer = _bert(tmp_path)
    tokenizer.padding_side = "left"
    examples = _long_examples(tmp_path, squad.SquadV2Processor(), training=False)
    features = squad.squad_convert_examples_to_features(examples, tokenizer, is_training=False, **SETTINGS)
    if HAS_STOCK:  # the document-first spans, as 4.x cut them
        monkeypatch.setattr(STOCK, "np", _NumPy1Where())
        stock = STOCK.squad_convert_examples_to_features(examples, tokenizer, is_training=False, threads=1,
                                                         tqdm_enabled=False, **SETTINGS)
        assert [_fields(f) for f in features] == [_fields(f) for f in stock]
    rng = random.Random(2)
    top_start, top_end = 3, 4
    results = []
    for f in features:
        starts = sorted(rng.sample(range(24), top_start), key=lambda _: rng.random())
        ends = [rng.randrange(24) for _ in range(top_start * top_end)]
        results.append(squad.SquadResult(f.unique_id, sorted((rng.gauss(-2, 1) for _ in starts), reverse=True),
                                         [rng.gauss(-2, 1) for _ in ends], start_top_index=starts,
                                         end_top_index=ends, cls_logits=rng.gauss(0, 1)))
    first = features[0]  # its best beam is made "on the mat": a start and its first end
    on = next(i for i, t in enumerate(first.tokens) if t == "on" and first.token_is_max_context.get(i, False))
    results[0].start_top_index[0], results[0].end_top_index[0] = on, on + 2
    results[0].start_logits[0], results[0].end_logits[0] = 0.0, 0.0
    outputs = {}
    for v2 in (False, True):
        files = [tmp_path / f"{name}-{v2}.json" for name in ("predictions", "nbest", "null_odds")]
        predictions = squad.compute_predictions_log_probs(examples, features, results, 5, 10, *map(str, files),
                                                          top_start, top_end, v2, tokenizer, False)
        outputs[v2] = (dict(predictions), *(json.loads(f.read_text()) if f.exists() else None for f in files))
    # 4.x's document-first indexes assume XLNet's trailing [CLS]; BERT's leads, so the pieces
    # "on the mat" name the words one piece on, "the mat,", which do not hold them: those words
    assert outputs[True][0]["l1"] == "the mat,"
    assert outputs[False][:3] == outputs[True][:3] and outputs[False][3] is None
    assert all(abs(sum(e["probability"] for e in nbest) - 1) < 1e-9 for nbest in outputs[True][2].values())
    assert all(set(e) == {"text", "probability", "start_log_prob", "end_log_prob"}
               for nbest in outputs[True][2].values() for e in nbest)
    by_example: dict[int, list[float]] = {}
    for f, r in zip(features, results):
        by_example.setdefault(f.example_index, []).append(r.cls_logits)
    assert outputs[True][3] == {e.qas_id: min(by_example[i]) for i, e in enumerate(examples)}  # the lowest no-answer
    if HAS_STOCK:
        for v2 in (False, True):
            files = [tmp_path / f"stock-{name}-{v2}.json" for name in ("predictions", "nbest", "null_odds")]
            theirs = STOCK_METRICS.compute_predictions_log_probs(examples, features, results, 5, 10, *map(str, files),
                                                                 top_start, top_end, v2, tokenizer, False)
            assert (dict(theirs), *(json.loads(f.read_text()) if f.exists() else None for f in files)) == outputs[v2]


# ---------------------------------------------------------------------- SquadDataset
def _squad_args(data_dir: Path, **settings: Any) -> Any:
    return squad.SquadDataTrainingArguments(data_dir=str(data_dir), max_seq_length=24, doc_stride=8,
                                            max_query_length=6, **settings)


@pytest.mark.parametrize("mode", ["train", "dev"])
def test_squad_dataset_gives_each_model_its_inputs_and_never_loads_4xs_cache(
        tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = _bert(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        (data / name).write_text(json.dumps({"data": [{"title": "Pets", "paragraphs": [
            {"context": LONG, "qas": LONG_QAS}]}]}), encoding="utf-8")
    stale = data / f"cached_{mode}_BertTokenizer_24_v2"  # 4.x's torch.save cache: a pickle
    planted = plant(stale, tmp_path / "marker")
    training = mode == "train"
    examples = _long_examples(data, squad.SquadV2Processor(), training)  # what the dataset must have built
    (data / "long.json").unlink()
    expected = squad.squad_convert_examples_to_features(examples, tokenizer, is_training=training, tqdm_enabled=False,
                                                        **SETTINGS)
    datasets = {}
    for model_type in ("bert", "roberta", "xlnet"):
        args = _squad_args(data, model_type=model_type, version_2_with_negative=True)
        datasets[model_type] = squad.SquadDataset(args, tokenizer, mode=mode, is_language_sensitive=True)
    dataset = datasets["bert"]
    assert [_fields(f) for f in dataset.features] == [_fields(f) for f in expected]
    assert [e.qas_id for e in dataset.examples] == ["l1", "l2", "l3", "l4"] and len(dataset) == len(expected)
    assert all(torch.equal(a, b) for a, b in zip(dataset.dataset.tensors,
                                                 squad.features_dataset(expected, training).tensors))
    answer = {"start_positions", "end_positions"} if training else set()
    assert set(dataset[0]) == {"input_ids", "attention_mask", "token_type_ids", *answer}
    assert set(datasets["roberta"][0]) == {"input_ids", "attention_mask", *answer}
    xlnet = datasets["xlnet"][1]
    assert set(xlnet) == {"input_ids", "attention_mask", "token_type_ids", "cls_index", "p_mask", "is_impossible",
                          "langs", *answer}
    assert xlnet["p_mask"].dtype == torch.float and xlnet["langs"].tolist() == [0] * 24
    if training:
        assert dataset[1]["start_positions"].item() == expected[1].start_position
    assert not (tmp_path / "marker").exists() and stale.read_bytes() == planted  # never loaded, left alone
    cache = data / (stale.name + ".shardcompat.json")
    cached = json.loads(cache.read_text())
    cached["value"][0]["input_ids"][1] = 0  # a cache built for these inputs is what the next one reads
    cache.write_text(json.dumps(cached))
    assert squad.SquadDataset(_squad_args(data, version_2_with_negative=True), tokenizer, mode=mode)[0][
        "input_ids"][1].item() == 0
    rebuilt = squad.SquadDataset(_squad_args(data, version_2_with_negative=True, overwrite_cache=True), tokenizer,
                                 mode=mode)
    assert [_fields(f) for f in rebuilt.features] == [_fields(f) for f in expected]
    with pytest.raises(KeyError, match="'test' is not a split name: one of train, dev"):
        squad.SquadDataset(_squad_args(data), tokenizer, mode="test")
    if HAS_STOCK:
        stock = importlib.import_module("transformers.data.datasets.squad")
        monkeypatch.setattr(STOCK, "np", _NumPy1Where())  # see test_the_document_is_cut_into_4xs_spans
        for model_type, ours in datasets.items():
            args = stock.SquadDataTrainingArguments(data_dir=str(data), max_seq_length=24, doc_stride=8,
                                                    max_query_length=6, model_type=model_type,
                                                    version_2_with_negative=True, overwrite_cache=True)
            theirs = stock.SquadDataset(args, tokenizer, mode=mode, is_language_sensitive=True,
                                        cache_dir=str(tmp_path))
            assert [_fields(f) for f in ours.features] == [_fields(f) for f in theirs.features]
            for i in range(len(theirs)):
                assert ours[i].keys() == theirs[i].keys()
                assert all(torch.equal(ours[i][k], theirs[i][k]) and ours[i][k].dtype == theirs[i][k].dtype
                           for k in ours[i])
