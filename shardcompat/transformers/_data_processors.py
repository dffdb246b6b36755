"""4.x's ``transformers.data.processors.utils``: the example, the features and the reader base
that the kept GLUE, XNLI and SQuAD layers share, and the generic single-sentence processor
(written from what 4.30 did)."""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils.data


@dataclasses.dataclass
class InputExample:
    """One example: its id, one or two texts, and its label (None in a test set)."""

    guid: str
    text_a: str
    text_b: str | None = None
    label: str | None = None

    def to_json_string(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"


@dataclasses.dataclass(frozen=True)
class InputFeatures:
    """One example's model inputs (named as the model's arguments) and its label (int or float)."""

    input_ids: list[int]
    attention_mask: list[int] | None = None
    token_type_ids: list[int] | None = None
    label: int | float | None = None

    def to_json_string(self) -> str:
        return json.dumps(dataclasses.asdict(self)) + "\n"


class DataProcessor:
    """A data set's reader: examples of each split, and the label names."""

    def get_example_from_tensor_dict(self, tensor_dict: dict[str, Any]) -> InputExample:
        raise NotImplementedError()

    def get_train_examples(self, data_dir: str) -> list[Any]:
        raise NotImplementedError()

    def get_dev_examples(self, data_dir: str) -> list[Any]:
        raise NotImplementedError()

    def get_test_examples(self, data_dir: str) -> list[Any]:
        raise NotImplementedError()

    def get_labels(self) -> list[Any]:
        raise NotImplementedError()

    def tfds_map(self, example: InputExample) -> InputExample:
        """A TensorFlow-datasets example's label index to the label's name."""
        labels = self.get_labels()
        if len(labels) > 1:
            example.label = labels[int(example.label)]  # type: ignore[arg-type]
        return example

    @classmethod
    def _read_tsv(cls, input_file: str, quotechar: str | None = None) -> list[list[str]]:
        """The rows of a tab-separated file (GLUE's: no quoting, an optional BOM)."""
        with open(input_file, encoding="utf-8-sig") as f:
            return list(csv.reader(f, delimiter="\t", quotechar=quotechar))


def tensor_value(value: Any) -> Any:
    """A TensorFlow tensor's value (``.numpy()``), bytes decoded."""
    value = value.numpy() if hasattr(value, "numpy") else value
    return value.decode("utf-8") if isinstance(value, bytes) else value


class SingleSentenceClassificationProcessor(DataProcessor):
    """Examples of one text and a label each, from a TSV file or from Python lists, with
    padded features.  ``labels`` keep the order they were first seen in (4.x kept them in a set,
    so label ids could differ from one process to the next)."""

    def __init__(self, labels: list[Any] | None = None, examples: list[InputExample] | None = None,
                 mode: str = "classification", verbose: bool = False) -> None:
        self.labels = [] if labels is None else labels
        self.examples = [] if examples is None else examples
        self.mode, self.verbose = mode, verbose

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return SingleSentenceClassificationProcessor(labels=self.labels, examples=self.examples[idx])
        return self.examples[idx]

    @classmethod
    def create_from_csv(cls, file_name: str, split_name: str = "", column_label: int = 0, column_text: int = 1,
                        column_id: int | None = None, skip_first_row: bool = False,
                        **kwargs: Any) -> SingleSentenceClassificationProcessor:
        processor = cls(**kwargs)
        processor.add_examples_from_csv(file_name, split_name, column_label, column_text, column_id, skip_first_row,
                                        overwrite_labels=True, overwrite_examples=True)
        return processor

    @classmethod
    def create_from_examples(cls, texts_or_text_and_labels: Sequence[Any], labels: Sequence[Any] | None = None,
                             **kwargs: Any) -> SingleSentenceClassificationProcessor:
        processor = cls(**kwargs)
        processor.add_examples(texts_or_text_and_labels, labels=labels)
        return processor

    def add_examples_from_csv(self, file_name: str, split_name: str = "", column_label: int = 0,
                              column_text: int = 1, column_id: int | None = None, skip_first_row: bool = False,
                              overwrite_labels: bool = False, overwrite_examples: bool = False) -> list[InputExample]:
        """The rows of a tab-separated file (despite the name, as 4.x): ids from ``column_id``, else
        the row's number (after ``split_name-``)."""
        rows = self._read_tsv(file_name)[1 if skip_first_row else 0:]
        ids = [row[column_id] if column_id is not None else f"{split_name}-{i}" if split_name else str(i)
               for i, row in enumerate(rows)]
        return self.add_examples([row[column_text] for row in rows], [row[column_label] for row in rows], ids,
                                 overwrite_labels=overwrite_labels, overwrite_examples=overwrite_examples)

    def add_examples(self, texts_or_text_and_labels: Sequence[Any], labels: Sequence[Any] | None = None,
                     ids: Sequence[Any] | None = None, overwrite_labels: bool = False,
                     overwrite_examples: bool = False) -> list[InputExample]:
        """Texts (or (text, label) pairs) as examples, added to or in place of the ones held."""
        for what, given in (("labels", labels), ("ids", ids)):
            if given is not None and len(texts_or_text_and_labels) != len(given):
                raise ValueError(f"Text and {what} have mismatched lengths {len(texts_or_text_and_labels)} and "
                                 f"{len(given)}")
        examples = []
        for n, item in enumerate(texts_or_text_and_labels):
            label = None if labels is None else labels[n]
            text = item
            if isinstance(item, (tuple, list)) and label is None:
                text, label = item
            guid = None if ids is None else ids[n]  # 4.x: None without ids
            examples.append(InputExample(guid=guid, text_a=text, label=label))  # type: ignore[arg-type]
        self.examples = examples if overwrite_examples else [*self.examples, *examples]
        seen = [] if overwrite_labels else list(self.labels)
        self.labels = seen + [label for label in dict.fromkeys(e.label for e in examples) if label not in seen]
        return self.examples

    def get_features(self, tokenizer: Any, max_length: int | None = None, pad_on_left: bool = False,
                     pad_token: int = 0, mask_padding_with_zero: bool = True, return_tensors: str | None = None) -> Any:
        """Each example's ids with special tokens (at most ``max_length``, and the model's longest),
        padded to the longest of them, its attention mask and label; ``return_tensors="pt"``: a
        ``TensorDataset`` of the three.  4.x read the tokenizer's ``max_len``, gone since 4.0
        (``model_max_length`` is its name since), so 4.30's call failed: this one asks today's name."""
        longest = tokenizer.model_max_length if max_length is None else min(max_length, tokenizer.model_max_length)
        cut = {"truncation": True, "max_length": longest} if longest < 2**31 else {}  # else: a tokenizer without one
        encoded = [tokenizer.encode(e.text_a, add_special_tokens=True, **cut) for e in self.examples]
        width = max(len(ids) for ids in encoded)
        real, pad = (1, 0) if mask_padding_with_zero else (0, 1)
        label_ids = {label: i for i, label in enumerate(self.labels)}
        features = []
        for ids, example in zip(encoded, self.examples):
            padding = width - len(ids)
            mask = [real] * len(ids)
            ids, mask = ([pad_token] * padding + ids, [pad] * padding + mask) if pad_on_left else \
                (ids + [pad_token] * padding, mask + [pad] * padding)
            if self.mode == "classification":
                label: Any = label_ids[example.label]
            elif self.mode == "regression":
                label = float(example.label)  # type: ignore[arg-type]
            else:
                raise ValueError(f"mode {self.mode!r}: 'classification' or 'regression'")
            features.append(InputFeatures(input_ids=ids, attention_mask=mask, label=label))
        if return_tensors is None:
            return features
        if return_tensors != "pt":
            raise ValueError(f"return_tensors={return_tensors!r}: Transformers 5.x is PyTorch only; use 'pt' or None")
        labels = torch.tensor([f.label for f in features],
                              dtype=torch.long if self.mode == "classification" else torch.float)
        return torch.utils.data.TensorDataset(torch.tensor([f.input_ids for f in features], dtype=torch.long),
                                              torch.tensor([f.attention_mask for f in features], dtype=torch.long),
                                              labels)
