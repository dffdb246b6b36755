"""When shardcompat's DDP looks for unused parameters: as the Trainer's DDP would, unless told."""

from __future__ import annotations

import pytest
from torch import nn

from shardcompat.backends._unused import find_unused


def _bert() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32)
    return transformers.BertForMaskedLM(config)


def test_a_transformers_model_looks_for_unused_parameters_as_the_trainer_does() -> None:
    model = _bert()
    assert find_unused(model, None)
    # the Trainer turns the search off then (5.x renamed the switch; the old name warns)
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    assert not find_unused(model, None)


def test_a_plain_module_gets_ddp_s_own_default_and_an_explicit_answer_wins() -> None:
    assert not find_unused(nn.Linear(2, 2), None)
    assert find_unused(nn.Linear(2, 2), True)
    assert not find_unused(_bert(), False)
