"""Transformers 4.x's language-modelling datasets (``TextDataset``, ``LineByLineTextDataset``,
``LineByLineWithRefDataset``), which Transformers 5.0 removed without a successor: written here
from what 4.30 did (nothing is copied from Transformers).  ``shardcompat run`` serves them at
their 4.x import paths and ``shardcompat-migrate --transformers-legacy`` imports them from here,
so the ``run_language_modeling.py`` of the 3.x-4.x examples and its copies keep their data::

    from shardcompat.transformers.text_datasets import LineByLineTextDataset, TextDataset

``TextDataset`` cuts the whole file's tokens into blocks, each with the model's special tokens;
``LineByLineTextDataset`` encodes each non-empty line; ``LineByLineWithRefDataset`` adds each
line's ``chinese_ref`` (whole-word pieces) from a JSON-lines file.  ``TextDataset`` caches its
blocks as JSON, keyed by the tokenizer and the file, beside 4.x's cache and never in place of
it: 4.x pickled them, and a pickle from elsewhere is code, so it is never read.  New code reads
text with ``datasets.load_dataset("text", ...)`` and groups it as today's ``run_clm.py`` does.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.utils.data

from . import _json_cache, _special_tokens

__all__ = ["LineByLineTextDataset", "LineByLineWithRefDataset", "TextDataset", "with_special_tokens"]


def with_special_tokens(tokenizer: Any, first: list[int], second: list[int] | None = None) -> list[int]:
    """``first`` (and ``second``) with the tokenizer's special tokens, as 4.x's
    ``build_inputs_with_special_tokens`` built them (5.x's tokenizers: from their own template)."""
    return _special_tokens.build(tokenizer, first, second)[0]


def _lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line for line in f.read().splitlines() if line and not line.isspace()]


def _must_exist(path: str, what: str = "Input file") -> None:
    if not os.path.isfile(path):
        raise ValueError(f"{what} path {path} not found")


class TextDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The file's tokens in blocks of ``block_size`` (special tokens included); the last, short
    block is dropped, as in 4.x."""

    def __init__(self, tokenizer: Any, file_path: str, block_size: int, overwrite_cache: bool = False,
                 cache_dir: str | None = None) -> None:
        _must_exist(file_path)
        block_size -= tokenizer.num_special_tokens_to_add(pair=False)
        directory, filename = os.path.split(file_path)
        name = f"cached_lm_{type(tokenizer).__name__}_{block_size}_{filename}.shardcompat.json"
        cache = os.path.join(cache_dir if cache_dir is not None else directory, name)
        key = _json_cache.key(tokenizer, file_path, block_size=block_size)
        cached = None if overwrite_cache else _json_cache.read(cache, key)
        examples = cached if isinstance(cached, list) and all(isinstance(b, list) for b in cached) else None
        if examples is None:
            with open(file_path, encoding="utf-8") as f:
                ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(f.read()))
            examples = [with_special_tokens(tokenizer, ids[i:i + block_size])
                        for i in range(0, len(ids) - block_size + 1, block_size)]
            _json_cache.write(cache, key, examples)
        self.examples: list[list[int]] = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(self.examples[i], dtype=torch.long)


class LineByLineTextDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Each non-empty line encoded with special tokens, truncated to ``block_size``."""

    def __init__(self, tokenizer: Any, file_path: str, block_size: int) -> None:
        _must_exist(file_path)
        encoded = tokenizer(_lines(file_path), add_special_tokens=True, truncation=True, max_length=block_size)
        self.examples = [{"input_ids": torch.tensor(ids, dtype=torch.long)} for ids in encoded["input_ids"]]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.examples[i]


class LineByLineWithRefDataset(LineByLineTextDataset):
    """:class:`LineByLineTextDataset` with each line's ``chinese_ref`` from ``ref_path`` (one JSON
    list per non-empty line), for whole-word masking."""

    def __init__(self, tokenizer: Any, file_path: str, block_size: int, ref_path: str) -> None:
        _must_exist(file_path)
        _must_exist(ref_path, "Ref file")
        with open(file_path, encoding="utf-8") as f:
            lines = [line.strip() for line in f.readlines() if line and not line.isspace()]  # not '\u2029'-split
        refs = [json.loads(line) for line in _lines(ref_path)]
        if len(lines) != len(refs):
            raise ValueError(f"Length of Input file should be equal to Ref file. But the length of {file_path} is "
                             f"{len(lines)} while length of {ref_path} is {len(refs)}")
        encoded = tokenizer(lines, add_special_tokens=True, truncation=True, max_length=block_size)
        self.examples = [{"input_ids": torch.tensor(ids, dtype=torch.long),
                          "chinese_ref": torch.tensor(ref, dtype=torch.long)}
                         for ids, ref in zip(encoded["input_ids"], refs)]
