"""``ShardedDDPOption`` has 4.30's members and values, and 4.30's ``Trainer``/``TrainingArguments`` readings."""

from __future__ import annotations

import pytest

from shardcompat.options import parse_options
from shardcompat.transformers._sharded_ddp_option import ShardedDDPOption, args_value, trainer_value


def test_members_are_4_30s() -> None:
    assert {m.name: m.value for m in ShardedDDPOption} == {
        "SIMPLE": "simple", "ZERO_DP_2": "zero_dp_2", "ZERO_DP_3": "zero_dp_3",
        "OFFLOAD": "offload", "AUTO_WRAP": "auto_wrap"}
    assert ShardedDDPOption("zero_dp_2") is ShardedDDPOption.ZERO_DP_2 and ShardedDDPOption.SIMPLE == "simple"
    with pytest.raises(ValueError, match="zero_dp_9 is not a valid ShardedDDPOption, please select one of"):
        ShardedDDPOption("zero_dp_9")


@pytest.mark.parametrize(("text", "trainer", "args"), [
    ("", None, []),
    ("simple", ShardedDDPOption.SIMPLE, [ShardedDDPOption.SIMPLE]),
    ("zero_dp_2 offload", ShardedDDPOption.ZERO_DP_2, [ShardedDDPOption.ZERO_DP_2, ShardedDDPOption.OFFLOAD]),
    ("zero_dp_3 auto_wrap", ShardedDDPOption.ZERO_DP_3, [ShardedDDPOption.ZERO_DP_3, ShardedDDPOption.AUTO_WRAP]),
])
def test_trainer_and_args_read_as_4_30_set_them(text: str, trainer: ShardedDDPOption | None, args: list[ShardedDDPOption]) -> None:
    options = parse_options(text)
    assert trainer_value(options) is trainer
    assert args_value(options) == args
