"""4.30's ``squad_convert_examples_to_features``: each SQuAD example cut into overlapping spans of
its document, each span a model input with the question, as 4.x's slow tokenizers built it
(``encode_plus`` of the question's ids and the document's tokens, truncating the document and
returning what overflowed, ``doc_stride`` tokens on).  Written here from that behaviour; the
truncation, special tokens, type ids and padding are done by hand, since 5.x's tokenizers no
longer take token lists that way.  Served by :mod:`.squad`."""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
from typing import Any

import numpy as np
import torch

from . import _special_tokens

logger = logging.getLogger(__name__)

#: Tokenizers whose pair template has two separators between the sequences (4.x's set, by the
#: class name without "Tokenizer", lower-cased).
MULTI_SEP_TOKENS_TOKENIZERS_SET = {"roberta", "camembert", "bart", "mpnet"}
_PREFIX_SPACE = ("RobertaTokenizer", "LongformerTokenizer", "BartTokenizer", "RobertaTokenizerFast",
                 "LongformerTokenizerFast", "BartTokenizerFast")

tokenizer: Any = None  # 4.x's worker global, set by squad_convert_example_to_features_init


def squad_convert_example_to_features_init(tokenizer_for_convert: Any) -> None:
    global tokenizer
    tokenizer = tokenizer_for_convert


def _improve_answer_span(doc_tokens: list[str], start: int, end: int, tok: Any, answer: str) -> tuple[int, int]:
    """The tightest sub-span whose tokens are the answer's own tokens, else the span given."""
    wanted = " ".join(tok.tokenize(answer))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start:new_end + 1]) == wanted:
                return new_start, new_end
    return start, end


def _is_max_context(spans: list[dict[str, Any]], index: int, position: int) -> bool:
    """Whether span ``index`` gives the token at ``position`` its most context (left and right)."""
    best, best_index = None, None
    for i, span in enumerate(spans):
        end = span["start"] + span["length"] - 1
        if span["start"] <= position <= end:
            score = min(position - span["start"], end - position) + 0.01 * span["length"]
            if best is None or score > best:
                best, best_index = score, i
    return index == best_index


def _encode(tok: Any, first: list[int], second: list[int], truncate_first: bool, max_length: int, stride: int,
            padding: Any) -> dict[str, Any]:
    """4.x's slow ``encode_plus(first, second, truncation=only_first/only_second, max_length,
    stride, return_overflowing_tokens=True, padding)`` on ids."""
    removed = len(first) + len(second) + tok.num_special_tokens_to_add(pair=True) - max_length
    overflow: list[int] = []
    cut = first if truncate_first else second
    if removed > 0 and len(cut) > removed:
        window = min(len(cut), stride + removed)
        if tok.truncation_side == "left":
            overflow, cut = cut[:window], cut[removed:]
        else:
            overflow, cut = cut[-window:], cut[:-removed]
    elif removed > 0:
        logger.error("We need to remove %d tokens to fit the model, but the sequence to truncate has only %d",
                     removed, len(cut))
    first, second = (cut, second) if truncate_first else (first, cut)
    ids, types = _special_tokens.build(tok, first, second)
    mask = [1] * len(ids)
    pad = max_length - len(ids) if getattr(padding, "value", padding) == "max_length" else 0  # one sequence:
    # "longest" (or True) is itself
    if pad > 0:
        fill = ([tok.pad_token_id] * pad, [tok.pad_token_type_id] * pad, [0] * pad)
        if tok.padding_side == "left":
            ids, types, mask = fill[0] + ids, fill[1] + types, fill[2] + mask
        else:
            ids, types, mask = ids + fill[0], types + fill[1], mask + fill[2]
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "overflowing_tokens": overflow}


