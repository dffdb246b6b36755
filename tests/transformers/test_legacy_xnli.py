"""4.30's XNLI reader (``XnliProcessor``, ``xnli_compute_metrics``), which 5.0 removed: the layer
serves shardcompat's own, which must read the XNLI download's files as 4.x did.  The files have
XNLI's layouts (the translated MultiNLI training file; the multilingual test file); where the
installed Transformers still ships the reader (4.34.1) ours is compared with it."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
np = pytest.importorskip("numpy")
pytest.importorskip("sklearn", reason="the 4.x metrics score with scikit-learn, as in 4.x (the test extra has it)")

from shardcompat.transformers import xnli  # noqa: E402

HAS_STOCK = importlib.util.find_spec("transformers.data.processors") is not None
TEST_HEADER = ["language", "gold_label", "sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse",
               "sentence2_parse", "sentence1", "sentence2", "promptID", "pairID", "genre"]


def _write(root: Path) -> None:
    train = root / "XNLI-MT-1.0" / "multinli"
    train.mkdir(parents=True)
    for language in ("de", "en"):
        rows = [["premise", "hypo", "label"], [f"{language} p1", "h1", "contradictory"], [f"{language} p2", "h2",
                                                                                          "neutral"]]
        (train / f"multinli.train.{language}.tsv").write_text("\n".join("\t".join(r) for r in rows) + "\n")
    (root / "XNLI-1.0").mkdir()
    rows = [TEST_HEADER] + [[lang, label, "-", "-", "-", "-", f"{lang} s1 {i}", f"{lang} s2 {i}", "1", str(i), "g"]
                            for i, (lang, label) in enumerate([("de", "entailment"), ("en", "neutral"),
                                                               ("de", "contradiction")])]
    (root / "XNLI-1.0" / "xnli.test.tsv").write_text("\n".join("\t".join(r) for r in rows) + "\n")


def _read(processor: object, root: Path) -> list[list[tuple[object, ...]]]:
    return [[dataclasses.astuple(e) for e in read(str(root))]  # type: ignore[attr-defined]
            for read in (processor.get_train_examples, processor.get_test_examples)]  # type: ignore[attr-defined]


def test_xnli_files_read_as_4x_read_them(tmp_path: Path) -> None:
    _write(tmp_path)
    ours = _read(xnli.XnliProcessor("de", train_language="en"), tmp_path)
    assert ours == [[("train-1", "en p1", "h1", "contradiction"), ("train-2", "en p2", "h2", "neutral")],
                    [("test-1", "de s1 0", "de s2 0", "entailment"), ("test-3", "de s1 2", "de s2 2", "contradiction")]]
    assert _read(xnli.XnliProcessor("de"), tmp_path)[0][0][1] == "de p1"
    assert xnli.xnli_compute_metrics("xnli", np.array([0, 1, 2, 2]), np.array([0, 1, 1, 2])) == {"acc": 0.75}
    with pytest.raises(KeyError):
        xnli.xnli_compute_metrics("mnli", np.array([0]), np.array([0]))
    if HAS_STOCK:
        stock = importlib.import_module("transformers.data.processors.xnli")
        assert ours == _read(stock.XnliProcessor("de", train_language="en"), tmp_path)
