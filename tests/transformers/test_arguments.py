"""The drop-in arguments, parser and checks at start, with the real HfArgumentParser and Trainer.

One process, no process group: everything here is refused or parsed before a rank is needed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

import shardcompat.transformers as sct  # noqa: E402
from shardcompat.options import ShardingOptionsError, parse_options  # noqa: E402
from shardcompat.transformers._arguments import RELEASE_HAS_FIELD  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _environment() -> Any:
    """TrainingArguments export settings for Accelerate (ACCELERATE_DYNAMO_BACKEND with
    --torch_compile, ACCELERATE_USE_FSDP, ...) for good: keep them out of the other tests."""
    with mock.patch.dict(os.environ):
        yield


def _parse(argv: list[str], cls: Any = None) -> Any:
    parser = sct.HfArgumentParser(cls or sct.TrainingArguments)
    (args,) = parser.parse_args_into_dataclasses(["--output_dir", "out", "--report_to", "none", *argv])
    return args


NEW_STYLE = [
    ([], ""),
    (["--sharded_ddp", "simple"], "simple"),
    (["--sharded_ddp", "zero_dp_3 offload"], "zero_dp_3 offload"),
    (["--sharded_ddp", "zero_dp_3", "offload"], "zero_dp_3 offload"),
    (["--sharded_ddp", "zero_dp_2", "auto_wrap", "--logging_steps", "1"], "zero_dp_2 auto_wrap"),
    (["--sharded_ddp", "full_shard", "auto_wrap", "wrap=GPT2Block"], "zero_dp_3 auto_wrap wrap=GPT2Block"),
    (["--sharded_ddp", "False"], ""),
]


@pytest.mark.parametrize(("argv", "canonical"), NEW_STYLE)
def test_every_new_spelling_parses_to_the_canonical_options(argv: list[str], canonical: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        args = _parse(argv)
    assert sct.sharding_options(args) == parse_options(canonical)
    assert json.loads(args.to_json_string())["sharded_ddp"] == canonical
    assert f"sharded_ddp={canonical}," in str(args)


@pytest.mark.parametrize("argv", [["--sharded_ddp"], ["--sharded_ddp", "--do_train"], ["--sharded_ddp", "True"]])
def test_the_legacy_boolean_means_simple_and_names_the_new_spelling(argv: list[str]) -> None:
    with pytest.warns(FutureWarning, match="--sharded_ddp simple"):
        args = _parse(argv)
    assert sct.sharding_options(args) == parse_options("simple")


def test_on_each_release_the_field_holds_what_4_30_held() -> None:
    """4.30's list of ShardedDDPOption (the release's own enum where it has one); the rest only in .options."""
    from shardcompat.transformers._sharded_ddp_option import ShardedDDPOption

    args = _parse(["--sharded_ddp", "zero_dp_3", "offload", "bucket_cap_mb=50"])
    enum = transformers.trainer_utils.ShardedDDPOption if RELEASE_HAS_FIELD else ShardedDDPOption
    assert args.sharded_ddp == [enum.ZERO_DP_3, enum.OFFLOAD] and enum.OFFLOAD in args.sharded_ddp
    assert [enum(o).value for o in args.sharded_ddp] == ["zero_dp_3", "offload"] and len(args.sharded_ddp) == 2
    assert args.sharded_ddp.options == parse_options("zero_dp_3 offload bucket_cap_mb=50")
    assert _parse([]).sharded_ddp == [] and _parse(["--sharded_ddp", "zero_dp_1"]).sharded_ddp == [enum.SIMPLE]
    # a copy (dataclasses.replace) or a pickle (training_args.bin) keeps every option
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # replace() hands every 4.x field back (said elsewhere)
        assert sct.sharding_options(dataclasses.replace(args)) == args.sharded_ddp.options
    import pickle

    assert pickle.loads(pickle.dumps(args)).sharded_ddp.options == args.sharded_ddp.options


def test_a_keyword_boolean_warns_at_the_callers_line() -> None:
    with pytest.warns(FutureWarning, match="legacy boolean") as record:
        args = sct.TrainingArguments("out", report_to="none", sharded_ddp=True)
    assert record[0].filename == __file__
    assert sct.sharding_options(args) == parse_options("simple")


def test_a_bad_word_is_a_usage_error_naming_the_closest_word(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        _parse(["--sharded_ddp", "zero_dp3", "offload"])
    assert caught.value.code == 2
    assert "did you mean 'zero_dp_3'" in capsys.readouterr().err
    with pytest.raises(ShardingOptionsError, match="did you mean 'zero_dp_3'"):
        sct.TrainingArguments("out", report_to="none", sharded_ddp="zero_dp3")


def test_sharded_ddp_and_fsdp_together_are_refused() -> None:
    with pytest.raises(sct.ShardedDDPArgumentError, match="both shard the model; keep one"):
        sct.TrainingArguments("out", report_to="none", sharded_ddp="zero_dp_2", fsdp="full_shard")


def test_json_config_files_take_the_field_too(tmp_path: Path) -> None:
    config = tmp_path / "args.json"
    config.write_text(json.dumps({"output_dir": str(tmp_path), "report_to": "none", "sharded_ddp": "zero_dp_2 offload"}))
    (args,) = sct.HfArgumentParser(sct.TrainingArguments).parse_json_file(str(config))
    assert sct.sharding_options(args) == parse_options("zero_dp_2 offload")


def test_seq2seq_arguments_are_both_kinds() -> None:
    args = _parse(["--sharded_ddp", "zero_dp_3", "--predict_with_generate"], sct.Seq2SeqTrainingArguments)
    assert isinstance(args, sct.TrainingArguments) and isinstance(args, transformers.Seq2SeqTrainingArguments)
    assert args.predict_with_generate and sct.sharding_options(args) == parse_options("zero_dp_3")


@dataclasses.dataclass
class ScriptArguments:
    """A script's own dataclass that declared the flag itself, as some research code did."""

    sharded_ddp: str = ""
    flag: bool = dataclasses.field(default=False)


