"""Transformers 4.x's GLUE data layer (``transformers.data``: the processors, the feature
conversion, the metrics and ``GlueDataset``), which Transformers 5.0 removed without a successor:
written here from what 4.30 did (nothing is copied from Transformers).  ``shardcompat run``
serves it at its 4.x import paths, and ``shardcompat-migrate --transformers-legacy`` imports it
from here, so a script of that era keeps its data and scores::

    from shardcompat.transformers.glue import GlueDataset, glue_compute_metrics

The 4.x scripts that read GLUE's TSV files with it (the 3.x-4.0 ``run_glue.py`` and the projects
that copied it, ``run_bertology.py``, DeeBERT, PABEE, movement pruning) get the same examples,
features and scores.  Two things differ on purpose:

- ``GlueDataset`` caches its features as JSON, keyed by the tokenizer, the settings and the data
  file, beside 4.x's cache and never in place of it: 4.x pickled the features, and a pickle from
  elsewhere is code, so a 4.x cache file is never read (the features are built again);
- only lists of examples convert (5.x has no TensorFlow datasets).

The metrics need scikit-learn and SciPy, as in 4.x.  New code reads GLUE with
``datasets.load_dataset("glue", task)`` and scores with ``evaluate.load("glue", task)``.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import torch.utils.data

from . import _json_cache
from ._data_processors import (
    DataProcessor,
    InputExample,
    InputFeatures,
    SingleSentenceClassificationProcessor,
    tensor_value,
)
from ._metrics import acc_and_f1, glue_compute_metrics, pearson_and_spearman, simple_accuracy

__all__ = ["ColaProcessor", "DataProcessor", "GlueDataTrainingArguments", "GlueDataset", "InputExample",
           "InputFeatures", "MnliMismatchedProcessor", "MnliProcessor", "MrpcProcessor", "OutputMode", "QnliProcessor",
           "QqpProcessor", "RteProcessor", "SingleSentenceClassificationProcessor", "Split", "Sst2Processor",
           "StsbProcessor", "WnliProcessor", "acc_and_f1", "glue_compute_metrics", "glue_convert_examples_to_features",
           "glue_output_modes", "glue_processors", "glue_tasks_num_labels", "pearson_and_spearman", "simple_accuracy"]


class _GlueProcessor(DataProcessor):
    """A GLUE task read from the files of its GLUE download, described by the class attributes:
    which file each split is, which columns hold the id, the texts and the label, and whether
    the first row is a header."""

    FILES: ClassVar[tuple[str, str, str]] = ("train.tsv", "dev.tsv", "test.tsv")
    SETS: ClassVar[tuple[str, str, str]] = ("train", "dev", "test")
    LABELS: ClassVar[tuple[Any, ...]] = ("0", "1")
    TFDS: ClassVar[tuple[str, str | None]] = ("sentence1", "sentence2")  # the TensorFlow-datasets fields
    GUID: ClassVar[int | None] = 0  # the id's column; None: the row's number
    TEXTS: ClassVar[tuple[int, int | None]] = (1, 2)
    TEST_TEXTS: ClassVar[tuple[int, int | None] | None] = None  # a test file's columns, where they differ
    LABEL: ClassVar[int] = -1
    SKIP_SHORT: ClassVar[bool] = False  # QQP's files have rows with missing columns

    def get_example_from_tensor_dict(self, tensor_dict: dict[str, Any]) -> InputExample:
        a, b = self.TFDS
        return InputExample(tensor_value(tensor_dict["idx"]), tensor_value(tensor_dict[a]),
                            None if b is None else tensor_value(tensor_dict[b]), str(tensor_value(tensor_dict["label"])))

    def get_train_examples(self, data_dir: str) -> list[InputExample]:
        return self._split(data_dir, 0)

    def get_dev_examples(self, data_dir: str) -> list[InputExample]:
        return self._split(data_dir, 1)

    def get_test_examples(self, data_dir: str) -> list[InputExample]:
        return self._split(data_dir, 2)

    def get_labels(self) -> list[Any]:
        return list(self.LABELS)

    def _split(self, data_dir: str, which: int) -> list[InputExample]:
        return self._create_examples(self._read_tsv(os.path.join(data_dir, self.FILES[which])), self.SETS[which])

    def _numbered(self, lines: list[list[str]], test: bool) -> Iterator[tuple[int, list[str]]]:
        """The data rows with their numbers (a header row is number 0)."""
        return ((i, line) for i, line in enumerate(lines) if i > 0)

    def _create_examples(self, lines: list[list[str]], set_type: str) -> list[InputExample]:
        test = set_type.startswith("test")
        a, b = self.TEST_TEXTS if test and self.TEST_TEXTS is not None else self.TEXTS
        examples = []
        for i, line in self._numbered(lines, test):
            guid = f"{set_type}-{i if self.GUID is None else line[self.GUID]}"
            try:
                example = InputExample(guid, line[a], None if b is None else line[b],
                                       None if test else line[self.LABEL])
            except IndexError:
                if not self.SKIP_SHORT:
                    raise
                continue
            examples.append(example)
        return examples


class MrpcProcessor(_GlueProcessor):
    """MRPC: paraphrase pairs (label first, then the two ids and the two sentences)."""

    GUID, TEXTS, LABEL = None, (3, 4), 0


class MnliProcessor(_GlueProcessor):
    """MultiNLI, matched dev and test sets."""

    FILES = ("train.tsv", "dev_matched.tsv", "test_matched.tsv")
    SETS = ("train", "dev_matched", "test_matched")
    LABELS = ("contradiction", "entailment", "neutral")
    TFDS = ("premise", "hypothesis")
    TEXTS = (8, 9)


class MnliMismatchedProcessor(MnliProcessor):
    """MultiNLI, mismatched dev and test sets."""

    FILES = ("train.tsv", "dev_mismatched.tsv", "test_mismatched.tsv")
    SETS = ("train", "dev_mismatched", "test_mismatched")


class ColaProcessor(_GlueProcessor):
    """CoLA: no header in the train and dev files (source, label, mark, sentence); the test file
    has one (id, sentence)."""

    TFDS = ("sentence", None)
    GUID, TEXTS, TEST_TEXTS, LABEL = None, (3, None), (1, None), 1

    def _numbered(self, lines: list[list[str]], test: bool) -> Iterator[tuple[int, list[str]]]:
        return enumerate(lines[1:] if test else lines)


class Sst2Processor(_GlueProcessor):
    """SST-2: sentence and label (the test file: id and sentence)."""

    TFDS = ("sentence", None)
    GUID, TEXTS, TEST_TEXTS, LABEL = None, (0, None), (1, None), 1


class StsbProcessor(_GlueProcessor):
    """STS-B: a similarity score (regression), so one label of None."""

    LABELS = (None,)
    TEXTS = (7, 8)


class QqpProcessor(_GlueProcessor):
    """QQP: question pairs; rows with missing columns are skipped."""

    TFDS = ("question1", "question2")
    TEXTS, TEST_TEXTS, LABEL, SKIP_SHORT = (3, 4), (1, 2), 5, True


class QnliProcessor(_GlueProcessor):
    """QNLI: question and sentence."""

    LABELS = ("entailment", "not_entailment")
    TFDS = ("question", "sentence")


class RteProcessor(_GlueProcessor):
    """RTE: sentence pairs."""

    LABELS = ("entailment", "not_entailment")


class WnliProcessor(_GlueProcessor):
    """WNLI: sentence pairs."""


glue_tasks_num_labels = {"cola": 2, "mnli": 3, "mrpc": 2, "sst-2": 2, "sts-b": 1, "qqp": 2, "qnli": 2, "rte": 2,
                         "wnli": 2}
glue_processors: dict[str, type[DataProcessor]] = {
    "cola": ColaProcessor, "mnli": MnliProcessor, "mnli-mm": MnliMismatchedProcessor, "mrpc": MrpcProcessor,
    "sst-2": Sst2Processor, "sts-b": StsbProcessor, "qqp": QqpProcessor, "qnli": QnliProcessor, "rte": RteProcessor,
    "wnli": WnliProcessor}
glue_output_modes = {task: "regression" if task == "sts-b" else "classification" for task in glue_processors}


class OutputMode(enum.Enum):
    classification = "classification"
    regression = "regression"


def glue_convert_examples_to_features(examples: Sequence[InputExample], tokenizer: Any, max_length: int | None = None,
                                      task: str | None = None, label_list: list[Any] | None = None,
                                      output_mode: str | None = None) -> list[InputFeatures]:
    """The examples tokenized as pairs, padded and truncated to ``max_length`` (the tokenizer's
    maximum when None), each with its label's index (classification) or value (regression);
    ``task`` supplies the label list and output mode not given."""
    if not isinstance(examples, (list, tuple)):
        raise TypeError(f"glue_convert_examples_to_features takes a list of InputExample, not "
                        f"{type(examples).__name__}: Transformers 5.x is PyTorch only, so TensorFlow datasets "
                        "no longer convert")
    if task is not None:
        label_list = glue_processors[task]().get_labels() if label_list is None else label_list
        output_mode = glue_output_modes[task] if output_mode is None else output_mode
    index = {label: i for i, label in enumerate(label_list or ())}

    def label(example: InputExample) -> int | float | None:
        if example.label is None:
            return None
        if output_mode == "classification":
            return index[example.label]
        if output_mode == "regression":
            return float(example.label)
        raise KeyError(output_mode)

    labels = [label(e) for e in examples]
    settings = {"max_length": max_length or tokenizer.model_max_length, "padding": "max_length", "truncation": True}
    seconds = [e.text_b for e in examples]
    if all(b is None for b in seconds) or all(b is not None for b in seconds):  # a GLUE task: one kind or the other
        encoded = tokenizer([e.text_a for e in examples], None if seconds and seconds[0] is None else seconds,
                            **settings)
        rows = [{k: encoded[k][i] for k in encoded} for i in range(len(examples))]
    else:
        rows = [dict(tokenizer(e.text_a, e.text_b, **settings)) for e in examples]
    return [InputFeatures(**row, label=y) for row, y in zip(rows, labels)]


# ---------------------------------------------------------------------- GlueDataset
@dataclasses.dataclass
class GlueDataTrainingArguments:
    """The data arguments of the 4.x GLUE scripts (``HfArgumentParser`` makes flags of them)."""

    task_name: str = dataclasses.field(metadata={"help": "The name of the task to train on: "
                                                 + ", ".join(glue_processors)})
    data_dir: str = dataclasses.field(metadata={"help": "The input data dir. Should contain the .tsv files "
                                                "(or other data files) for the task."})
    max_seq_length: int = dataclasses.field(default=128, metadata={
        "help": "The maximum total input sequence length after tokenization. Sequences longer than this will be "
                "truncated, sequences shorter will be padded."})
    overwrite_cache: bool = dataclasses.field(default=False, metadata={
        "help": "Overwrite the cached training and evaluation sets"})

    def __post_init__(self) -> None:
        self.task_name = self.task_name.lower()


class Split(enum.Enum):
    train = "train"
    dev = "dev"
    test = "test"


#: The tokenizers whose pretrained MNLI heads order the labels (contradiction, neutral, entailment).
_SWAPPED_MNLI = ("RobertaTokenizer", "RobertaTokenizerFast", "XLMRobertaTokenizer", "BartTokenizer",
                 "BartTokenizerFast")


class GlueDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A GLUE split's features, built from the task's TSV file and cached beside it (see the
    module's docstring for the cache)."""

    def __init__(self, args: Any, tokenizer: Any, limit_length: int | None = None, mode: str | Split = Split.train,
                 cache_dir: str | None = None) -> None:
        self.args = args
        self.processor = glue_processors[args.task_name]()
        self.output_mode = glue_output_modes[args.task_name]
        if isinstance(mode, str):
            try:
                mode = Split[mode]
            except KeyError:
                raise KeyError(f"mode {mode!r} is not a split name: one of {', '.join(Split.__members__)}") from None
        labels = self.processor.get_labels()
        if args.task_name in ("mnli", "mnli-mm") and type(tokenizer).__name__ in _SWAPPED_MNLI:
            labels[1], labels[2] = labels[2], labels[1]
        self.label_list = labels
        reader = {Split.train: self.processor.get_train_examples, Split.dev: self.processor.get_dev_examples,
                  Split.test: self.processor.get_test_examples}[mode]
        name = f"cached_{mode.value}_{type(tokenizer).__name__}_{args.max_seq_length}_{args.task_name}"
        cache = os.path.join(cache_dir if cache_dir is not None else args.data_dir, name + ".shardcompat.json")
        data_file = os.path.join(args.data_dir, self.processor.FILES[list(Split).index(mode)]) \
            if isinstance(self.processor, _GlueProcessor) else None
        key = _json_cache.key(tokenizer, data_file, max_seq_length=args.max_seq_length, task=args.task_name,
                              split=mode.value, limit=limit_length, labels=labels)
        rows = None if args.overwrite_cache else _json_cache.read(cache, key)
        try:
            features = None if rows is None else [InputFeatures(**row) for row in rows]
        except TypeError:
            features = None  # rows of another shape: build them again
        if features is None:
            examples = reader(args.data_dir)
            if limit_length is not None:
                examples = examples[:limit_length]
            features = glue_convert_examples_to_features(examples, tokenizer, max_length=args.max_seq_length,
                                                         label_list=labels, output_mode=self.output_mode)
            _json_cache.write(cache, key, [dataclasses.asdict(f) for f in features])
        self.features: list[InputFeatures] = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> InputFeatures:
        return self.features[i]

    def get_labels(self) -> list[Any]:
        return self.label_list
