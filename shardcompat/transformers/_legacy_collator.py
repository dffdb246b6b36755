"""4.30's ``DataCollatorForWholeWordMask``, which 5.x removed, written here from what it did (nothing
is copied from Transformers); :mod:`._legacy_imports` serves it at its 4.x homes under ``shardcompat run``.
It needs only torch and the tokenizer, so the Transformers releases that still ship the class can
check it against theirs."""

from __future__ import annotations

import random
from typing import Any

import torch

__all__ = ["DataCollatorForWholeWordMask"]


class DataCollatorForWholeWordMask:
    """4.30's whole-word masking for BERT-like (WordPiece) tokenizers: a word is a token and the
    ``##`` pieces after it, and an example's ``chinese_ref`` positions (from the script's reference
    file) count as such pieces.  Whole words are drawn with :func:`random.shuffle` until about
    ``mlm_probability`` of the tokens are chosen, then replaced as BERT does (80% ``[MASK]``, half
    the rest a random token).  It draws from Python's and torch's generators in 4.30's order, so a
    seeded 4.x script gets 4.30's masks (today's ``whole_word_mask=True`` finds words from the
    tokenizer's offsets, and masks differently).  PyTorch tensors only, as 5.x."""

    def __init__(self, tokenizer: Any, mlm: bool = True, mlm_probability: float = 0.15,
                 pad_to_multiple_of: int | None = None, tf_experimental_compile: bool = False,
                 return_tensors: str = "pt") -> None:
        _pytorch_only(return_tensors, "DataCollatorForWholeWordMask")
        if mlm and tokenizer.mask_token is None:
            raise ValueError("DataCollatorForWholeWordMask masks tokens, and this tokenizer has no mask token; "
                             "use a tokenizer with one (BERT's [MASK]) or DataCollatorForLanguageModeling(mlm=False)")
        self.tokenizer, self.mlm, self.mlm_probability = tokenizer, mlm, mlm_probability
        self.pad_to_multiple_of, self.return_tensors = pad_to_multiple_of, return_tensors

    def __call__(self, examples: list[Any], return_tensors: str | None = None) -> dict[str, Any]:
        if return_tensors is not None:
            _pytorch_only(return_tensors, "DataCollatorForWholeWordMask.__call__")
        if not isinstance(examples[0], dict) and not hasattr(examples[0], "keys"):
            examples = [{"input_ids": e} for e in examples]
        ids = [_as_list(e["input_ids"]) for e in examples]
        masks = []
        for e, example_ids in zip(examples, ids):
            tokens = list(self.tokenizer.convert_ids_to_tokens(example_ids))
            for i in set(_as_list(e.get("chinese_ref", []))) & set(range(len(tokens))):
                tokens[i] = "##" + tokens[i]
            masks.append(self._word_mask(tokens))
        inputs, labels = self._replace(self._pad(ids, self.tokenizer.pad_token_id), self._pad(masks, 0))
        return {"input_ids": inputs, "labels": labels}

    def _word_mask(self, tokens: list[str], max_predictions: int = 512) -> list[int]:
        words: list[list[int]] = []
        for i, token in enumerate(tokens):
            if token in ("[CLS]", "[SEP]"):
                continue
            if words and token.startswith("##"):
                words[-1].append(i)
            else:
                words.append([i])
        random.shuffle(words)
        budget = min(max_predictions, max(1, round(len(tokens) * self.mlm_probability)))
        chosen: set[int] = set()
        for word in words:
            if len(chosen) >= budget:
                break
            if len(chosen) + len(word) <= budget:  # a word that would overshoot is passed over
                chosen.update(word)
        return [int(i in chosen) for i in range(len(tokens))]

    def _pad(self, rows: list[list[int]], value: int | None) -> torch.Tensor:
        longest = max(len(r) for r in rows)
        if self.pad_to_multiple_of:
            longest = -(-longest // self.pad_to_multiple_of) * self.pad_to_multiple_of
        if any(len(r) != longest for r in rows) and value is None:
            raise ValueError("DataCollatorForWholeWordMask pads examples of different lengths with the "
                             "tokenizer's pad token, and this tokenizer has none; set tokenizer.pad_token")
        out = torch.full((len(rows), longest), value or 0, dtype=torch.long)
        for n, r in enumerate(rows):
            if self.tokenizer.padding_side == "left":
                out[n, longest - len(r):] = torch.tensor(r, dtype=torch.long)
            else:
                out[n, :len(r)] = torch.tensor(r, dtype=torch.long)
        return out

    def _replace(self, inputs: torch.Tensor, chosen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        labels = inputs.clone()
        special = [self.tokenizer.get_special_tokens_mask(row, already_has_special_tokens=True)
                   for row in labels.tolist()]
        masked = chosen.bool() & ~torch.tensor(special, dtype=torch.bool)
        if self.tokenizer.pad_token_id is not None:
            masked &= labels.ne(self.tokenizer.pad_token_id)
        labels[~masked] = -100
        to_mask = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked
        inputs[to_mask] = self.tokenizer.convert_tokens_to_ids(self.tokenizer.mask_token)
        to_random = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked & ~to_mask
        random_tokens = torch.randint(len(self.tokenizer), labels.shape, dtype=torch.long)
        inputs[to_random] = random_tokens[to_random]
        return inputs, labels


def _pytorch_only(return_tensors: str, where: str) -> None:
    if return_tensors != "pt":
        raise ValueError(f"{where}(return_tensors={return_tensors!r}): the installed Transformers is PyTorch "
                         "only; use return_tensors='pt'")


def _as_list(values: Any) -> list[int]:
    return values.tolist() if hasattr(values, "tolist") else list(values)
