"""4.30's language-modelling datasets (``TextDataset``, ``LineByLineTextDataset``,
``LineByLineWithRefDataset``), which 5.0 removed: the layer serves shardcompat's own, which must
give the blocks and lines 4.x gave, special tokens included.  5.x's tokenizers lost
``build_inputs_with_special_tokens``; the template read from their backend must place the special
tokens as that method did, which 4.34.1's fast tokenizers (which have both) check, and the
datasets are compared with 4.34.1's own there."""

from __future__ import annotations

import importlib
import json
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
