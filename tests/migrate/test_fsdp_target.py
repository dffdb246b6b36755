"""``--to fsdp`` output is what the installed Transformers accepts: ``TrainingArguments`` built
from the rewritten Python, and ``HfArgumentParser`` fed the rewritten command lines and
configs, in the current form (``fsdp=True`` + ``fsdp_config``) and in the 4.x string form."""

from __future__ import annotations

import json
import logging
import shlex
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from codemods.formats.config import rewrite_json, rewrite_keys, rewrite_yaml
from codemods.formats.python import migrate_source
from codemods.formats.shell import rewrite_shell
from codemods.formats.spans import apply_spans
from codemods.run.context import Settings
from shardcompat.options import parse_options

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

CONFIG = Settings(to="fsdp")
STRING = Settings(to="fsdp", fsdp_form="string")
VALUES = ["True", '"simple"', '"zero_dp_2"', '"zero_dp_3 offload"', '["zero_dp_3", "auto_wrap"]',
          '"zero_dp_3 auto_wrap wrap=GPT2Block"', '"zero_dp_2 offload auto_wrap min_num_params=1000"']


def _options(value: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        literal = json.loads(value.lower() if value == "True" else value)
        return parse_options(literal if not isinstance(literal, list) else " ".join(literal))


def _build(code: str, out: Path) -> Any:
    """Run rewritten code that builds ``args = TrainingArguments(...)``; returns ``args``."""
    scope: dict[str, Any] = {"TrainingArguments": transformers.TrainingArguments, "OUT": str(out)}
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "<rewritten>", "exec"), scope)
    return scope["args"]


def _expected(options: Any) -> dict[str, Any]:
    return options.to_hf_fsdp_config().fsdp_config  # type: ignore[no-any-return]


@pytest.mark.parametrize("value", VALUES)
def test_python_keyword_current_form(value: str, tmp_path: Path) -> None:
    source = f"args = TrainingArguments(output_dir=OUT, use_cpu=True, sharded_ddp={value})\n"
    result = migrate_source(source, CONFIG)
    assert "sharded_ddp" not in str(result.code) and not result.warnings
    args = _build(str(result.code), tmp_path)
    assert args.fsdp is True
    expected = _expected(_options(value))
    assert {k: args.fsdp_config[k] for k in expected} == expected, "Transformers keeps what was written"


@pytest.mark.parametrize("value", VALUES)
def test_python_keyword_string_form(value: str, tmp_path: Path) -> None:
    source = f"args = TrainingArguments(output_dir=OUT, use_cpu=True, sharded_ddp={value})\n"
    result = migrate_source(source, STRING)
    options = _options(value)
    if options.to_hf_fsdp().fsdp_config:  # the 4.x words cannot carry wrap=/min_num_params=
        assert result.code == source and [w.rule for w in result.warnings] == ["fsdp-manual"]
        return
    args = _build(str(result.code), tmp_path)
    words = options.to_hf_fsdp().fsdp
    assert f'fsdp="{words}"' in str(result.code)
    # the installed release translates the deprecated words into the same config
    assert args.fsdp_config["reshard_after_forward"] == _expected(options)["reshard_after_forward"]
    assert bool(args.fsdp_config.get("cpu_offload")) == options.offload


def test_python_merges_into_a_literal_fsdp_config_and_dicts(tmp_path: Path) -> None:
    source = ('kwargs = {"output_dir": OUT, "use_cpu": True, "sharded_ddp": "zero_dp_3"}\n'
              'args = TrainingArguments(**kwargs)\n'
              'other = TrainingArguments(output_dir=OUT, use_cpu=True, sharded_ddp="zero_dp_2 offload",\n'
              '                          fsdp_config={"cpu_ram_efficient_loading": True})\n')
    result = migrate_source(source, CONFIG)
    assert not result.warnings
    code = str(result.code)
    args = _build(code, tmp_path)
    assert args.fsdp_config["reshard_after_forward"] is True
    other = _build(code.replace("args = TrainingArguments(**kwargs)\n", "").replace("other =", "args ="), tmp_path)
    assert other.fsdp_config["cpu_offload"] is True and other.fsdp_config["cpu_ram_efficient_loading"] is True


def test_python_off_stays_off(tmp_path: Path) -> None:
    result = migrate_source("args = TrainingArguments(output_dir=OUT, use_cpu=True, sharded_ddp=False)\n", CONFIG)
    assert not _build(str(result.code), tmp_path).fsdp


