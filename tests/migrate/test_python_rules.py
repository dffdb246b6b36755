"""Python rules of round two: a string that is only the flag, declarations that keep old command
lines working, the messages users read."""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

from codemods.formats.python import migrate_source
from codemods.run.context import Settings
from shardcompat import add_sharded_ddp_argument, parse_options

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "migrate"


def migrate(source: str) -> tuple[str, list[str]]:
    result = migrate_source(source, Settings())
    assert isinstance(result.code, str)
    return result.code, [w.rule for w in result.warnings]


@pytest.mark.parametrize(("before", "after"), [
    # an argv fragment: passed where command lines go, concatenated, split, appended
    ('run(extra_args_str="--sharded_ddp")', 'run(extra_args_str="--sharded_ddp simple")'),
    ('run(cmd_args="--sharded_ddp")', 'run(cmd_args="--sharded_ddp simple")'),
    ('launch_args = "--sharded_ddp"', 'launch_args = "--sharded_ddp simple"'),
    ('cmd = base + " --sharded_ddp"', 'cmd = base + " --sharded_ddp simple"'),
    ('cmd = base + " --sharded_ddp" + " --fp16"', 'cmd = base + " --sharded_ddp simple" + " --fp16"'),
    ('words = "--sharded_ddp".split()', 'words = "--sharded_ddp simple".split()'),
    ('argv.append("--sharded_ddp")', 'argv.extend(["--sharded_ddp", "simple"])'),
    ('job = {"args": "--sharded_ddp"}', 'job = {"args": "--sharded_ddp simple"}'),
])
def test_bare_flag_used_as_argv_is_rewritten(before: str, after: str) -> None:
    assert migrate(before + "\n") == (after + "\n", [])
    assert migrate(after + "\n") == (after + "\n", []), "idempotent"


@pytest.mark.parametrize("source", [
    'names = {"--sharded_ddp": "fairscale"}',
    'if "--sharded_ddp" in sys.argv: pass',
    'if flag == "--sharded_ddp": pass',
    'parser.add_argument("--sharded_ddp", type=str, default="")',
    'sys.argv.remove("--sharded_ddp")',
    'position = argv.index("--sharded_ddp")',
    'print("--sharded_ddp")',
])
def test_bare_flag_used_as_a_name_is_left_quietly(source: str) -> None:
    assert migrate(source + "\n") == (source + "\n", [])


@pytest.mark.parametrize("source", [
    'self.run_and_check("--sharded_ddp")',
    'FLAG = "--sharded_ddp"',
    'cmd = "--sharded_ddp " + mode',  # the value may follow in mode
    'return "--sharded_ddp"',
])
def test_bare_flag_that_stays_ambiguous_is_reported(source: str) -> None:
    assert migrate(source + "\n") == (source + "\n", ["bare-flag"])


def test_upstream_pair_now_says_the_same_thing() -> None:
    """Transformers' own test passed extra_args_str="--sharded_ddp" next to "--sharded_ddp --fp16";
    after the rewrite both strings mean 'simple', as PR #10354 made them."""
    after = (FIXTURES / "py_extra_args_str" / "after.py").read_text()
    parser = argparse.ArgumentParser()
    add_sharded_ddp_argument(parser)
    parser.add_argument("--fp16", action="store_true")
    values = []
    for line in after.splitlines():
        if 'extra_args_str="' in line:
            fragment = line.split('extra_args_str="', 1)[1].split('"', 1)[0]
            with warnings.catch_warnings():
                warnings.simplefilter("error", FutureWarning)  # no legacy form left
                values.append(parser.parse_args(fragment.split()).sharded_ddp)
    assert values == [parse_options("simple")] * 2


def _load(path: Path) -> ModuleType:
    """A fixture file as a module (registered while it runs: dataclasses look themselves up)."""
    name = f"_fixture_{path.parent.name}_{path.stem}"
    module = ModuleType(name)
    sys.modules[name] = module
    try:
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