@pytest.mark.parametrize(
    ("argv", "value"),
    [([], ""), (["--sharded_ddp", "zero_dp_2", "offload"], "zero_dp_2 offload"), (["--sharded_ddp", "--flag"], "simple")],
)
def test_the_parser_gives_a_scripts_own_field_every_spelling_as_the_canonical_string(argv: list[str], value: str) -> None:
    with warnings.catch_warnings(record=True):  # the bare flag warns (tested above)
        (args,) = sct.HfArgumentParser(ScriptArguments).parse_args_into_dataclasses(argv)
    assert args.sharded_ddp == value


@pytest.mark.skipif(not RELEASE_HAS_FIELD, reason="this Transformers release has no sharded_ddp field of its own")
def test_the_parser_hands_a_releases_own_field_the_canonical_string() -> None:
    parser = sct.HfArgumentParser(transformers.TrainingArguments)
    (args,) = parser.parse_args_into_dataclasses(["--output_dir", "out", "--report_to", "none", "--sharded_ddp", "zero_dp_3", "auto_wrap"])
    assert [o.value for o in args.sharded_ddp] == ["zero_dp_3", "auto_wrap"]


def test_to_trainer_kwargs_is_the_fsdp_config_form_with_every_caveat_said() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kwargs = sct.to_trainer_kwargs("zero_dp_3 offload auto_wrap")
    assert kwargs == {"fsdp": True, "fsdp_config": {"version": 2, "reshard_after_forward": True, "cpu_offload": True,
                                                    "auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}}
    args = transformers.TrainingArguments("out", report_to="none", **kwargs)  # the release takes them
    assert args.fsdp_config["cpu_offload"] is True
    with pytest.warns(UserWarning, match="shards only optimizer state"):
        assert sct.to_trainer_kwargs("simple")["fsdp_config"]["reshard_after_forward"] is False
    assert sct.to_trainer_kwargs("") == {}


def test_the_dropins_replace_transformers_names_and_are_put_back() -> None:
    import transformers.trainer

    originals = (transformers.Trainer, transformers.trainer.Trainer, transformers.HfArgumentParser)
    with sct.dropins():
        assert transformers.Trainer is sct.Trainer and transformers.trainer.Trainer is sct.Trainer
        assert transformers.TrainingArguments is sct.TrainingArguments
        assert transformers.Seq2SeqTrainer is sct.Seq2SeqTrainer
        assert transformers.HfArgumentParser is sct.HfArgumentParser
        assert sct.sharding_options(_parse(["--sharded_ddp", "zero_dp_2"])) == parse_options("zero_dp_2")
    assert (transformers.Trainer, transformers.trainer.Trainer, transformers.HfArgumentParser) == originals


# ---------------------------------------------------------------------- refused at start
def _trainer(options: str, **kwargs: Any) -> Any:
    from tests.transformers._runs import Tokens, build_model

    trainer_kwargs = {k: kwargs.pop(k) for k in ("optimizers", "model_init", "backend") if k in kwargs}
    args = sct.TrainingArguments("out", report_to="none", use_cpu=True, sharded_ddp=options, **kwargs)
    model = None if "model_init" in trainer_kwargs else build_model("gpt2")
    return sct.Trainer(model=model, args=args, train_dataset=Tokens("gpt2", 8, 1), eval_dataset=Tokens("gpt2", 4, 2),
                       **trainer_kwargs)


def _eval_strategy() -> str:
    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    return "eval_strategy" if "eval_strategy" in fields else "evaluation_strategy"


REFUSED = [
    ("optimizers", lambda: {"optimizers": (_adamw(), None)}, "built on the unsharded model"),
    ("model_init", lambda: {"model_init": _gpt2}, "Pass model= instead"),
    ("bf16_full_eval", lambda: {"bf16_full_eval": True}, "cast the shards"),
    ("torch_compile", lambda: {"torch_compile": True}, "Drop --torch_compile"),
    ("auto_find_batch_size", lambda: {"auto_find_batch_size": True}, "--per_device_train_batch_size"),
    ("load_best_model_at_end", lambda: {"load_best_model_at_end": True, _eval_strategy(): "steps", "save_strategy": "steps"},
     "best_model_checkpoint with from_pretrained"),
]


def _gpt2() -> Any:
    from tests.transformers._runs import build_model

    return build_model("gpt2")


def _adamw() -> Any:
    import torch

    return torch.optim.AdamW(_gpt2().parameters())


@pytest.mark.parametrize(("name", "kwargs", "fix"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_a_sharded_run_cannot_do_is_refused_at_start_with_the_fix(name: str, kwargs: Any, fix: str) -> None:
    with pytest.raises(sct.ShardedTrainerError, match="--sharded_ddp: ") as caught:
        _trainer("zero_dp_3", **kwargs())
    assert fix in str(caught.value)
    _trainer("", **kwargs())  # the same arguments without sharding are the release's business


def test_conflicting_mixed_precision_is_refused() -> None:
    with pytest.raises(sct.ShardedTrainerError, match="mixed_precision=fp16 but --bf16 is set"):
        _trainer("zero_dp_3 mixed_precision=fp16", bf16=True)
    assert _trainer("zero_dp_3", bf16=True)._sharding == parse_options("zero_dp_3 mixed_precision=bf16")


def test_options_no_backend_serves_here_are_refused_at_start() -> None:
    from shardcompat.backends import NoBackendAvailable

    with pytest.raises(NoBackendAvailable, match="torch-fsdp1"):
        _trainer("zero_dp_3 offload", backend="torch-fsdp1")  # FSDP1 offloads only with a GPU


def test_the_package_and_the_cli_do_not_import_transformers(tmp_path: Path) -> None:
    code = (
        "import sys, shardcompat.cli, shardcompat.transformers as t; shardcompat.cli.build_parser(); "
        "t.to_trainer_kwargs('zero_dp_2'); print('transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_without_transformers_the_classes_say_how_to_install_it() -> None:
    # sys.modules["transformers"] = None makes the import fail as if it were not installed.
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "try:\n    from shardcompat.transformers import Trainer\nexcept ImportError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "pip install 'shardcompat[transformers]'" in out.stdout


def test_shardcompat_run_checks_its_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from shardcompat.cli import main

    assert main(["run", str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err
    script = tmp_path / "script.py"
    script.write_text("raise SystemExit(3)\n")
    assert main(["run", "--nproc", "0", str(script)]) == 2
    assert main(["run", str(script), "--sharded_ddp", "zero_dp_2"]) == 3  # the script's own exit code
