"""4.30's language-modelling datasets (``TextDataset``, ``LineByLineTextDataset``,
``LineByLineWithRefDataset``), which 5.0 removed: the layer serves shardcompat's own, which must
give the blocks and lines 4.x gave, special tokens included.  5.x's tokenizers lost
``build_inputs_with_special_tokens``; the template read from their backend must place the special
tokens as that method did, which 4.34.1's fast tokenizers (which have both) check, and the
datasets are compared with 4.34.1's own there."""

from __future__ import annotations

import importlib
import json
import multiprocessing
import random
from pathlib import Path
from typing import Any

import pytest

from ._untrusted import plant

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
tokenizers = pytest.importorskip("tokenizers")

import torch  # noqa: E402

from shardcompat.transformers import _special_tokens  # noqa: E402
from shardcompat.transformers import text_datasets as td  # noqa: E402

HAS_STOCK = importlib.util.find_spec("transformers.data.datasets") is not None
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "我", "喜", "欢"]
TEXT = "the cat sat on a mat\n\n  \nthe dog ran far away\n我 喜 欢 the mat\na cat\n"


def _bert(tmp_path: Path) -> Any:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
    return transformers.BertTokenizer(str(vocab))


def _roberta_like(tmp_path: Path) -> Any:
    """A word-level tokenizer with RoBERTa's template (<s> A </s></s> B </s>), saved and loaded
    as users load theirs."""
    vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "<s>", "</s>", *WORDS])}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 2), ("</s>", 3)])
    transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>",
                                         bos_token="<s>", eos_token="</s>").save_pretrained(tmp_path / "rob")
    return transformers.AutoTokenizer.from_pretrained(tmp_path / "rob")


def test_the_special_tokens_go_where_4xs_build_inputs_put_them(tmp_path: Path) -> None:
    bert, rob = _bert(tmp_path), _roberta_like(tmp_path)
    cls, sep = bert.cls_token_id, bert.sep_token_id
    assert td.with_special_tokens(bert, [7, 8]) == [cls, 7, 8, sep]
    assert td.with_special_tokens(bert, [7], [9, 10]) == [cls, 7, sep, 9, 10, sep]
    # 4.x's generic PreTrainedTokenizerFast added none; a model's class (and every 5.x tokenizer) its template
    bare = _without_builder(rob)
    assert td.with_special_tokens(bare, [7], [9, 10]) == [2, 7, 3, 3, 9, 10, 3]
    assert td.with_special_tokens(bare, []) == [2, 3]
    fast = transformers.BertTokenizerFast(str(tmp_path / "vocab.txt"))
    if "build_inputs_with_special_tokens" in vars(type(fast)):  # 4.x: the template read from the backend agrees
        for first, second in (([7], [9, 10]), ([7, 8], None), ([], None)):
            assert _special_tokens.build(_without_builder(fast), first, second) == (
                fast.build_inputs_with_special_tokens(first, second),
                fast.create_token_type_ids_from_sequences(first, second))


def _without_builder(tokenizer: Any) -> Any:
    """The tokenizer as 5.x has it: no build_inputs_with_special_tokens, the backend's template only."""

    class Bare:
        backend_tokenizer = tokenizer.backend_tokenizer

    return Bare()


def test_text_dataset_blocks_cache_as_json_and_never_unpickle_a_4x_cache(tmp_path: Path) -> None:
    tokenizer = _bert(tmp_path)
    path = tmp_path / "train.txt"
    path.write_text(TEXT, encoding="utf-8")
    marker = tmp_path / "marker"
    stale = tmp_path / f"cached_lm_{type(tokenizer).__name__}_4_train.txt"  # 4.x's name for this very cache
    planted = plant(stale, marker)
    dataset = td.TextDataset(tokenizer, str(path), block_size=6)
    ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(TEXT))
    assert len(ids) in (18, 19) and len(dataset) == 4  # blocks of 4 words, the short last one dropped
    assert [dataset[i].tolist() for i in range(4)] == [[2, *ids[i:i + 4], 3] for i in range(0, 16, 4)]
    assert dataset[0].dtype == torch.long and not marker.exists() and stale.read_bytes() == planted
    cache = tmp_path / (stale.name + ".shardcompat.json")
    assert json.loads(cache.read_text())["value"] == dataset.examples
    cache.write_text(cache.read_text().replace("[2, ", "[2, 0, ", 1))  # a cache built for these inputs is used
    assert td.TextDataset(tokenizer, str(path), block_size=6).examples[0][:2] == [2, 0]
    assert td.TextDataset(tokenizer, str(path), block_size=6, overwrite_cache=True).examples == dataset.examples
    path.write_text(TEXT + "the end\n", encoding="utf-8")  # another file: built again, not read from the cache
    assert len(td.TextDataset(tokenizer, str(path), block_size=6).examples) == 5
    with pytest.raises(ValueError, match=r"Input file path .*missing\.txt not found"):
        td.TextDataset(tokenizer, str(tmp_path / "missing.txt"), block_size=6)
    if HAS_STOCK:
        stock = importlib.import_module("transformers.data.datasets.language_modeling")
        theirs = stock.TextDataset(tokenizer, str(path), block_size=6, overwrite_cache=True)
        assert theirs.examples == td.TextDataset(tokenizer, str(path), block_size=6).examples


