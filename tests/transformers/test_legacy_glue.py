"""4.30's GLUE data layer (``transformers.data``: processors, features, metrics, ``GlueDataset``),
which 5.0 removed: the layer serves shardcompat's own, which must read GLUE's files, build the
features and score as 4.x did.  The files here have GLUE's own layouts (named columns, CoLA's
headerless train and dev files, QQP's short rows, MNLI's matched and mismatched sets), and what
each example must hold is written by column name.  Where the installed Transformers still ships
the layer (4.34.1: the ``transformers(4.34.1)`` CI session) ours is also compared with it, split
for split and feature for feature."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from ._untrusted import plant

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
np = pytest.importorskip("numpy")
pytest.importorskip("sklearn", reason="the GLUE metrics score with scikit-learn, as in 4.x (the test extra has it)")

from shardcompat.transformers import glue  # noqa: E402

STOCK = vars(transformers).get("glue_processors") or (
    importlib.import_module("transformers.data.processors.glue").glue_processors
    if importlib.util.find_spec("transformers.data.processors") else None)
NEEDS_STOCK = pytest.mark.skipif(STOCK is None, reason="this Transformers no longer ships the GLUE layer to compare "
                                 "with; the transformers(4.34.1) session compares them")
WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "is", "not", "big", "small", "run", "##ning", '"', "?", "it"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """One task's GLUE files, by column name: ``header`` (train/dev), ``test_header``, the
    columns each example reads and the labels written."""

    files: tuple[str, str, str]
    header: tuple[str, ...]
    test_header: tuple[str, ...]
    guid: str | None  # the id column; None: the row's number
    a: str
    b: str | None
    label: str
    labels: tuple[str, ...]
    dev_header: tuple[str, ...] | None = None
    headerless: bool = False  # CoLA's train and dev files


_TSV = ("train.tsv", "dev.tsv", "test.tsv")
_PAIR = ("index", "sentence1", "sentence2", "label")
_MNLI = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
         "sentence1_parse", "sentence2_parse", "sentence1", "sentence2")
LAYOUTS = {
    "cola": Layout(_TSV, ("source", "label", "mark", "sentence"), ("index", "sentence"), None, "sentence", None,
                   "label", ("0", "1"), headerless=True),
    "sst-2": Layout(_TSV, ("sentence", "label"), ("index", "sentence"), None, "sentence", None, "label", ("0", "1")),
    "mrpc": Layout(_TSV, ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
                   ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"), None, "#1 String", "#2 String",
                   "Quality", ("0", "1")),
    "sts-b": Layout(_TSV, ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                           "sentence2", "score"),
                    ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                     "sentence2"), "index", "sentence1", "sentence2", "score", ("0.5", "3.25", "5.000")),
    "qqp": Layout(_TSV, ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
                  ("id", "question1", "question2"), "id", "question1", "question2", "is_duplicate", ("0", "1")),
    "mnli": Layout(("train.tsv", "dev_matched.tsv", "test_matched.tsv"), (*_MNLI, "label1", "gold_label"), _MNLI,
                   "index", "sentence1", "sentence2", "gold_label", ("contradiction", "entailment", "neutral"),
                   dev_header=(*_MNLI, "label1", "label2", "label3", "label4", "label5", "gold_label")),
    "mnli-mm": Layout(("train.tsv", "dev_mismatched.tsv", "test_mismatched.tsv"), (*_MNLI, "label1", "gold_label"),
                      _MNLI, "index", "sentence1", "sentence2", "gold_label", ("contradiction", "entailment",
                                                                              "neutral"),
                      dev_header=(*_MNLI, "label1", "label2", "label3", "label4", "label5", "gold_label")),
    "qnli": Layout(_TSV, ("index", "question", "sentence", "label"), ("index", "question", "sentence"), "index",
                   "question", "sentence", "label", ("entailment", "not_entailment")),
    "rte": Layout(_TSV, _PAIR, _PAIR[:3], "index", "sentence1", "sentence2", "label", ("entailment", "not_entailment")),
    "wnli": Layout(_TSV, _PAIR, _PAIR[:3], "index", "sentence1", "sentence2", "label", ("0", "1")),
}
SETS = {"mnli": ("train", "dev_matched", "test_matched"), "mnli-mm": ("train", "dev_mismatched", "test_mismatched")}


def _cell(task: str, split: int, row: int, column: str, layout: Layout) -> str:
    if column == layout.label:
        return layout.labels[(row + split) % len(layout.labels)]
    if column in (layout.a, layout.b):  # texts the tokenizer knows, a quote kept as a character (GLUE's TSVs)
        words = WORDS[(row * 3 + split + (column == layout.b)) % 12:][:4 + row % 3]
        return " ".join(words) + (' "' if row == 1 else "")
    return f"{column[:3]}{split}{row}"


def _write(root: Path, task: str, rows: int = 5) -> list[list[dict[str, str]]]:
    """The task's three files under ``root``, and each file's rows by column name."""
    layout = LAYOUTS[task]
    out = []
    for split, name in enumerate(layout.files):
        header = layout.test_header if split == 2 else (layout.dev_header if split == 1 and layout.dev_header
                                                         else layout.header)
        data = [{c: _cell(task, split, r, c, layout) for c in header} for r in range(rows)]
        lines = [] if layout.headerless and split < 2 else ["\t".join(header)]
        lines += ["\t".join(d[c] for c in header) for d in data]
        if task == "qqp" and split < 2:
            lines.append("qqp-short\tonly two")  # the real QQP files have such rows; 4.x skipped them
        text = "\n".join(lines) + "\n"
        (root / name).write_text(("\ufeff" if split == 0 else "") + text, encoding="utf-8")  # a BOM, as some have
        out.append(data)
    return out


def _expected(task: str, split: int, data: list[dict[str, str]]) -> list[tuple[Any, ...]]:
    layout, test = LAYOUTS[task], split == 2
    set_type = SETS.get(task, ("train", "dev", "test"))[split]
    first = 0 if (layout.headerless and not test) or (task == "cola" and test) else 1
    return [(f"{set_type}-{d[layout.guid] if layout.guid else i + first}", d[layout.a],
             d[layout.b] if layout.b else None, None if test else d[layout.label]) for i, d in enumerate(data)]


def _read(processors: Any, task: str, root: Path) -> list[list[tuple[Any, ...]]]:
    p = processors[task]()
    return [[dataclasses.astuple(e) for e in read(str(root))]
            for read in (p.get_train_examples, p.get_dev_examples, p.get_test_examples)]


def _tokenizer(tmp_path: Path) -> Any:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
    # BertTokenizer: 5.x's is tokenizers-backed; 4.x's slow one is what its GLUE layer could encode single
    # sentences with (its fast tokenizers refused the (text, None) pairs it built)
    return transformers.BertTokenizer(str(vocab))


@pytest.mark.parametrize("task", sorted(LAYOUTS))
def test_each_task_reads_its_glue_files_as_4x_did(tmp_path: Path, task: str) -> None:
    data = _write(tmp_path, task)
    ours = _read(glue.glue_processors, task, tmp_path)
    assert ours == [_expected(task, split, d) for split, d in enumerate(data)]
    assert glue.glue_processors[task]().get_labels() == (list(LAYOUTS[task].labels) if task != "sts-b" else [None])
    assert glue.glue_tasks_num_labels.get(task.replace("-mm", ""), 0) == len(glue.glue_processors[task]().get_labels())
    if STOCK is not None:
        assert ours == _read(STOCK, task, tmp_path)


def test_a_short_row_fails_where_4x_failed_and_is_skipped_where_it_skipped(tmp_path: Path) -> None:
    _write(tmp_path, "rte")
    with (tmp_path / "dev.tsv").open("a") as f:
        f.write("9\tonly one\n")
    with pytest.raises(IndexError):
        glue.RteProcessor().get_dev_examples(str(tmp_path))


@pytest.mark.parametrize("task", ["mrpc", "sts-b", "cola"])
def test_features_are_the_tokenized_pairs_with_label_indices(tmp_path: Path, task: str) -> None:
    _write(tmp_path, task)
    tokenizer = _tokenizer(tmp_path)
    examples = glue.glue_processors[task]().get_dev_examples(str(tmp_path))
    features = glue.glue_convert_examples_to_features(examples, tokenizer, max_length=12, task=task)
    labels = glue.glue_processors[task]().get_labels()
    for e, f in zip(examples, features, strict=True):
        encoded = tokenizer(e.text_a, e.text_b, max_length=12, padding="max_length", truncation=True)
        assert (f.input_ids, f.attention_mask, f.token_type_ids) == (
            encoded["input_ids"], encoded["attention_mask"], encoded["token_type_ids"])
        assert f.label == (float(e.label) if task == "sts-b" else labels.index(e.label))
    assert len({len(f.input_ids) for f in features}) == 1 and any(0 in f.attention_mask for f in features)
    if STOCK is not None:
        stock = importlib.import_module("transformers.data.processors.glue").glue_convert_examples_to_features
        assert [dataclasses.astuple(f) for f in features] == [
            dataclasses.astuple(f) for f in stock(examples, tokenizer, max_length=12, task=task)]
    with pytest.raises(TypeError, match="PyTorch only"):
        glue.glue_convert_examples_to_features(iter(examples), tokenizer, task=task)


def test_the_scores_are_4xs(tmp_path: Path) -> None:
    labels = np.array([1, 1, 1, 0, 0, 0, 1, 0])
    preds = np.array([1, 1, 0, 0, 0, 1, 1, 0])  # tp 3, fn 1, fp 1, tn 3
    assert glue.glue_compute_metrics("sst-2", preds, labels) == {"acc": 0.75}
    scores = glue.glue_compute_metrics("mrpc", preds, labels)
    assert scores == pytest.approx({"acc": 0.75, "f1": 0.75, "acc_and_f1": 0.75})
    assert glue.glue_compute_metrics("cola", preds, labels)["mcc"] == pytest.approx((9 - 1) / 16)  # (tp.tn-fp.fn)/...
    assert glue.glue_compute_metrics("mnli-mm", preds, labels) == {"mnli-mm/acc": 0.75}
    x, y = np.array([0.1, 0.4, 0.2, 0.9, 0.7]), np.array([1.0, 2.5, 2.0, 4.0, 4.5])
    sts = glue.glue_compute_metrics("sts-b", x, y)
    ranks = [0, 2, 1, 4, 3], [0, 2, 1, 3, 4]
    assert sts["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert sts["spearmanr"] == pytest.approx(np.corrcoef(*ranks)[0, 1])
    assert sts["corr"] == pytest.approx((sts["pearson"] + sts["spearmanr"]) / 2)
    with pytest.raises(KeyError):
        glue.glue_compute_metrics("squad", preds, labels)
    with pytest.raises(ValueError, match="mismatched lengths 7 and 8"):
        glue.glue_compute_metrics("rte", preds[1:], labels)
    if STOCK is not None:
        stock = importlib.import_module("transformers.data.metrics").glue_compute_metrics
        for task in ("cola", "mrpc", "qqp", "mnli", "wnli"):
            assert glue.glue_compute_metrics(task, preds, labels) == stock(task, preds, labels)
        assert glue.glue_compute_metrics("sts-b", x, y) == stock("sts-b", x, y)


def test_glue_dataset_builds_caches_as_json_and_never_unpickles_a_4x_cache(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "mrpc")
    tokenizer = _tokenizer(tmp_path)
    args = glue.GlueDataTrainingArguments(task_name="MRPC", data_dir=str(tmp_path), max_seq_length=12)
    marker = tmp_path / "marker"
    stale = tmp_path / f"cached_dev_{type(tokenizer).__name__}_12_mrpc"  # 4.x's name for this very cache
    planted = plant(stale, marker)
    dataset = glue.GlueDataset(args, tokenizer, mode="dev")
    examples = glue.MrpcProcessor().get_dev_examples(str(tmp_path))
    assert dataset.features == glue.glue_convert_examples_to_features(examples, tokenizer, 12, task="mrpc")
    assert len(dataset) == 5 and dataset[0] == dataset.features[0] and dataset.get_labels() == ["0", "1"]
    assert not marker.exists() and stale.read_bytes() == planted  # left as it was
    assert (tmp_path / (stale.name + ".shardcompat.json")).is_file()

    def built(*a: Any, **k: Any) -> Any:
        raise AssertionError("built again")

    monkeypatch.setattr(glue, "glue_convert_examples_to_features", built)
    assert glue.GlueDataset(args, tokenizer, mode=glue.Split.dev).features == dataset.features  # from the cache
    other = transformers.BertTokenizer(str(tmp_path / "vocab.txt"), do_lower_case=False)
    other.add_tokens(["mat2"])  # another vocabulary: the cache is not this tokenizer's
    with pytest.raises(AssertionError, match="built again"):
        glue.GlueDataset(args, other, mode="dev")
    with pytest.raises(AssertionError, match="built again"):
        glue.GlueDataset(dataclasses.replace(args, overwrite_cache=True), tokenizer, mode="dev")
    with pytest.raises(KeyError, match="'valid' is not a split name: one of train, dev, test"):
        glue.GlueDataset(args, tokenizer, mode="valid")


def test_glue_dataset_trains_in_the_trainer_with_4xs_collation(tmp_path: Path) -> None:
    _write(tmp_path, "rte", rows=8)
    tokenizer = _tokenizer(tmp_path)
    args = glue.GlueDataTrainingArguments(task_name="rte", data_dir=str(tmp_path), max_seq_length=12)
    dataset = glue.GlueDataset(args, tokenizer, limit_length=6)
    batch = transformers.default_data_collator([dataset[i] for i in range(len(dataset))])
    assert len(dataset) == 6 and set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    assert batch["input_ids"].shape == (6, 12) and batch["labels"].tolist() == [
        ["entailment", "not_entailment"].index(e.label)
        for e in glue.RteProcessor().get_train_examples(str(tmp_path))[:6]]


def test_roberta_and_bart_tokenizers_get_mnli_labels_in_their_heads_order(tmp_path: Path) -> None:
    _write(tmp_path, "mnli")
    # only the class name decides, as in 4.x; a BERT tokenizer under RoBERTa's name stands in (no download here)
    roberta_named = type("RobertaTokenizerFast", (transformers.BertTokenizer,), {})(str(_vocab(tmp_path)))
    args = glue.GlueDataTrainingArguments(task_name="mnli", data_dir=str(tmp_path), max_seq_length=12)
    assert glue.GlueDataset(args, roberta_named, mode="dev").get_labels() == ["contradiction", "neutral", "entailment"]
    assert glue.GlueDataset(args, _tokenizer(tmp_path), mode="dev").get_labels() == [
        "contradiction", "entailment", "neutral"]


def _vocab(tmp_path: Path) -> Path:
    _tokenizer(tmp_path)
    return tmp_path / "vocab.txt"


def test_without_scikit_learn_the_scores_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """scikit-learn and SciPy are optional, as in 4.x: the processors and features work without
    them, and a score names what to install (imports of None fail, as a missing package does)."""
    for name in ("sklearn", "sklearn.metrics", "scipy", "scipy.stats"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"need scikit-learn and SciPy.*pip install scikit-learn scipy"):
        glue.glue_compute_metrics("mrpc", np.array([1]), np.array([1]))
    assert glue.glue_processors["mrpc"]().get_labels() == ["0", "1"]


def test_the_single_sentence_processor_reads_lists_and_files_into_padded_features(tmp_path: Path) -> None:
    tokenizer = _tokenizer(tmp_path)
    path = tmp_path / "reviews.tsv"
    path.write_text("id\tlabel\ttext\nr1\tpos\tthe cat is big\nr2\tneg\tit is not\nr3\tpos\ta dog sat on a mat\n",
                    encoding="utf-8")
    processor = glue.SingleSentenceClassificationProcessor
    from_file = processor.create_from_csv(str(path), split_name="train", column_label=1, column_text=2,
                                          skip_first_row=True)
    assert [(e.guid, e.text_a, e.label) for e in from_file] == [
        ("train-0", "the cat is big", "pos"), ("train-1", "it is not", "neg"), ("train-2", "a dog sat on a mat", "pos")]
    assert from_file.labels == ["pos", "neg"] and [e.guid for e in from_file[1:]] == ["train-1", "train-2"]
    from_file.add_examples_from_csv(str(path), column_label=1, column_text=2, column_id=0, skip_first_row=True)
    assert [e.guid for e in from_file.examples] == ["train-0", "train-1", "train-2", "r1", "r2", "r3"]
    from_lists = processor.create_from_examples([("the cat", "b"), ("a dog", "a"), ("it is", "b")])
    from_lists.add_examples(["a cat", "the mat"], labels=["c", "a"])
    assert from_lists.labels == ["b", "a", "c"] and len(from_lists) == 5 and from_lists[3].guid is None
    with pytest.raises(ValueError, match="Text and labels have mismatched lengths 2 and 1"):
        from_lists.add_examples(["a", "b"], labels=["x"])
    features = from_file.get_features(tokenizer, max_length=6)
    longest = max(len(tokenizer.encode(e.text_a)) for e in from_file.examples)
    assert longest == 8 and all(len(f.input_ids) == len(f.attention_mask) == 6 for f in features)  # cut at 6
    short = processor.create_from_examples([("it is", "neg"), ("the cat is big", "pos")]).get_features(
        tokenizer, pad_on_left=True)
    assert short[0].input_ids == [0, 0, *tokenizer.encode("it is")] and short[0].attention_mask == [0, 0, 1, 1, 1, 1]
    assert [f.label for f in short] == [0, 1]
    tensors = from_file.get_features(tokenizer, max_length=6, return_tensors="pt").tensors
    assert [t.shape for t in tensors] == [(6, 6), (6, 6), (6,)] and tensors[2].tolist() == [0, 1, 0, 0, 1, 0]
    regression = processor.create_from_examples([("the cat", "0.5")], mode="regression").get_features(tokenizer)
    assert regression[0].label == 0.5
    if STOCK is not None:  # 4.x's own, its labels' order (a set's) and its max_len (gone since 4.0) given as ours
        theirs = importlib.import_module("transformers.data.processors.utils").SingleSentenceClassificationProcessor
        stock = theirs.create_from_csv(str(path), split_name="train", column_label=1, column_text=2,
                                       skip_first_row=True)
        stock.add_examples_from_csv(str(path), column_label=1, column_text=2, column_id=0, skip_first_row=True)
        assert [dataclasses.astuple(e) for e in stock.examples] == [dataclasses.astuple(e) for e in from_file.examples]
        assert set(stock.labels) == set(from_file.labels)
        stock.labels = from_file.labels
        tokenizer.max_len = tokenizer.model_max_length
        for settings in ({"max_length": 6}, {"pad_on_left": True, "pad_token": 3, "mask_padding_with_zero": False}):
            assert [dataclasses.astuple(f) for f in stock.get_features(tokenizer, **settings)] == [
                dataclasses.astuple(f) for f in from_file.get_features(tokenizer, **settings)]
