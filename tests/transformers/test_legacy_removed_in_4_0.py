"""The 3.x names 4.0 removed that 4.30's own ``examples/legacy`` scripts still used (issue 46.3):
``trainer.is_world_master()``, ``trainer.is_local_master()``, ``tokenizer.max_len`` and
``Trainer(prediction_loss_only=)``.  Under the drop-ins each is today's name with a FutureWarning
naming it, on every release (4.34.1 lacks them too); without them, nothing is added.  One process,
no process group: a few seconds.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

import shardcompat.transformers as sct  # noqa: E402
from shardcompat.transformers import _legacy, _legacy_imports  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    with mock.patch.dict(os.environ), mock.patch.object(_legacy_imports, "_warned", set()), \
            mock.patch.object(_legacy, "_warned", set()):  # each warns once a process: afresh here
        yield


def _tokenizer(tmp_path: Path) -> Any:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat"]) + "\n")
    return transformers.BertTokenizerFast(str(vocab), model_max_length=37)


def _trainer(**kwargs: Any) -> Any:
    from tests.transformers._runs import build_model

    args = transformers.TrainingArguments("out", report_to="none", use_cpu=True)
    return transformers.Trainer(model=build_model("gpt2"), args=args, **kwargs)


def test_the_3x_names_are_todays_with_a_warning_naming_them(tmp_path: Path) -> None:
    tokenizer = _tokenizer(tmp_path)
    assert not hasattr(tokenizer, "max_len") and not hasattr(transformers.Trainer, "is_world_master")
    with sct.dropins():
        trainer = _trainer()  # the release's own Trainer: the names go on its class
        for old, new, value in [("is_world_master", "is_world_process_zero()", trainer.is_world_process_zero()),
                                ("is_local_master", "is_local_process_zero()", trainer.is_local_process_zero())]:
            with pytest.warns(FutureWarning, match=rf"Trainer.{old} is .*removed in 4.0.*trainer.{new}") as caught:
                assert getattr(trainer, old)() is value is True
            assert caught[0].filename == __file__
        with pytest.warns(FutureWarning, match=r"max_len is .*removed in 4.0.*tokenizer.model_max_length"):
            assert tokenizer.max_len == 37
    assert not hasattr(tokenizer, "max_len") and not hasattr(transformers.Trainer, "is_world_master")


def test_prediction_loss_only_given_to_the_trainer_goes_to_its_arguments(tmp_path: Path) -> None:
    from tests.transformers._runs import Tokens, build_model

    args = sct.TrainingArguments(str(tmp_path), report_to="none", use_cpu=True, per_device_eval_batch_size=4)
    assert args.prediction_loss_only is False
    with pytest.warns(FutureWarning, match=r"prediction_loss_only.*args.prediction_loss_only"):
        trainer = sct.Trainer(model=build_model("gpt2"), args=args, prediction_loss_only=True)
    assert trainer.args.prediction_loss_only is True
    output = trainer.predict(Tokens("gpt2", 8, 2))  # evaluation reads it: the loss, no logits
    assert output.predictions is None and output.metrics["test_loss"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(TypeError, match=r"without args=.*args=TrainingArguments"):
            sct.Trainer(model=build_model("gpt2"), prediction_loss_only=True)