def test_line_by_line_datasets_encode_each_line_and_its_references(tmp_path: Path) -> None:
    tokenizer = _bert(tmp_path)
    path, refs = tmp_path / "train.txt", tmp_path / "refs.txt"
    path.write_text(TEXT, encoding="utf-8")
    lines = ["the cat sat on a mat", "the dog ran far away", "我 喜 欢 the mat", "a cat"]
    refs.write_text("[]\n[]\n[3]\n[]\n", encoding="utf-8")
    dataset = td.LineByLineTextDataset(tokenizer, str(path), block_size=5)
    assert [e["input_ids"].tolist() for e in dataset.examples] == [
        tokenizer(line, truncation=True, max_length=5)["input_ids"] for line in lines]
    with_refs = td.LineByLineWithRefDataset(tokenizer, str(path), block_size=5, ref_path=str(refs))
    assert [e["chinese_ref"].tolist() for e in with_refs.examples] == [[], [], [3], []]
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(with_refs.examples, dataset.examples))
    refs.write_text("[]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="Length of Input file should be equal to Ref file"):
        td.LineByLineWithRefDataset(tokenizer, str(path), block_size=5, ref_path=str(refs))
    if HAS_STOCK:
        stock = importlib.import_module("transformers.data.datasets.language_modeling")
        theirs = stock.LineByLineTextDataset(tokenizer, str(path), block_size=5)
        assert [e["input_ids"].tolist() for e in theirs.examples] == [e["input_ids"].tolist() for e in dataset]


# ---------------------------------------------------------------------- sentence pairs
SENTENCES = [["the cat sat on a mat", "the dog ran far away", "a cat ran", "the mat", "我 喜 欢 the dog"],
             ["a dog sat", "the cat ran far away on a mat", "far away"],
             ["the end"],
             ["a mat", "a cat sat on the dog", "the dog ran", "away", "the cat", "a cat sat far away"]]


def _pair(tokenizer: Any, example: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The two sentences of a [CLS] A [SEP] B [SEP] example, checked against its token types."""
    ids, types = example["input_ids"].tolist(), example["token_type_ids"].tolist()
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id and ids.count(tokenizer.sep_token_id) == 2
    middle = ids.index(tokenizer.sep_token_id)
    assert types == [0] * (middle + 1) + [1] * (len(ids) - middle - 1)
    return ids[1:middle], ids[middle + 1:-1]


def _tensors_equal(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    return len(ours) == len(theirs) and all(
        a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a) for a, b in zip(ours, theirs))


def test_next_sentence_pairs_are_4xs_draws_and_every_rank_reads_the_first_ranks(tmp_path: Path) -> None:
    tokenizer = _bert(tmp_path)
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join("\n".join(doc) for doc in SENTENCES) + "\n", encoding="utf-8")
    ids = [[tokenizer.convert_tokens_to_ids(tokenizer.tokenize(s)) for s in doc] for doc in SENTENCES]
    stale = tmp_path / "cached_nsp_BertTokenizer_12_corpus.txt"  # 4.x's name for this very cache
    planted = plant(stale, tmp_path / "marker")
    labels = set()
    for seed in range(6):
        random.seed(seed)
        dataset = td.TextDatasetForNextSentencePrediction(tokenizer, str(path), block_size=12, overwrite_cache=True)
        after = random.getstate()
        assert dataset.documents == ids
        for example in dataset.examples:
            first, second = _pair(tokenizer, example)
            label = int(example["next_sentence_label"])
            labels.add(label)
            home = next(d for d, doc in enumerate(ids) if _runs(doc, first))  # A: sentences in a row of one document
            if label == 0:  # B: the sentences right after A, in A's document
                assert _runs(ids[home], first + second)
            else:  # B: a run of sentences of another document (the same one only after 10 tries)
                assert any(_runs(doc, second, whole_end=False) for doc in ids)
        if HAS_STOCK:
            stock = importlib.import_module("transformers.data.datasets.language_modeling")
            elsewhere = tmp_path / "stock" / str(seed)
            elsewhere.mkdir(parents=True)
            (elsewhere / path.name).write_bytes(path.read_bytes())
            random.seed(seed)
            theirs = stock.TextDatasetForNextSentencePrediction(tokenizer, str(elsewhere / path.name), block_size=12,
                                                                overwrite_cache=True)
            assert _tensors_equal(dataset.examples, theirs.examples) and random.getstate() == after
    assert labels == {0, 1}
    assert not (tmp_path / "marker").exists() and stale.read_bytes() == planted  # 4.x's pickle: never loaded
    random.seed(0)
    state = random.getstate()
    cached = td.TextDatasetForNextSentencePrediction(tokenizer, str(path), block_size=12)
    assert _tensors_equal(cached.examples, dataset.examples) and random.getstate() == state  # read: no draws
    # ranks seeded apart still get one set of pairs: the first builds under the lock, the others read it
    path.write_text(path.read_text() + "a dog\n", encoding="utf-8")
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(2), context.Queue()
    ranks = [context.Process(target=_nsp_in_a_process, args=(str(tmp_path), seed, start, results)) for seed in (1, 2)]
    for rank in ranks:
        rank.start()
    built = [results.get(timeout=120) for _ in ranks]
    for rank in ranks:
        rank.join(timeout=60)
    assert built[0] == built[1] and len(built[0]) > 0


def _nsp_in_a_process(folder: str, seed: int, start: Any, results: Any) -> None:
    """A rank: seeded apart from the other, it builds the dataset when both are ready."""
    random.seed(seed)
    tokenizer = transformers.BertTokenizer(str(Path(folder) / "vocab.txt"))
    start.wait(timeout=120)
    dataset = td.TextDatasetForNextSentencePrediction(tokenizer, str(Path(folder) / "corpus.txt"), block_size=12)
    results.put([[e["input_ids"].tolist(), e["next_sentence_label"].tolist()] for e in dataset.examples])


def _runs(document: list[list[int]], tokens: list[int], whole_end: bool = True) -> bool:
    """Whether ``tokens`` are sentences of ``document`` in a row (the last one cut short unless ``whole_end``)."""
    for start in range(len(document)):
        joined: list[int] = []
        for sentence in document[start:]:
            joined += sentence
            if joined == tokens or (not whole_end and joined[:len(tokens)] == tokens):
                return True
            if len(joined) >= len(tokens):
                break
    return False


def _within(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[i:i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


def test_sentence_order_pairs_are_4xs_draws(tmp_path: Path) -> None:
    tokenizer = _bert(tmp_path)
    folder = tmp_path / "wiki"
    folder.mkdir()
    for n, docs in enumerate((SENTENCES[:2], SENTENCES[2:])):  # WikiExtractor's files: a title line, then sentences
        (folder / f"wiki_{n}").write_text("".join(
            f'<doc id="{n}{d}" url="?curid={d}" title="T{d}">\nT{d}\n' + "\n".join(doc) + "\n\n</doc>\n"
            for d, doc in enumerate(docs)), encoding="utf-8")
    ids = [[tokenizer.convert_tokens_to_ids(tokenizer.tokenize(s)) for s in doc] for doc in SENTENCES]
    joined = [t for doc in ids for sentence in doc for t in sentence]
    orders = set()
    for seed in range(6):
        random.seed(seed)
        dataset = td.LineByLineWithSOPTextDataset(tokenizer, str(folder), block_size=14)
        after = random.getstate()
        for example in dataset.examples:
            first, second = _pair(tokenizer, example)
            assert len(example["input_ids"]) <= 14
            in_order = int(example["sentence_order_label"]) == 0
            orders.add(in_order)
            a, b = (first, second) if in_order else (second, first)
            # truncation takes tokens from either end of the longer: A still runs into B, or (4.x's way
            # with a lone sentence) both are parts of that one sentence
            assert _within(joined, a + b) or any(_within(s, a) and _within(s, b) for doc in ids for s in doc)
        if HAS_STOCK:
            stock = importlib.import_module("transformers.data.datasets.language_modeling")
            random.seed(seed)
            theirs = stock.LineByLineWithSOPTextDataset(tokenizer, str(folder), block_size=14)
            assert _tensors_equal(dataset.examples, theirs.examples) and random.getstate() == after
    assert orders == {True, False}
    (folder / "sub").mkdir()
    with pytest.raises(ValueError, match=r"sub is not a file"):
        td.LineByLineWithSOPTextDataset(tokenizer, str(folder), block_size=14)
    with pytest.raises(ValueError, match=r"wiki_0 is not a directory"):
        td.LineByLineWithSOPTextDataset(tokenizer, str(folder / "wiki_0"), block_size=14)