def _parse(argv: list[str]) -> Any:
    parser = transformers.HfArgumentParser(transformers.TrainingArguments)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (args,) = parser.parse_args_into_dataclasses(argv)
    return args


@pytest.mark.parametrize("settings", [CONFIG, STRING], ids=["current", "4.x"])
@pytest.mark.parametrize("value", ["", " zero_dp_2", ' "zero_dp_3 offload"', "=zero_dp_3"])
def test_shell_command_line(settings: Settings, value: str, tmp_path: Path) -> None:
    line = f"python run.py --output_dir {tmp_path} --use_cpu --sharded_ddp{value} --seed 1\n"
    new = apply_spans(line, rewrite_shell(line, settings).edits)
    assert "sharded_ddp" not in new
    args = _parse(shlex.split(new)[2:])
    options = _options(json.dumps(value.strip(' ="') or "simple"))
    assert args.seed == 1
    assert args.fsdp_config["reshard_after_forward"] == _expected(options)["reshard_after_forward"]
    assert bool(args.fsdp_config.get("cpu_offload")) == options.offload


@pytest.mark.parametrize("settings", [CONFIG, STRING], ids=["current", "4.x"])
def test_json_and_yaml_configs(settings: Settings, tmp_path: Path) -> None:
    parser = transformers.HfArgumentParser(transformers.TrainingArguments)
    text = json.dumps({"output_dir": str(tmp_path), "use_cpu": True, "sharded_ddp": "zero_dp_3 offload"})
    new_json = json.loads(apply_spans(text, rewrite_json(text, settings).edits))
    document = f"output_dir: {tmp_path}\nuse_cpu: true\nsharded_ddp: zero_dp_3 offload\n"
    new_yaml = yaml.safe_load(apply_spans(document, rewrite_yaml(document, settings).edits))
    toml = 'sharded_ddp = "zero_dp_3 offload"\n'
    assert "fsdp" in apply_spans(toml, rewrite_keys(toml, "toml", settings).edits)
    for config in (new_json, new_yaml):
        assert "sharded_ddp" not in config
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (args,) = parser.parse_dict(config)
        assert args.fsdp_config["reshard_after_forward"] is True and args.fsdp_config["cpu_offload"] is True


def test_argv_lists(tmp_path: Path) -> None:
    text = json.dumps({"args": ["--output_dir", str(tmp_path), "--use_cpu", "--sharded_ddp", "--seed", "2"]})
    argv = json.loads(apply_spans(text, rewrite_json(text, CONFIG).edits))["args"]
    args = _parse(argv)
    assert args.seed == 2 and args.fsdp_config["reshard_after_forward"] is False
    document = f"args:\n  - --output_dir\n  - {tmp_path}\n  - --use_cpu\n  - --sharded_ddp\n  - zero_dp_3\n"
    argv = yaml.safe_load(apply_spans(document, rewrite_yaml(document, CONFIG).edits))["args"]
    assert _parse(argv).fsdp_config["reshard_after_forward"] is True


def test_each_edit_says_what_is_not_equivalent() -> None:
    result = migrate_source("args = TrainingArguments(sharded_ddp=True)\n", CONFIG)
    (edit,) = result.edits
    assert edit.rule == "to-fsdp" and "'simple' shards only optimizer state" in edit.note


def test_python_command_strings_split_either_way(tmp_path: Path) -> None:
    """A command string that is .split() gets compact, unquoted JSON; one run through a shell
    (or shlex) gets a quoted word."""
    source = (f'words = "--output_dir {tmp_path} --use_cpu --sharded_ddp zero_dp_3 --seed 3".split()\n'
              f'cmd = "--output_dir {tmp_path} --use_cpu --sharded_ddp zero_dp_3 --seed 3"\n')
    result = migrate_source(source, CONFIG)
    scope: dict[str, Any] = {}
    exec(str(result.code), scope)
    for argv in (scope["words"], shlex.split(scope["cmd"])):
        args = _parse(argv)
        assert args.seed == 3 and args.fsdp_config["reshard_after_forward"] is True
    assert [e.note for e in result.edits] == [
        "the fsdp_config JSON is written without spaces or quotes for this .split()",
        "the fsdp_config JSON is one shell word: run this command through a shell or shlex.split, not str.split"]
