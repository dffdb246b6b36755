"""The grammar, table-driven: every token, alias, tunable and error message."""

from __future__ import annotations

import string
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcompat.options import (
    RULES,
    TOKENS,
    TUNABLES,
    Precision,
    Prefetch,
    ShardingOptions,
    ShardingOptionsConflict,
    ShardingOptionsError,
    Stage,
    parse_options,
)

# (input, canonical string) for every token and alias, alone and combined.
CANONICAL = [
    ("simple", "simple"),
    ("zero_dp_1", "zero_dp_1"),
    ("zero_dp_2", "zero_dp_2"),
    ("zero_dp_3", "zero_dp_3"),
    ("zero_dp_2 offload", "zero_dp_2 offload"),
    ("zero_dp_3 offload", "zero_dp_3 offload"),
    ("zero_dp_3 auto_wrap", "zero_dp_3 auto_wrap"),
    ("zero_dp_3 offload auto_wrap", "zero_dp_3 offload auto_wrap"),
    ("auto_wrap offload zero_dp_3", "zero_dp_3 offload auto_wrap"),
    (["zero_dp_2", "offload"], "zero_dp_2 offload"),
    (["zero_dp_2 offload"], "zero_dp_2 offload"),
    ("zero_dp_2,offload", "zero_dp_2 offload"),
    ("zero_dp_2;offload", "zero_dp_2 offload"),
    ("zero_dp_2 ,  offload", "zero_dp_2 offload"),
    ("  ZERO_DP_2  Offload ", "zero_dp_2 offload"),
    ("zero-dp-2", "zero_dp_2"),
    ("full_shard", "zero_dp_3"),
    ("shard_grad_op", "zero_dp_2"),
    ("no_shard", "no_shard"),
    ("hybrid_shard", "zero_dp_3 hybrid"),
    ("hybrid_shard_zero2", "zero_dp_2 hybrid"),
    ("zero_dp_3 hybrid", "zero_dp_3 hybrid"),
    ("full_shard offload auto_wrap", "zero_dp_3 offload auto_wrap"),
    ("zero1", "zero_dp_1"),
    ("zero2", "zero_dp_2"),
    ("zero3", "zero_dp_3"),
    ("zero2_offload", "zero_dp_2 offload"),
    ("zero3_offload", "zero_dp_3 offload"),
    ("zero_dp_3 full_shard", "zero_dp_3"),  # the same stage twice is fine
    ("offload offload zero_dp_3", "zero_dp_3 offload"),
    ("stage=0", ""),
    ("stage=1", "zero_dp_1"),
    ("stage=2", "zero_dp_2"),
    ("stage=3 offload", "zero_dp_3 offload"),
    ("stage=3 zero_dp_3", "zero_dp_3"),
    ("zero_dp_3 bucket_cap_mb=50", "zero_dp_3 bucket_cap_mb=50"),
    ("simple bucket_cap_mb=2.5", "simple bucket_cap_mb=2.5"),
    ("bucket_cap_mb=25", "bucket_cap_mb=25"),  # plain DDP with a bucket size
    ("zero_dp_3 auto_wrap min_num_params=1e8", "zero_dp_3 auto_wrap min_num_params=100000000"),
    ("zero_dp_3 min_num_params=1_000", "zero_dp_3 auto_wrap min_num_params=1000"),
    ("zero_dp_3 wrap=GPT2Block", "zero_dp_3 auto_wrap wrap=GPT2Block"),
    ("zero_dp_3 wrap=GPT2Block,T5Block offload", "zero_dp_3 offload auto_wrap wrap=GPT2Block,T5Block"),
    ("zero_dp_3,wrap=A,B,offload", "zero_dp_3 offload auto_wrap wrap=A,B"),
    ("zero_dp_3 wrap=A, B", "zero_dp_3 auto_wrap wrap=A,B"),
    ("zero_dp_3 mixed_precision=BF16", "zero_dp_3 mixed_precision=bf16"),
    ("simple mixed_precision=fp16", "simple mixed_precision=fp16"),
    ("zero_dp_3 backward_prefetch=post", "zero_dp_3 backward_prefetch=post"),
    ("zero_dp_3 forward_prefetch=yes", "zero_dp_3 forward_prefetch=true"),
    ("zero_dp_3 limit_all_gathers=0", "zero_dp_3 limit_all_gathers=false"),
    ("zero_dp_3 reshard_after_forward=true", "zero_dp_3 reshard_after_forward=true"),
    ("zero_dp_2 reshard_after_forward=off", "zero_dp_2 reshard_after_forward=false"),
    ("zero_dp_2 backend=torch", "zero_dp_2 backend=torch"),
    ("zero_dp_2 backend=torch_fsdp2", "zero_dp_2 backend=torch-fsdp2"),
    ("simple backend=fairscale-sdp", "simple backend=fairscale-sdp"),
    ("zero_dp_2 backend=auto", "zero_dp_2"),
    ("", ""),
    ("   ", ""),
    ([], ""),
    (None, ""),
    (False, ""),
    ("false", ""),
    ("No", ""),
    ("0", ""),
]


