"""The auto_wrap rule shared by the FSDP backends (no processes needed)."""

from __future__ import annotations

import pytest
from torch import nn

from shardcompat.backends._wrap_policy import (
    DEFAULT_MIN_NUM_PARAMS,
    WrapClassNotFound,
    modules_to_wrap,
    wrap_rule,
)
from shardcompat.options import parse_options
from tests._parity import MLP, Block, BlockModel


def _wrapped(model: nn.Module, options: str) -> list[str]:
    names = {id(m): n for n, m in model.named_modules()}
    return [names[id(m)] for m in modules_to_wrap(model, wrap_rule(model, parse_options(options)))]


def test_wrap_classes_by_name_or_dotted_path() -> None:
    assert _wrapped(BlockModel(), "zero_dp_3 wrap=Block") == ["blocks.0", "blocks.1"]
    assert _wrapped(BlockModel(), "zero_dp_3 wrap=tests._parity.Block") == ["blocks.0", "blocks.1"]


def test_no_split_modules_then_default_size() -> None:
    assert wrap_rule(BlockModel(), parse_options("zero_dp_3 auto_wrap")).source == "_no_split_modules"
    rule = wrap_rule(MLP(), parse_options("zero_dp_3 auto_wrap"))
    assert rule.min_num_params == DEFAULT_MIN_NUM_PARAMS and modules_to_wrap(MLP(), rule) == []


def test_size_rule_keeps_attention_whole() -> None:
    assert _wrapped(BlockModel(), "zero_dp_3 min_num_params=100") == [
        "embed", "blocks.0.mlp.0", "blocks.0.mlp.2", "blocks.0",
        "blocks.1.mlp.0", "blocks.1.mlp.2", "blocks.1", "head",
    ]
    assert _wrapped(Block(), "zero_dp_3 min_num_params=10") == ["ln1", "ln2", "mlp.0", "mlp.2"]


def test_unknown_class_is_an_error_with_a_suggestion() -> None:
    with pytest.raises(WrapClassNotFound, match="did you mean 'Block'") as caught:
        wrap_rule(BlockModel(), parse_options("zero_dp_3 wrap=Blok"))
    assert caught.value.suggestion == "Block" and "MultiheadAttention" in caught.value.choices
