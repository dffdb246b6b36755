"""Transformers 4.x's XNLI reader (``XnliProcessor``, ``xnli_compute_metrics``), which Transformers
5.0 removed without a successor: written here from what 4.30 did (nothing is copied from
Transformers), served at its 4.x import paths under ``shardcompat run`` and imported from here by
``shardcompat-migrate --transformers-legacy``.  It reads the machine-translated MultiNLI training
files and XNLI's test file of the XNLI download, for one language; scores need scikit-learn, as
in 4.x.  New code reads XNLI with ``datasets.load_dataset("xnli", LANGUAGE)``.
"""

from __future__ import annotations

import os
from typing import Any

from ._data_processors import DataProcessor, InputExample
from ._metrics import simple_accuracy

__all__ = ["XnliProcessor", "xnli_compute_metrics", "xnli_output_modes", "xnli_processors", "xnli_tasks_num_labels"]


class XnliProcessor(DataProcessor):
    """XNLI for ``language`` (training on ``train_language``'s translation of MultiNLI when given)."""

    def __init__(self, language: str, train_language: str | None = None) -> None:
        self.language, self.train_language = language, train_language

    def get_train_examples(self, data_dir: str) -> list[InputExample]:
        language = self.train_language or self.language
        rows = self._read_tsv(os.path.join(data_dir, f"XNLI-MT-1.0/multinli/multinli.train.{language}.tsv"))
        # premise, hypothesis, label; the translated files spell one label "contradictory"
        return [InputExample(f"train-{i}", row[0], row[1], "contradiction" if row[2] == "contradictory" else row[2])
                for i, row in enumerate(rows) if i > 0]

    def get_test_examples(self, data_dir: str) -> list[InputExample]:
        rows = self._read_tsv(os.path.join(data_dir, "XNLI-1.0/xnli.test.tsv"))
        # language, gold label, ..., sentence1 (column 6), sentence2 (column 7)
        return [InputExample(f"test-{i}", row[6], row[7], row[1])
                for i, row in enumerate(rows) if i > 0 and row[0] == self.language]

    def get_labels(self) -> list[Any]:
        return ["contradiction", "entailment", "neutral"]


xnli_processors = {"xnli": XnliProcessor}
xnli_output_modes = {"xnli": "classification"}
xnli_tasks_num_labels = {"xnli": 3}


def xnli_compute_metrics(task_name: str, preds: Any, labels: Any) -> dict[str, Any]:
    """XNLI's accuracy of numpy predictions against labels."""
    if len(preds) != len(labels):
        raise ValueError(f"Predictions and labels have mismatched lengths {len(preds)} and {len(labels)}")
    if task_name != "xnli":
        raise KeyError(task_name)
    return {"acc": simple_accuracy(preds, labels)}
