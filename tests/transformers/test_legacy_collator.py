"""4.30's ``DataCollatorForWholeWordMask`` (``run_mlm_wwm.py``), which 5.x removed: the layer serves
shardcompat's own, which must give the masks 4.x gave under the same seeds.  Where the installed
Transformers still ships the class (4.34.1: the ``transformers(4.34.1)`` CI session), the two are
compared batch for batch; on 5.x the served class is checked for what whole-word masking means."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

import torch  # noqa: E402

import shardcompat.transformers as sct  # noqa: E402
from shardcompat.transformers._legacy_collator import DataCollatorForWholeWordMask  # noqa: E402

STOCK = getattr(transformers, "DataCollatorForWholeWordMask", None)
WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "run", "##ning", "##s", "play", "##ed", "##er", "big", "small",
         "我", "喜", "欢", "你"]
TEXTS = ["the cat sat on the mat running", "a big dog played", "我 喜 欢 你 the cats",
         "small player runs on the mat " * 5]


def _tokenizer(tmp_path: Path, fast: bool = True) -> Any:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
    return (transformers.BertTokenizerFast if fast else transformers.BertTokenizer)(str(vocab))


def _examples(tokenizer: Any) -> list[dict[str, Any]]:
    examples = [dict(tokenizer(t)) for t in TEXTS]
    examples[2]["chinese_ref"] = [3]  # 欢 continues 喜 (run_mlm_wwm's reference file marks such pieces)
    return examples


def _batches(collator_class: Any, tokenizer: Any, n: int = 20, **kw: Any) -> list[dict[str, torch.Tensor]]:
    random.seed(3)
    torch.manual_seed(3)
    collator = collator_class(tokenizer=tokenizer, **kw)
    return [collator([dict(e) for e in _examples(tokenizer)]) for _ in range(n)]


@pytest.mark.skipif(STOCK is None, reason="this Transformers no longer ships the class to compare with; "
                    "the transformers(4.34.1) session compares them")
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "slow"])
@pytest.mark.parametrize("kw", [{}, {"mlm_probability": 0.3, "pad_to_multiple_of": 8}], ids=["default", "p30-pad8"])
def test_the_masks_equal_those_of_the_class_transformers_4x_shipped(tmp_path: Path, fast: bool,
                                                                      kw: dict[str, Any]) -> None:
    tokenizer = _tokenizer(tmp_path, fast)
    ours, stock = _batches(DataCollatorForWholeWordMask, tokenizer, **kw), _batches(STOCK, tokenizer, **kw)
    assert any(bool((b["labels"] != -100).any()) for b in stock)
    for a, b in zip(ours, stock):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _words(tokens: list[str], refs: set[int]) -> list[set[int]]:
    words: list[set[int]] = []
    for i, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]", "[PAD]"):
            continue
        if words and (token.startswith("##") or i in refs):
            words[-1].add(i)
        else:
            words.append({i})
    return words


@pytest.mark.skipif(STOCK is not None, reason="this Transformers ships the class itself: nothing is served")
def test_served_under_the_layer_it_masks_whole_words_and_the_chinese_references(tmp_path: Path) -> None:
    tokenizer = _tokenizer(tmp_path)
    with sct.dropins(), pytest.warns(FutureWarning, match="DataCollatorForWholeWordMask is Transformers 4.x API"):
        from transformers import DataCollatorForWholeWordMask as Served  # type: ignore[attr-defined]
    assert Served is DataCollatorForWholeWordMask
    examples, batches = _examples(tokenizer), _batches(Served, tokenizer, n=200)
    assert batches[0]["input_ids"].shape == (4, max(len(e["input_ids"]) for e in examples))  # padded to the longest
    replaced = kept = drawn = pieces = 0
    for batch in batches:
        for row, example in enumerate(examples):
            ids = example["input_ids"]
            tokens = tokenizer.convert_ids_to_tokens(ids)
            chosen = {i for i in range(len(ids)) if int(batch["labels"][row, i]) != -100}
            budget = round(len(ids) * 0.15)
            assert 0 < len(chosen) <= budget  # about 15% of the tokens, a word that would overshoot passed over
            assert all(int(batch["labels"][row, i]) == ids[i] for i in chosen)  # the label is the original token
            assert not chosen & {0, len(ids) - 1}  # never [CLS] or [SEP]
            assert (batch["labels"][row, len(ids):] == -100).all()  # nor padding
            for word in _words(tokens, set(example.get("chinese_ref", []))):
                assert word <= chosen or not word & chosen, (tokens, word, chosen)  # whole words only
                pieces += len(word) > 1 and word <= chosen
            drawn += len(chosen)
            replaced += sum(int(batch["input_ids"][row, i]) == tokenizer.mask_token_id for i in chosen)
            kept += sum(int(batch["input_ids"][row, i]) == ids[i] for i in chosen)
    assert pieces > 100  # words of several pieces (run ##ning, 喜 欢 by its reference) were drawn whole
    assert 0.75 < replaced / drawn < 0.85 and 0.05 < kept / drawn < 0.2  # BERT's 80% [MASK], 10% kept
    assert all(torch.equal(a["input_ids"], b["input_ids"])  # the seeds decide the masks, as in 4.x
               for a, b in zip(batches[:5], _batches(Served, tokenizer, n=5)))


def test_what_it_cannot_do_is_said_before_any_batch(tmp_path: Path) -> None:
    tokenizer = _tokenizer(tmp_path)
    with pytest.raises(ValueError, match="PyTorch only; use return_tensors='pt'"):
        DataCollatorForWholeWordMask(tokenizer, return_tensors="tf")
    collator = DataCollatorForWholeWordMask(tokenizer)
    examples = [{"input_ids": tokenizer("run running")["input_ids"]}]
    with pytest.raises(ValueError, match=r"__call__\(return_tensors='np'\).*PyTorch only"):
        collator(examples, return_tensors="np")  # 4.30 answered NumPy arrays; saying so beats torch tensors
    assert set(collator(examples, return_tensors="pt")) == {"input_ids", "labels"}
    tokenizer.mask_token = None
    with pytest.raises(ValueError, match="no mask token"):
        DataCollatorForWholeWordMask(tokenizer)