@pytest.mark.parametrize(("value", "canonical"), CANONICAL, ids=[repr(v) for v, _ in CANONICAL])
def test_canonical_form_round_trips(value: object, canonical: str) -> None:
    options = parse_options(value)  # type: ignore[arg-type]
    assert str(options) == canonical
    assert parse_options(str(options)) == options
    assert hash(parse_options(str(options))) == hash(options)
    assert bool(options) is (options.stage is not None)


def test_every_token_in_the_table_is_covered() -> None:
    covered = {w.lower().replace("-", "_") for v, _ in CANONICAL if isinstance(v, str) for w in v.replace(",", " ").replace(";", " ").split()}
    assert set(TOKENS) <= covered | {"hybrid"}
    assert {k for k in TUNABLES} <= {w.split("=")[0] for w in covered if "=" in w}


@pytest.mark.parametrize("value", [True, 1, "true", "True", "TRUE", "1", "yes", "Yes"])
def test_legacy_true_means_simple_with_a_future_warning(value: object) -> None:
    with pytest.warns(FutureWarning, match=r"--sharded_ddp simple"):
        options = parse_options(value)  # type: ignore[arg-type]
    assert options.stage is Stage.SIMPLE and str(options) == "simple"


@pytest.mark.parametrize("value", [False, 0, "false", "0", "no", "", None])
def test_legacy_false_is_off_without_warning(value: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not parse_options(value)  # type: ignore[arg-type]


def test_typed_fields() -> None:
    o = parse_options("hybrid_shard offload wrap=Block mixed_precision=bf16 backward_prefetch=pre bucket_cap_mb=50")
    assert o.stage is Stage.ZERO_DP_3 and o.hybrid and o.offload and o.auto_wrap
    assert o.wrap == ("Block",) and o.mixed_precision is Precision.BF16
    assert o.backward_prefetch is Prefetch.PRE and o.bucket_cap_mb == 50.0
    assert o.zero_stage == 3 and parse_options("simple").zero_stage == 2
    with pytest.raises(AttributeError):
        o.offload = False  # type: ignore[misc]
    assert parse_options(o) is o


def test_direct_construction_runs_the_rules() -> None:
    assert ShardingOptions(stage=Stage.ZERO_DP_3, offload=True) == parse_options("zero_dp_3 offload")
    assert ShardingOptions(stage="zero_dp_2") == parse_options("zero_dp_2")  # type: ignore[arg-type]
    with pytest.raises(ShardingOptionsConflict):
        ShardingOptions(stage=Stage.SIMPLE, offload=True)
    assert parse_options("zero_dp_2").replace(offload=True) == parse_options("zero_dp_2 offload")


# (input, exception type, the bad token, regex the message must match)
ERRORS = [
    ("zero_dp3", ShardingOptionsError, "zero_dp3", r"unknown sharding option 'zero_dp3'.*did you mean 'zero_dp_3'\?.*Valid: simple, zero_dp_1"),
    ("zero_dp_2 ofload", ShardingOptionsError, "ofload", r"did you mean 'offload'\?"),
    ("full_shrd", ShardingOptionsError, "full_shrd", r"did you mean 'full_shard'\?"),
    ("fsdp", ShardingOptionsError, "fsdp", r"unknown sharding option 'fsdp'"),
    ("bucket_cap=5", ShardingOptionsError, "bucket_cap", r"unknown setting 'bucket_cap'.*did you mean 'bucket_cap_mb='\?"),
    ("bucket_cap_mb=abc", ShardingOptionsError, "bucket_cap_mb=abc", r"bad value 'abc' for bucket_cap_mb=.*above 0, at most 1048576"),
    ("bucket_cap_mb=-1", ShardingOptionsError, "bucket_cap_mb=-1", r"above 0, at most 1048576"),
    ("bucket_cap_mb=nan", ShardingOptionsError, "bucket_cap_mb=nan", r"above 0, at most 1048576"),
    ("bucket_cap_mb=", ShardingOptionsError, "bucket_cap_mb=", r"bad value ''"),
    ("zero_dp_3 min_num_params=1.5", ShardingOptionsError, "min_num_params=1.5", r"whole number"),
    ("zero_dp_3 min_num_params=-3", ShardingOptionsError, "min_num_params=-3", r"whole number"),
    ("zero_dp_3 wrap=1Block", ShardingOptionsError, "wrap=1Block", r"class names"),
    ("zero_dp_3 mixed_precision=fp8", ShardingOptionsError, "mixed_precision=fp8", r"fp16, bf16 or fp32"),
    ("zero_dp_3 backward_prefetch=early", ShardingOptionsError, "backward_prefetch=early", r"pre, post or none"),
    ("zero_dp_3 forward_prefetch=maybe", ShardingOptionsError, "forward_prefetch=maybe", r"true or false"),
    ("zero_dp_2 backend=deepspeed", ShardingOptionsError, "backend=deepspeed", r"auto, torch, fairscale, torch-zero"),
    ("stage=4", ShardingOptionsError, "stage=4", r"0, 1, 2 or 3"),
    ("true offload", ShardingOptionsError, "true", r"boolean 'true' cannot be combined"),
    ("simple offload", ShardingOptionsConflict, None, r"'simple' is not compatible with any other option"),
    ("simple auto_wrap", ShardingOptionsConflict, None, r"'simple' is not compatible"),
    ("simple zero_dp_2", ShardingOptionsConflict, "zero_dp_2", r"'simple' and 'zero_dp_2' choose two different stages"),
    ("zero_dp_2 zero_dp_3", ShardingOptionsConflict, "zero_dp_3", r"two different stages"),
    ("stage=2 zero_dp_3", ShardingOptionsConflict, "zero_dp_3", r"two different stages"),
    ("offload", ShardingOptionsConflict, None, r"'offload' can't work on its own; it needs 'zero_dp_2' or 'zero_dp_3'"),
    ("auto_wrap", ShardingOptionsConflict, None, r"'auto_wrap' can't work on its own"),
    ("zero_dp_1 offload", ShardingOptionsConflict, None, r"'offload' is not supported with 'zero_dp_1'"),
    ("no_shard offload", ShardingOptionsConflict, None, r"'offload' can't work with 'no_shard'"),
    ("zero_dp_1 auto_wrap", ShardingOptionsConflict, None, r"'auto_wrap' can't work with 'zero_dp_1'"),
    ("zero_dp_1 wrap=Block", ShardingOptionsConflict, None, r"'auto_wrap' can't work with 'zero_dp_1'"),
    ("hybrid", ShardingOptionsConflict, None, r"'hybrid' can't work on its own"),
    ("no_shard hybrid", ShardingOptionsConflict, None, r"'hybrid' can't work with 'no_shard'"),
    ("zero_dp_3 wrap=Block min_num_params=10", ShardingOptionsConflict, None, r"'wrap=' and 'min_num_params=' .* keep one"),
    ("simple backward_prefetch=pre", ShardingOptionsConflict, None, r"backward_prefetch= can only be used with FSDP modes"),
    ("limit_all_gathers=true", ShardingOptionsConflict, None, r"limit_all_gathers= can only be used with FSDP modes.*sharding off"),
    ("zero_dp_3 reshard_after_forward=false", ShardingOptionsConflict, None, r"is zero_dp_2: write 'zero_dp_2'"),
    ("zero_dp_2 reshard_after_forward=true", ShardingOptionsConflict, None, r"is zero_dp_3: write 'zero_dp_3'"),
    ("zero_dp_3 bucket_cap_mb=1 bucket_cap_mb=2", ShardingOptionsConflict, "bucket_cap_mb=2", r"given twice"),
    (["zero_dp_2", 3], ShardingOptionsError, None, r"must be strings"),
    (3.5, ShardingOptionsError, None, r"must be a string"),
    ({"zero_dp_2": True}, ShardingOptionsError, None, r"must be a string"),
]


@pytest.mark.parametrize(("value", "kind", "token", "message"), ERRORS, ids=[repr(e[0]) for e in ERRORS])
def test_errors_name_the_token_choices_and_closest_match(value: object, kind: type, token: str | None, message: str) -> None:
    with pytest.raises(kind, match=message) as caught:
        parse_options(value)  # type: ignore[arg-type]
    assert isinstance(caught.value, ValueError)
    if token is not None:
        assert caught.value.token == token


def test_unknown_token_error_carries_choices_and_suggestion() -> None:
    with pytest.raises(ShardingOptionsError) as caught:
        parse_options("zero_dp3 offload")
    assert caught.value.suggestion == "zero_dp_3"
    assert "zero_dp_3" in caught.value.choices and "bucket_cap_mb=" in caught.value.choices


def test_every_rule_is_exercised_by_an_error_case() -> None:
    rules = set()
    for value, kind, _, _ in ERRORS:
        if kind is ShardingOptionsConflict:
            try:
                parse_options(value)  # type: ignore[arg-type]
            except ShardingOptionsConflict as error:
                rules.add(error.rule)
    assert {r.id for r in RULES} <= rules


HF = [
    ("", "", {}),
    ("simple", "shard_grad_op", {}),
    ("zero_dp_1", "shard_grad_op", {}),
    ("zero_dp_2", "shard_grad_op", {}),
    ("zero_dp_3 offload auto_wrap", "full_shard offload auto_wrap", {}),
    ("no_shard", "no_shard", {}),
    ("hybrid_shard", "hybrid_shard", {}),
    ("hybrid_shard_zero2 offload", "hybrid_shard_zero2 offload", {}),
    ("zero_dp_3 wrap=GPT2Block,T5Block", "full_shard auto_wrap", {"transformer_layer_cls_to_wrap": ["GPT2Block", "T5Block"]}),
    ("zero_dp_3 min_num_params=1e6 backward_prefetch=pre forward_prefetch=true limit_all_gathers=true",
     "full_shard auto_wrap",
     {"min_num_params": 1000000, "backward_prefetch": "backward_pre", "forward_prefetch": True, "limit_all_gathers": True}),
]


@pytest.mark.parametrize(("value", "fsdp", "config"), HF)
def test_to_hf_fsdp(value: str, fsdp: str, config: dict[str, object]) -> None:
    got = parse_options(value).to_hf_fsdp()
    assert (got.fsdp, got.fsdp_config) == (fsdp, config)
    if fsdp:  # the Transformers words parse back to the same stage
        assert parse_options(fsdp).stage == parse_options(value).stage or value in ("simple", "zero_dp_1")



# (options, fsdp_config the current Transformers form writes, words its caveats must name)
HF_CONFIG = [
    ("zero_dp_3", {"version": 2, "reshard_after_forward": True, "auto_wrap_policy": "NO_WRAP"}, []),
    ("zero_dp_2 offload", {"version": 2, "reshard_after_forward": False, "cpu_offload": True,
                           "auto_wrap_policy": "NO_WRAP"}, []),
    ("simple", {"version": 2, "reshard_after_forward": False, "auto_wrap_policy": "NO_WRAP"}, ["ZeRO-1"]),
    ("zero_dp_3 auto_wrap", {"version": 2, "reshard_after_forward": True,
                             "auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}, []),
    ("zero_dp_3 wrap=GPT2Block", {"version": 2, "reshard_after_forward": True,
                                  "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                  "transformer_layer_cls_to_wrap": ["GPT2Block"]}, []),
    ("zero_dp_3 min_num_params=1000", {"version": 2, "reshard_after_forward": True,
                                       "auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 1000}, []),
    ("hybrid_shard", {"version": 1, "reshard_after_forward": "hybrid_shard", "auto_wrap_policy": "NO_WRAP"},
     ["FSDP1"]),
    ("zero_dp_3 backward_prefetch=pre mixed_precision=bf16 bucket_cap_mb=50",
     {"version": 2, "reshard_after_forward": True, "auto_wrap_policy": "NO_WRAP"},
     ["backward_prefetch", "--bf16", "ddp_bucket_cap_mb"]),
]


@pytest.mark.parametrize(("value", "config", "caveat_words"), HF_CONFIG)
def test_to_hf_fsdp_config(value: str, config: dict[str, object], caveat_words: list[str]) -> None:
    got = parse_options(value).to_hf_fsdp_config()
    assert got.fsdp is True and got.fsdp_config == config
    assert got.trainer_kwargs() == {"fsdp": True, "fsdp_config": config}
    for word in caveat_words:
        assert any(word in caveat for caveat in got.caveats), (word, got.caveats)
    assert bool(got.caveats) == bool(caveat_words)


def test_to_hf_fsdp_config_off_is_no_kwargs() -> None:
    assert parse_options("").to_hf_fsdp_config().trainer_kwargs() == {}


@pytest.mark.parametrize("value", [v for v, _, _ in HF_CONFIG if "hybrid" not in v] + ["zero_dp_3 offload auto_wrap"])
def test_to_hf_fsdp_config_builds_training_arguments(value: str, tmp_path: object) -> None:
    """The installed Transformers accepts the translation and reads back the same stage."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    hf = parse_options(value).to_hf_fsdp_config()
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, **hf.trainer_kwargs())
    plugin = args.fsdp_plugin_args
    assert plugin["fsdp_version"] == 2
    assert plugin["reshard_after_forward"] is hf.fsdp_config["reshard_after_forward"]
    assert plugin.get("cpu_offload", False) is hf.fsdp_config.get("cpu_offload", False)
    assert plugin["auto_wrap_policy"] == hf.fsdp_config["auto_wrap_policy"]

DEEPSPEED = [
    ("", {"stage": 0}),
    ("zero_dp_1", {"stage": 1}),
    ("simple", {"stage": 2}),
    ("zero_dp_2 offload", {"stage": 2, "offload_optimizer": {"device": "cpu"}}),
    ("zero_dp_3 offload", {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}),
    ("zero_dp_2 bucket_cap_mb=4", {"stage": 2, "reduce_bucket_size": 1048576}),
    ("no_shard", {"stage": 0}),
]


@pytest.mark.parametrize(("value", "expected"), DEEPSPEED)
def test_to_deepspeed(value: str, expected: dict[str, object]) -> None:
    assert parse_options(value).to_deepspeed() == expected


def test_to_deepspeed_refuses_hybrid_rather_than_dropping_it() -> None:
    with pytest.raises(ShardingOptionsError, match="hybrid"):
        parse_options("hybrid_shard").to_deepspeed()


_ALPHABET = string.ascii_letters + string.digits + " _-=,;.+" + "é٣１\t\n"
_WORDS = st.sampled_from([*TOKENS, *(f"{k}=" for k in TUNABLES), "true", "false", "1e8", "50", "bf16", "Block", "post", "yes", "nan", "torch"])


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(_ALPHABET, max_size=40), st.lists(_WORDS, max_size=6).map(" ".join),
                 st.lists(_WORDS, max_size=5).map("".join)))
def test_any_text_round_trips_or_raises_the_grammar_error(text: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            options = parse_options(text)
        except ShardingOptionsError:
            return
    assert parse_options(str(options)) == options
    assert str(parse_options(str(options))) == str(options)


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_each_rule_example_breaks_that_rule(rule: object) -> None:
    with pytest.raises(ShardingOptionsConflict) as caught:
        parse_options(rule.example)  # type: ignore[attr-defined]
    assert caught.value.rule == rule.id  # type: ignore[attr-defined]


# Every numeric tunable with its bounds: the last accepted value on each side, the first refused one.
BOUNDS = {
    "bucket_cap_mb": (["0.001", "1048576", "2.5e3"], ["0", "-1", "1048576.5", "1e308", "1e309", "inf", "nan"]),
    "min_num_params": (["0", "1e8", "9223372036854775807"], ["-1", "9223372036854775808", "1e30", "1.5", "inf"]),
    "stage": (["0", "1", "2", "3"], ["4", "-1", "03", "+3", "3.0", "three"]),
}


def test_every_numeric_tunable_is_bounded_in_the_grammar() -> None:
    """Derived from the table: a tunable that parses numbers has its range here and in its message."""
    numeric = {k for k, t in TUNABLES.items() if "number" in t.values or t.values[:1].isdigit()}
    assert numeric == set(BOUNDS)


@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_a_value_out_of_range_is_refused_with_the_range(key: str) -> None:
    stage = "zero_dp_3 " if key == "min_num_params" else ("" if key == "stage" else "zero_dp_1 ")
    accepted, refused = BOUNDS[key]
    for value in accepted:
        parse_options(f"{stage}{key}={value}")
    for value in refused:
        with pytest.raises(ShardingOptionsError) as caught:
            parse_options(f"{stage}{key}={value}")
        assert f"bad value {value!r} for {key}=" in str(caught.value), str(caught.value)
        assert str(caught.value).endswith(f"expected {TUNABLES[key].values}")


def test_a_huge_bucket_is_refused_built_directly_too() -> None:
    with pytest.raises(ShardingOptionsError, match=r"bucket_cap_mb=1e\+308 is out of range: expected a number of MiB"):
        ShardingOptions(stage=Stage.ZERO_DP_1, bucket_cap_mb=1e308)


# Other scripts' digits, which int() and float() read as numbers: refused as zero_dp_٣ is.
FOREIGN_DIGITS = ["٣", "３", "३", "𝟑"]


@pytest.mark.parametrize("digit", FOREIGN_DIGITS)
def test_only_ascii_digits_are_numbers(digit: str) -> None:
    assert int(digit) == 3  # what the grammar must not rely on
    for text, key in ((f"stage={digit}", "stage"), (f"zero_dp_1 bucket_cap_mb={digit}", "bucket_cap_mb"),
                      (f"zero_dp_3 min_num_params=1{digit}", "min_num_params")):
        with pytest.raises(ShardingOptionsError, match=rf"bad value .* for {key}="):
            parse_options(text)
    with pytest.raises(ShardingOptionsError, match=r"unknown sharding option 'zero_dp_.'; did you mean 'zero_dp_3'"):
        parse_options(f"zero_dp_{digit}")


@pytest.mark.parametrize("text", ["x" * 5000, "zero_dp_2 " + "y" * 5000, "zero_dp_2 bucket_cap_mb=" + "9" * 5000,
                                  "zero_dp_2 " * 2 + "zero_dp_3 " + "z" * 5000])
def test_an_error_quotes_a_long_input_once_shortened(text: str) -> None:
    with pytest.raises(ShardingOptionsError) as caught:
        parse_options(text)
    message = str(caught.value)
    assert len(message) < 600, message
    assert message.count(" characters)") == 1 and "z" * 100 not in message and "9" * 100 not in message, message