# the script's own command lines from before the migration, and what they meant
OLD_INVOCATIONS = [
    ([], False),
    (["--sharded_ddp"], True),
    (["--sharded_ddp", "--fp16"], True),
    (["--fp16", "--sharded_ddp"], True),
    (["--model_name", "t5-small", "--sharded_ddp", "--fp16"], True),
]


@pytest.mark.parametrize(("argv", "meant"), OLD_INVOCATIONS)
def test_store_true_script_still_parses_its_old_command_lines(argv: list[str], meant: bool) -> None:
    before = _load(FIXTURES / "py_store_true_script" / "before.py").build_parser().parse_args(argv)
    after = _load(FIXTURES / "py_store_true_script" / "after.py").build_parser().parse_args(argv)
    assert before.sharded_ddp is meant
    assert bool(after.sharded_ddp) is meant, "'' (off) stays falsy, the bare flag is truthy"
    assert after.fp16 == before.fp16 and after.model_name == before.model_name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the old boolean: legacy on purpose
        assert parse_options(after.sharded_ddp) == parse_options(meant)  # the sharding the bool meant


def test_store_true_script_takes_the_list_syntax_too() -> None:
    parser = _load(FIXTURES / "py_store_true_script" / "after.py").build_parser()
    assert parser.parse_args(["--sharded_ddp", "zero_dp_3 offload"]).sharded_ddp == "zero_dp_3 offload"
    assert parser.parse_args(shlex.split("--sharded_ddp=zero_dp_2 --fp16")).sharded_ddp == "zero_dp_2"


def test_positional_arguments_get_a_note() -> None:
    source = ('parser.add_argument("data")\n'
              'parser.add_argument("--sharded_ddp", action="store_true")\n')
    result = migrate_source(source, Settings())
    assert [e.note for e in result.edits] == [
        "a positional argument right after a bare --sharded_ddp is now read as its value"]


def test_dataclass_field_keeps_the_bare_flag_with_hf_argument_parser() -> None:
    transformers = pytest.importorskip("transformers")
    after = _load(FIXTURES / "py_dataclass_field" / "after.py")
    parser = transformers.HfArgumentParser(after.ModelArguments)
    for argv, expected in (([], ""), (["--sharded_ddp"], "simple"), (["--sharded_ddp", "zero_dp_2"], "zero_dp_2")):
        (parsed,) = parser.parse_args_into_dataclasses(argv)
        assert parsed.sharded_ddp == expected


def test_messages_quote_the_changed_text_on_one_line() -> None:
    source = ("args = TrainingArguments(\n"
              "    output_dir='o',\n"
              "    sharded_ddp=True,\n"
              "    sharded_ddp_extra=1,\n"
              ")\n")
    (edit,) = migrate_source(source, Settings()).edits
    assert (edit.line, edit.before, edit.after) == (3, "sharded_ddp=True", 'sharded_ddp="simple"')


def test_offload_alone_names_the_stage_it_needs() -> None:
    result = migrate_source('args = TrainingArguments(sharded_ddp="offload")\n', Settings())
    (warning,) = result.warnings
    assert warning.rule == "unknown-value"
    assert "'offload' can't work on its own; it needs 'zero_dp_2' or 'zero_dp_3'" in warning.message


def test_passing_the_option_on_is_not_warned_when_this_file_declares_it() -> None:
    declared = ('parser.add_argument("--sharded_ddp", type=str, choices=["simple", "zero_dp_2", ""])\n'
                "args = parser.parse_args()\n"
                "training = TrainingArguments(output_dir='o', sharded_ddp=args.sharded_ddp)\n")
    assert migrate(declared) == (declared, [])
    elsewhere = "training = TrainingArguments(output_dir='o', sharded_ddp=args.sharded_ddp)\n"
    assert migrate(elsewhere) == (elsewhere, ["non-literal"])
