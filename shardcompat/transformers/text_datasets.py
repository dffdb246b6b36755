"""Transformers 4.x's language-modelling datasets (``TextDataset``, ``LineByLineTextDataset``,
``LineByLineWithRefDataset``, and BERT's and ALBERT's sentence pairs
``TextDatasetForNextSentencePrediction`` and ``LineByLineWithSOPTextDataset``), which
Transformers 5.0 removed without a successor: written here from what 4.30 did (nothing is copied
from Transformers).  ``shardcompat run`` serves them at their 4.x import paths and
``shardcompat-migrate --transformers-legacy`` imports them from here, so the
``run_language_modeling.py`` of the 3.x-4.x examples and the pretraining scripts that copied it
keep their data::

    from shardcompat.transformers.text_datasets import LineByLineTextDataset, TextDataset

``TextDataset`` cuts the whole file's tokens into blocks, each with the model's special tokens;
``LineByLineTextDataset`` encodes each non-empty line; ``LineByLineWithRefDataset`` adds each
line's ``chinese_ref`` (whole-word pieces) from a JSON-lines file.  The pair datasets draw from
Python's ``random`` exactly as 4.x did, so a seeded run gets 4.x's pairs.  ``TextDataset`` and
the next-sentence pairs are cached as JSON, keyed by the tokenizer, the settings and the file,
beside 4.x's cache and never in place of it: 4.x pickled them, and a pickle from elsewhere is
code, so it is never read.  New code reads text with ``datasets.load_dataset("text", ...)`` and
groups it as today's ``run_clm.py`` / ``run_mlm.py`` do.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import torch
import torch.utils.data

from . import _json_cache, _special_tokens

__all__ = ["LineByLineTextDataset", "LineByLineWithRefDataset", "LineByLineWithSOPTextDataset", "TextDataset",
           "TextDatasetForNextSentencePrediction", "with_special_tokens"]


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


def _pair_example(tokenizer: Any, first: list[int], second: list[int], label_name: str, label: int) -> dict[str, Any]:
    """A sentence pair's example (4.x's checks first): its ids and token types with the special
    tokens, and its label, as tensors."""
    for which, tokens in (("a", first), ("b", second)):
        if len(tokens) < 1:
            raise ValueError(f"Length of sequence {which} is {len(tokens)} which must be no less than 1")
    ids, types = _special_tokens.build(tokenizer, first, second)
    return {"input_ids": torch.tensor(ids, dtype=torch.long), "token_type_ids": torch.tensor(types, dtype=torch.long),
            label_name: torch.tensor(label, dtype=torch.long)}


def _target_length(max_num_tokens: int, short_seq_probability: float) -> int:
    """Most pairs fill the block; a few (``short_seq_probability``) are shorter, as in BERT's
    pretraining data (the same draws from ``random`` as 4.x)."""
    return random.randint(2, max_num_tokens) if random.random() < short_seq_probability else max_num_tokens


def _split_chunk(chunk: list[list[int]]) -> tuple[int, list[int], list[int]]:
    """Where the chunk's segments split into sentence A and sentence B (one draw for two or more)."""
    a_end = random.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
    return a_end, [t for segment in chunk[:a_end] for t in segment], [t for segment in chunk[a_end:] for t in segment]


def _truncate_pair(first: list[int], second: list[int], max_num_tokens: int) -> None:
    """Shortens the longer of the two, a token at a time from a random end, until they fit."""
    while len(first) + len(second) > max_num_tokens:
        longer = first if len(first) > len(second) else second
        if len(longer) < 1:
            raise ValueError("Sequence length to be truncated must be no less than one")
        if random.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _as_lists(examples: list[Any]) -> list[dict[str, Any]] | None:
    """The examples for the JSON cache; None (not cached) for anything but dicts of tensors, which
    a subclass's ``create_examples_from_document`` may make."""
    if not all(isinstance(e, dict) and all(isinstance(v, torch.Tensor) for v in e.values()) for e in examples):
        return None
    return [{k: v.tolist() for k, v in e.items()} for e in examples]


def _cached_examples(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(e, dict) for e in value)


class LineByLineWithSOPTextDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """ALBERT's sentence-order pairs from a folder of WikiExtractor files (``<doc id=...>``
    articles, their title line dropped): each article's sentences chunked into pairs, half of them
    swapped (``sentence_order_label`` 1).  Draws from Python's ``random`` as 4.x did, so a seeded
    run gets 4.x's pairs."""

    def __init__(self, tokenizer: Any, file_dir: str, block_size: int) -> None:
        if not os.path.isdir(file_dir):
            raise ValueError(f"{file_dir} is not a directory")
        self.examples: list[dict[str, torch.Tensor]] = []
        for file_name in os.listdir(file_dir):  # the folder's order, as 4.x (the draws follow it)
            file_path = os.path.join(file_dir, file_name)
            if not os.path.isfile(file_path):
                raise ValueError(f"{file_path} is not a file")
            with open(file_path, encoding="utf-8") as f:
                lines = f.readlines()
            article: list[str] = []  # as 4.x: emptied at each article's end only
            is_open = False
            for line in lines:
                if "<doc id=" in line:
                    is_open = True
                elif "</doc>" in line:
                    is_open = False
                    document = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))
                                for text in article[1:] if text and not text.isspace()]
                    self.examples.extend(self.create_examples_from_document(document, block_size, tokenizer))
                    article = []
                elif is_open:
                    article.append(line)

    def create_examples_from_document(self, document: list[list[int]], block_size: int, tokenizer: Any,
                                      short_seq_prob: float = 0.1) -> list[dict[str, torch.Tensor]]:
        """The document's sentence-order pairs."""
        max_num_tokens = block_size - tokenizer.num_special_tokens_to_add(pair=True)
        target = _target_length(max_num_tokens, short_seq_prob)
        examples = []
        chunk: list[list[int]] = []
        length = 0
        i = 0
        while i < len(document):
            if not document[i]:
                i += 1
                continue
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                _, first, second = _split_chunk(chunk)
                if not first or not second:
                    continue  # 4.x: the same segment again (so a lone sentence pairs with itself)
                in_order = random.random() >= 0.5
                if not in_order:
                    first, second = second, first
                _truncate_pair(first, second, max_num_tokens)
                examples.append(_pair_example(tokenizer, first, second, "sentence_order_label", 0 if in_order else 1))
                chunk, length = [], 0
            i += 1
        return examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.examples[i]


class TextDatasetForNextSentencePrediction(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """BERT's next-sentence pairs from a file of one sentence a line, documents apart by blank
    lines: sentence B follows A, or (``nsp_probability``, ``next_sentence_label`` 1) comes from
    another document.  Draws from Python's ``random`` as 4.x did, and is cached as JSON under a
    lock (the first rank builds, the others read), so every rank gets the same pairs."""

    def __init__(self, tokenizer: Any, file_path: str, block_size: int, overwrite_cache: bool = False,
                 short_seq_probability: float = 0.1, nsp_probability: float = 0.5) -> None:
        _must_exist(file_path)
        self.tokenizer = tokenizer
        self.short_seq_probability = short_seq_probability
        self.nsp_probability = nsp_probability
        directory, filename = os.path.split(file_path)
        cache = os.path.join(directory, f"cached_nsp_{type(tokenizer).__name__}_{block_size}_{filename}.shardcompat.json")
        key = _json_cache.key(tokenizer, file_path, block_size=block_size, short=short_seq_probability,
                              nsp=nsp_probability, builder=f"{type(self).__module__}.{type(self).__qualname__}")
        self.examples: list[Any] = []

        def build() -> list[dict[str, Any]] | None:
            self.documents = self._documents(file_path)
            self.examples = []
            for doc_index, document in enumerate(self.documents):
                self.create_examples_from_document(document, doc_index, block_size)
            return _as_lists(self.examples)

        cached = _json_cache.once(cache, key, build, _cached_examples, overwrite_cache)
        if cached is not None and not self.examples:  # read, not built here
            self.examples = [{k: torch.tensor(v, dtype=torch.long) for k, v in e.items()} for e in cached]

    def _documents(self, file_path: str) -> list[list[list[int]]]:
        documents: list[list[list[int]]] = [[]]
        with open(file_path, encoding="utf-8") as f:
            for raw in f:
                line = raw.strip()
                if not line and documents[-1]:
                    documents.append([])
                tokens = self.tokenizer.convert_tokens_to_ids(self.tokenizer.tokenize(line))
                if tokens:
                    documents[-1].append(tokens)
        return documents

    def create_examples_from_document(self, document: list[list[int]], doc_index: int, block_size: int) -> None:
        """Appends the document's next-sentence pairs to ``self.examples``."""
        max_num_tokens = block_size - self.tokenizer.num_special_tokens_to_add(pair=True)
        target = _target_length(max_num_tokens, self.short_seq_probability)
        chunk: list[list[int]] = []
        length = 0
        i = 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                a_end, first, second = _split_chunk(chunk)
                is_random_next = len(chunk) == 1 or random.random() < self.nsp_probability
                if is_random_next:
                    second = self._random_continuation(doc_index, target - len(first))
                    i -= len(chunk) - a_end  # the segments B did not use are read again
                self.examples.append(_pair_example(self.tokenizer, first, second, "next_sentence_label",
                                                   1 if is_random_next else 0))
                chunk, length = [], 0
            i += 1

    def _random_continuation(self, doc_index: int, length: int) -> list[int]:
        """At least ``length`` tokens (where it has them) of another document, from a random sentence on
        (ten tries to find another document, as 4.x)."""
        for _ in range(10):
            other = random.randint(0, len(self.documents) - 1)
            if other != doc_index:
                break
        sentences = self.documents[other]
        tokens: list[int] = []
        for sentence in sentences[random.randint(0, len(sentences) - 1):]:
            tokens.extend(sentence)
            if len(tokens) >= length:
                break
        return tokens

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Any:
        return self.examples[i]
