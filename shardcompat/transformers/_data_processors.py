"""4.x's ``transformers.data.processors.utils``: the example, the features and the reader base
that the kept GLUE, XNLI and SQuAD layers share (written from what 4.30 did)."""

from __future__ import annotations

import csv
import dataclasses
import json
from typing import Any


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
