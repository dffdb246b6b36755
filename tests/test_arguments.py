"""The argparse and dataclass drop-ins, with real argv lists and the real HfArgumentParser."""

from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass

import pytest

from shardcompat import ShardingOptions, add_sharded_ddp_argument, parse_options, sharded_ddp_field


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train.py")
    add_sharded_ddp_argument(parser)
    parser.add_argument("--do_train", action="store_true")
    parser.add_argument("--output_dir")
    return parser


NEW_STYLE = [
    ([], ""),
    (["--sharded_ddp", "simple"], "simple"),
    (["--sharded_ddp", "zero_dp_2"], "zero_dp_2"),
    (["--sharded_ddp", "zero_dp_3 offload"], "zero_dp_3 offload"),
    (["--sharded_ddp", "zero_dp_3", "offload", "auto_wrap", "--do_train"], "zero_dp_3 offload auto_wrap"),
    (["--sharded_ddp=zero_dp_2 offload"], "zero_dp_2 offload"),
    (["--sharded_ddp", "full_shard", "bucket_cap_mb=50"], "zero_dp_3 bucket_cap_mb=50"),
    (["--sharded_ddp", "False"], ""),
    (["--sharded_ddp", "false", "--output_dir", "out"], ""),
]


@pytest.mark.parametrize(("argv", "canonical"), NEW_STYLE)
def test_list_syntax_parses_without_warning(argv: list[str], canonical: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        args = _parser().parse_args(argv)
    assert isinstance(args.sharded_ddp, ShardingOptions)
    assert str(args.sharded_ddp) == canonical


@pytest.mark.parametrize(
    "argv",
    [["--sharded_ddp"], ["--sharded_ddp", "--do_train"], ["--sharded_ddp", "True"], ["--sharded_ddp=1"], ["--sharded_ddp", "yes"]],
)
def test_legacy_forms_mean_simple_and_warn(argv: list[str]) -> None:
    with pytest.warns(FutureWarning, match="--sharded_ddp simple") as record:
        args = _parser().parse_args(argv)
    assert args.sharded_ddp == parse_options("simple")
    assert record[0].filename == __file__, "the warning should point at the caller's code"


def test_bare_flag_warning_names_the_flag() -> None:
    with pytest.warns(FutureWarning, match="bare --sharded_ddp flag"):
        _parser().parse_args(["--sharded_ddp", "--do_train"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sharded_ddp", "zero_dp3"], "did you mean 'zero_dp_3'"),
        (["--sharded_ddp", "simple", "offload"], "'simple' is not compatible"),
        (["--sharded_ddp", "offload"], "needs 'zero_dp_2' or 'zero_dp_3'"),
    ],
)
def test_bad_values_are_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        _parser().parse_args(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "usage: train.py" in err and "argument --sharded_ddp" in err and message in err


def test_custom_flag_name() -> None:
    parser = argparse.ArgumentParser()
    add_sharded_ddp_argument(parser, "--fsdp", dest="fsdp")
    assert str(parser.parse_args(["--fsdp", "full_shard", "auto_wrap"]).fsdp) == "zero_dp_3 auto_wrap"


@dataclass
class ScriptArguments:
    output_dir: str = "out"
    sharded_ddp: str = sharded_ddp_field()


@pytest.mark.parametrize(
    ("argv", "canonical"),
    [
        ([], ""),
        (["--sharded_ddp", "zero_dp_2", "offload"], "zero_dp_2 offload"),
        (["--sharded_ddp", "zero_dp_3 auto_wrap", "--output_dir", "x"], "zero_dp_3 auto_wrap"),
    ],
)
def test_dataclass_field_with_real_hf_argument_parser(argv: list[str], canonical: str) -> None:
    transformers = pytest.importorskip("transformers", reason="the HfArgumentParser test needs transformers")
    (args,) = transformers.HfArgumentParser(ScriptArguments).parse_args_into_dataclasses(argv)
    assert str(parse_options(args.sharded_ddp)) == canonical


def test_dataclass_field_bare_flag_is_legacy_simple() -> None:
    transformers = pytest.importorskip("transformers", reason="the HfArgumentParser test needs transformers")
    with pytest.warns(FutureWarning):
        (args,) = transformers.HfArgumentParser(ScriptArguments).parse_args_into_dataclasses(["--sharded_ddp"])
    assert parse_options(args.sharded_ddp) == parse_options("simple")


def test_dataclass_field_declares_help_and_default() -> None:
    import dataclasses

    (field,) = [f for f in dataclasses.fields(ScriptArguments) if f.name == "sharded_ddp"]
    assert field.default == "" and "zero_dp_3" in field.metadata["help"]