def squad_convert_example_to_features(example: Any, max_seq_length: int, doc_stride: int, max_query_length: int,
                                      padding_strategy: Any, is_training: bool) -> list[Any]:
    """The example's spans as :class:`.squad.SquadFeatures` (uses the tokenizer set by
    :func:`squad_convert_example_to_features_init`, as 4.x's workers did)."""
    from .squad import SquadFeatures

    tok = tokenizer
    if is_training and not example.is_impossible:
        found = " ".join(example.doc_tokens[example.start_position:example.end_position + 1])
        if found.find(" ".join(example.answer_text.strip().split())) == -1:
            logger.warning("Could not find answer: '%s' vs. '%s'", found, example.answer_text)
            return []
    tok_to_orig: list[int] = []
    orig_to_tok: list[int] = []
    doc: list[str] = []
    prefix_space = type(tok).__name__ in _PREFIX_SPACE
    for i, word in enumerate(example.doc_tokens):
        orig_to_tok.append(len(doc))
        for piece in (tok.tokenize(word, add_prefix_space=True) if prefix_space else tok.tokenize(word)):
            tok_to_orig.append(i)
            doc.append(piece)
    if is_training and not example.is_impossible:
        tok_start = orig_to_tok[example.start_position]
        tok_end = orig_to_tok[example.end_position + 1] - 1 if example.end_position < len(example.doc_tokens) - 1 \
            else len(doc) - 1
        tok_start, tok_end = _improve_answer_span(doc, tok_start, tok_end, tok, example.answer_text)
    query = tok.encode(example.question_text, add_special_tokens=False, truncation=True, max_length=max_query_length)
    single = tok.num_special_tokens_to_add(pair=False)
    added = single + 1 if type(tok).__name__.replace("Tokenizer", "").lower() in MULTI_SEP_TOKENS_TOKENIZERS_SET \
        else single  # the specials before the document, as 4.x counted them
    pair_added = tok.num_special_tokens_to_add(pair=True)
    right = tok.padding_side == "right"
    spans: list[dict[str, Any]] = []
    rest: list[int] = tok.convert_tokens_to_ids(doc)
    while len(spans) * doc_stride < len(doc):
        encoded = _encode(tok, query if right else rest, rest if right else query, not right, max_seq_length,
                          max_seq_length - doc_stride - len(query) - pair_added, padding_strategy)
        length = min(len(doc) - len(spans) * doc_stride, max_seq_length - len(query) - pair_added)
        ids = encoded["input_ids"]
        if tok.pad_token_id in ids:
            kept = ids[:ids.index(tok.pad_token_id)] if right \
                else ids[len(ids) - ids[::-1].index(tok.pad_token_id):]
        else:
            kept = ids
        offset = len(query) + added
        encoded.update(paragraph_len=length, tokens=tok.convert_ids_to_tokens(kept), token_is_max_context={},
                       token_to_orig_map={(offset + i if right else i): tok_to_orig[len(spans) * doc_stride + i]
                                          for i in range(length)},
                       truncated_query_with_special_tokens_length=offset, start=len(spans) * doc_stride,
                       length=length)
        spans.append(encoded)
        if not encoded["overflowing_tokens"]:
            break
        rest = encoded["overflowing_tokens"]
    for index, span in enumerate(spans):
        for j in range(span["paragraph_len"]):
            at = span["truncated_query_with_special_tokens_length"] + j if right else j
            span["token_is_max_context"][at] = _is_max_context(spans, index, index * doc_stride + j)
    features = []
    for span in spans:
        ids = span["input_ids"]
        cls_index = ids.index(tok.cls_token_id)
        p_mask = np.ones_like(span["token_type_ids"])  # 1: cannot be in the answer
        if right:
            p_mask[len(query) + added:] = 0
        else:
            p_mask[-len(span["tokens"]):-(len(query) + added)] = 0
        special = set(tok.all_special_ids)  # 4.x's get_special_tokens_mask: padding, [UNK] and [MASK] too
        p_mask[[i for i, t in enumerate(ids) if t in special]] = 1
        p_mask[cls_index] = 0
        impossible, start, end = example.is_impossible, 0, 0
        if is_training and not impossible:
            first, last = span["start"], span["start"] + span["length"] - 1
            if tok_start >= first and tok_end <= last:
                shift = len(query) + added if right else 0
                start, end = tok_start - first + shift, tok_end - first + shift
            else:  # the answer is not in this span: the span answers "no answer"
                start = end = cls_index
                impossible = True
        features.append(SquadFeatures(
            ids, span["attention_mask"], span["token_type_ids"], cls_index, p_mask.tolist(), example_index=0,
            unique_id=0, paragraph_len=span["paragraph_len"], token_is_max_context=span["token_is_max_context"],
            tokens=span["tokens"], token_to_orig_map=span["token_to_orig_map"], start_position=start,
            end_position=end, is_impossible=impossible, qas_id=example.qas_id))
    return features


def squad_convert_examples_to_features(examples: list[Any], tokenizer: Any, max_seq_length: int, doc_stride: int,
                                       max_query_length: int, is_training: bool, padding_strategy: Any = "max_length",
                                       return_dataset: Any = False, threads: int = 1,
                                       tqdm_enabled: bool = True) -> Any:
    """Every example's spans, numbered (``example_index`` counts the examples that gave any;
    ``unique_id`` from 1000000000), and with ``return_dataset="pt"`` the tensors 4.x's scripts
    loaded.  ``threads`` worker processes share the examples, as in 4.x; a progress bar shows
    unless ``tqdm_enabled`` is False."""
    from tqdm.auto import tqdm

    if return_dataset not in (False, None, "pt"):
        raise ValueError(f"return_dataset={return_dataset!r}: Transformers 5.x is PyTorch only; use 'pt' or False")
    convert = functools.partial(squad_convert_example_to_features, max_seq_length=max_seq_length,
                                doc_stride=doc_stride, max_query_length=max_query_length,
                                padding_strategy=padding_strategy, is_training=is_training)
    progress = {"total": len(examples), "desc": "convert squad examples to features", "disable": not tqdm_enabled}
    threads = min(threads, os.cpu_count() or 1)
    if threads > 1:
        with multiprocessing.Pool(threads, initializer=squad_convert_example_to_features_init,
                                  initargs=(tokenizer,)) as pool:
            per_example = list(tqdm(pool.imap(convert, examples, chunksize=32), **progress))
    else:
        squad_convert_example_to_features_init(tokenizer)
        per_example = [convert(e) for e in tqdm(examples, **progress)]
    features = []
    unique_id = 1000000000
    for example_index, found in enumerate(f for f in per_example if f):
        for feature in found:
            feature.example_index, feature.unique_id = example_index, unique_id
            features.append(feature)
            unique_id += 1
    return features if return_dataset != "pt" else (features, features_dataset(features, is_training))


def features_dataset(features: list[Any], is_training: bool) -> torch.utils.data.TensorDataset:
    """The features' tensors, in the order 4.x's scripts unpacked them: inputs, then the answer
    positions (training) or each feature's index (evaluation), ``cls_index`` and ``p_mask``."""

    def column(name: str, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([getattr(f, name) for f in features], dtype=dtype)

    inputs = [column("input_ids", torch.long), column("attention_mask", torch.long),
              column("token_type_ids", torch.long)]
    cls_index, p_mask = column("cls_index", torch.long), column("p_mask", torch.float)
    if not is_training:
        return torch.utils.data.TensorDataset(*inputs, torch.arange(len(features), dtype=torch.long), cls_index,
                                              p_mask)
    return torch.utils.data.TensorDataset(*inputs, column("start_position", torch.long),
                                          column("end_position", torch.long), cls_index, p_mask,
                                          column("is_impossible", torch.float))
