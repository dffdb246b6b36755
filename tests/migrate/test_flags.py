"""The shared flag rules, on their own, plus idempotence on random command lines."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.formats.commands import command_segments, looks_like_command
from codemods.formats.spans import apply_spans
from codemods.rules.sharded_ddp.flags import argv_action, meaning, plan_argv, rewrite_commands


def migrate(text: str, to: str = "list", form: str = "config") -> str:
    return apply_spans(text, rewrite_commands(text, to=to, form=form).edits)  # type: ignore[arg-type]


@pytest.mark.parametrize(("before", "after"), [
    ("x --sharded_ddp --fp16", "x --sharded_ddp simple --fp16"),
    ("x --sharded_ddp", "x --sharded_ddp simple"),
    ("x --sharded_ddp \\\n --fp16", "x --sharded_ddp simple \\\n --fp16"),
    ("x --sharded_ddp; y", "x --sharded_ddp simple; y"),
    ("x --sharded_ddp && y", "x --sharded_ddp simple && y"),
    ("x --sharded_ddp || y", "x --sharded_ddp simple || y"),
    ("x --sharded_ddp | y", "x --sharded_ddp simple | y"),
    ("$(x --sharded_ddp)", "$(x --sharded_ddp simple)"),
    ("sh -c 'x --sharded_ddp'", "sh -c 'x --sharded_ddp simple'"),
    ("x --sharded_ddp > log", "x --sharded_ddp simple > log"),
    ("x --sharded_ddp True", "x --sharded_ddp simple"),
    ("x --sharded_ddp=1 y", "x --sharded_ddp=simple y"),
    ("x --sharded_ddp 'yes'", "x --sharded_ddp 'simple'"),
    ("x --sharded_ddp False --fp16", "x --fp16"),
    ("x --sharded_ddp=no", "x"),
    ("x \\\n  --sharded_ddp 0 \\\n  --fp16", "x \\\n  --fp16"),
    ("x \\\n  --fp16 \\\n  --sharded_ddp false\ny", "x \\\n  --fp16\ny"),
    ("x --sharded_ddp zero_dp_2", "x --sharded_ddp zero_dp_2"),
    ('x --sharded_ddp "zero_dp_3 offload"', 'x --sharded_ddp "zero_dp_3 offload"'),
    ("x --sharded_ddp simple", "x --sharded_ddp simple"),
    ("echo --sharded_ddp", "echo --sharded_ddp"),
    ("# x --sharded_ddp", "# x --sharded_ddp"),
    ("x --sharded_ddp_extra", "x --sharded_ddp_extra"),
])
def test_list_rules(before: str, after: str) -> None:
    assert migrate(before) == after


@pytest.mark.parametrize(("before", "after"), [
    ("x --sharded_ddp", "x --fsdp shard_grad_op"),
    ("x --sharded_ddp zero_dp_3 offload auto_wrap", 'x --fsdp "full_shard offload auto_wrap"'),
    ("x --sharded_ddp=zero_dp_2", "x --fsdp=shard_grad_op"),
    ("x --sharded_ddp 'zero_dp_3 offload'", "x --fsdp 'full_shard offload'"),
    ("x --sharded_ddp false", "x"),
])
def test_fsdp_string_rules(before: str, after: str) -> None:
    assert migrate(before, "fsdp", "string") == after


_NO_WRAP = '"auto_wrap_policy": "NO_WRAP"'


@pytest.mark.parametrize(("before", "after"), [
    ("x --sharded_ddp --fp16",
     f"x --fsdp --fsdp_config '{{\"version\": 2, \"reshard_after_forward\": false, {_NO_WRAP}}}' --fp16"),
    ("x --sharded_ddp=zero_dp_3",
     f"x --fsdp --fsdp_config '{{\"version\": 2, \"reshard_after_forward\": true, {_NO_WRAP}}}'"),
    ("x --sharded_ddp zero_dp_3 offload",
     f"x --fsdp --fsdp_config '{{\"version\": 2, \"reshard_after_forward\": true, \"cpu_offload\": true, {_NO_WRAP}}}'"),
    ("x --sharded_ddp false --fp16", "x --fp16"),
])
def test_fsdp_config_rules(before: str, after: str) -> None:
    assert migrate(before, "fsdp") == after


def test_fsdp_matches_the_grammar() -> None:
    import json
    import shlex

    from shardcompat.options import parse_options

    for words in ("zero_dp_3", "zero_dp_2", "zero_dp_3 offload", "zero_dp_2 auto_wrap", "simple",
                  "zero_dp_3 auto_wrap wrap=GPT2Block"):
        out = migrate(f'x --sharded_ddp "{words}"', "fsdp", "string")
        if parse_options(words).to_hf_fsdp().fsdp_config:
            assert out == f'x --sharded_ddp "{words}"'  # the 4.x words cannot carry it: left, warned
        else:
            assert out == f'x --fsdp "{parse_options(words).to_hf_fsdp().fsdp}"'
        argv = shlex.split(migrate(f'x --sharded_ddp "{words}"', "fsdp"))
        assert argv[:3] == ["x", "--fsdp", "--fsdp_config"]
        assert json.loads(argv[3]) == parse_options(words).to_hf_fsdp_config().fsdp_config


@pytest.mark.parametrize("outer", ["'", '"'])
def test_fsdp_config_inside_quotes_reaches_the_inner_command(outer: str) -> None:
    import json
    import shlex

    from shardcompat.options import parse_options

    out = migrate(f"bash -c {outer}python t.py --sharded_ddp zero_dp_2 --fp16{outer}", "fsdp")
    shell, option, inner = shlex.split(out)
    assert (shell, option) == ("bash", "-c")
    argv = shlex.split(inner)
    assert argv[:4] == ["python", "t.py", "--fsdp", "--fsdp_config"] and argv[5:] == ["--fp16"]
    assert json.loads(argv[4]) == parse_options("zero_dp_2").to_hf_fsdp_config().fsdp_config


def test_offload_alone_says_what_it_needs() -> None:
    found = rewrite_commands('x --sharded_ddp="offload"')
    assert not found.edits and found.issues[0].rule == "unknown-value"
    assert "'offload' can't work on its own; it needs 'zero_dp_2' or 'zero_dp_3'" in found.issues[0].message
    assert "not a literal" not in found.issues[0].message


def test_values_that_are_not_literals_warn() -> None:
    found = rewrite_commands("x --sharded_ddp $MODE")
    assert not found.edits and [i.rule for i in found.issues] == ["unknown-value"]


def test_meaning() -> None:
    assert meaning(None).kind == "true"
    assert meaning("YES").kind == "true" and meaning("0").kind == "false"
    assert meaning("zero_dp_2 offload").kind == "list"
    assert meaning("nonsense").kind == "unknown"


def test_argv() -> None:
    assert argv_action(None, "list").kind == "insert"
    assert argv_action("--fp16", "list").kind == "insert"
    assert argv_action("true", "list").kind == "replace"
    assert argv_action("false", "list").kind == "drop"
    assert argv_action("zero_dp_2", "list").kind == "leave"
    assert argv_action(None, "list", opaque=True).kind == "warn"
    assert [s.drop for s in plan_argv(["--sharded_ddp=0"], "list")] == [(0,)]


def test_prose_guard_and_segments() -> None:
    assert looks_like_command("python train.py --sharded_ddp")
    assert looks_like_command("--fp16 --sharded_ddp")
    assert not looks_like_command("Enable --sharded_ddp to shard")
    text = "a; b && c # d\ne"
    assert [text[a:b].strip() for a, b in command_segments(text)] == ["a", "b", "c", "e"]


_WORDS = st.sampled_from(["python", "train.py", "--fp16", "--sharded_ddp", "--sharded_ddp=true",
                          "true", "false", "no", "1", "zero_dp_2", "offload", "'zero_dp_3 offload'",
                          "\\\n", ";", "&&", "|", "echo", "--seed", "42", "\n", "#", "$X"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_WORDS, min_size=1, max_size=14), st.sampled_from([("list", "config"), ("fsdp", "config"),
                                                                   ("fsdp", "string")]))
def test_idempotent_on_random_command_lines(words: list[str], target: tuple[str, str]) -> None:
    to, form = target
    text = " ".join(words)
    once = migrate(text, to, form)
    assert migrate(once, to, form) == once
    if to == "list" and not {"#", "echo"} & set(words) and not rewrite_commands(text).issues:
        for match in _AFTER_FLAG.finditer(once):
            assert meaning(match.group(1).strip("'")).kind == "list", (text, once)


_AFTER_FLAG = re.compile(r"--sharded_ddp(?:=|[ \t]+(?:\\\n[ \t]*)*)(\S+)")


@pytest.mark.parametrize(("line", "expected"), [
    ("--sharded_ddp false --sharded_ddp false", ""),
    ("python run.py --sharded_ddp false --sharded_ddp false --fp16", "python run.py --fp16"),
    ("python run.py --sharded_ddp false  --sharded_ddp=false", "python run.py"),
])
def test_repeated_false_flags_all_go_in_one_run(line: str, expected: str) -> None:
    """Each dropped flag takes the blank beside it; two in a row overlapped on that blank and the
    second stayed until a second run (found by the idempotence property)."""
    assert migrate(line) == expected
