"""YAML argv lists (block ``- --sharded_ddp`` and flow ``[--sharded_ddp]``) follow exactly the
argv rules JSON arrays follow: the same list comes out, whatever the form and quoting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.formats.config import rewrite_json, rewrite_yaml_steps
from codemods.formats.spans import apply_spans
from codemods.run.context import Settings
from codemods.run.engine import Job, process_file

Target = str


def migrate_yaml(text: str, to: Target = "list", form: str = "config") -> str:
    settings = Settings(to=to, fsdp_form=form)  # type: ignore[arg-type]
    return apply_spans(text, rewrite_yaml_steps(text, settings).edits)


def migrate_json(argv: list[str], to: Target = "list", form: str = "config") -> list[str]:
    text = json.dumps({"args": argv})
    settings = Settings(to=to, fsdp_form=form)  # type: ignore[arg-type]
    out: list[str] = json.loads(apply_spans(text, rewrite_json(text, settings).edits))["args"]
    return out


def block(argv: list[str], quotes: list[str], indent: str = "    ") -> str:
    """``spec.args`` as a block sequence, each item in its own quoting (no escapes needed here)."""
    return "spec:\n  args:\n" + "".join(f"{indent}- {q}{a}{q}\n" for a, q in zip(argv, quotes)) + "  other: 1\n"


def argv_of(text: str) -> list[str]:
    """The argv strings as written (node values: a plain ``True`` stays ``'True'``, as in JSON)."""
    node = yaml.compose(text)
    spec = next(v for k, v in node.value if k.value == "spec")
    args = next(v for k, v in spec.value if k.value == "args")
    return [item.value for item in args.value]


@pytest.mark.parametrize(("before", "after"), [
    (["--max_steps=10", "--sharded_ddp", "--fp16"], ["--max_steps=10", "--sharded_ddp", "simple", "--fp16"]),
    (["--sharded_ddp"], ["--sharded_ddp", "simple"]),
    (["--sharded_ddp", "true"], ["--sharded_ddp", "simple"]),
    (["--sharded_ddp", "True", "--fp16"], ["--sharded_ddp", "simple", "--fp16"]),
    (["--sharded_ddp=true"], ["--sharded_ddp=simple"]),
    (["--sharded_ddp", "false", "--fp16"], ["--fp16"]),
    (["--fp16", "--sharded_ddp=0"], ["--fp16"]),
    (["--sharded_ddp", "no", "--sharded_ddp=false", "--fp16"], ["--fp16"]),  # one edit, not two overlapping
    (["--sharded_ddp=0", "--sharded_ddp", "False"], []),
    (["--sharded_ddp", "zero_dp_2"], ["--sharded_ddp", "zero_dp_2"]),
    (["--sharded_ddp=zero_dp_3 offload"], ["--sharded_ddp=zero_dp_3 offload"]),
    (["--sharded_ddp", "simple", "--fp16"], ["--sharded_ddp", "simple", "--fp16"]),
])
@pytest.mark.parametrize("quote", ["", '"', "'"])
def test_block_list_rules(before: list[str], after: list[str], quote: str) -> None:
    text = block(before, [quote] * len(before))
    once = migrate_yaml(text)
    assert argv_of(once) == after == migrate_json(before)
    assert migrate_yaml(once) == once
    if quote and before != after:  # new elements take the quoting of their neighbour
        items = [line for line in once.splitlines() if line.startswith("    - ")]
        assert all(line.startswith(f"    - {quote}") for line in items)


def test_block_item_layout_is_kept() -> None:
    text = ("args:   # argv\n"
            "    - --sharded_ddp   # off\n"
            "\n"
            "    # the value, after a blank line\n"
            "    - \"false\"\n"
            "    -   --sharded_ddp   # on\n"
            "    - --fp16\n"
            "    - --sharded_ddp")  # no final newline
    assert migrate_yaml(text) == ("args:   # argv\n"
                                  "\n"
                                  "    # the value, after a blank line\n"
                                  "    -   --sharded_ddp   # on\n"
                                  "    -   simple\n"
                                  "    - --fp16\n"
                                  "    - --sharded_ddp\n"
                                  "    - simple")
    only = "args:\n  - --sharded_ddp\n  - 'false'\nnext: 1\n"
    assert migrate_yaml(only) == "args:\n    []\nnext: 1\n"  # an empty list, as JSON gives, not null
    assert yaml.safe_load(migrate_yaml(only))["args"] == []


def test_fsdp_target() -> None:
    text = block(["--sharded_ddp", "--sharded_ddp", "'yes'", "--sharded_ddp=zero_dp_3 offload"], ["", '"', "", "'"])
    assert argv_of(migrate_yaml(text, "fsdp", "string")) == ["--fsdp", "shard_grad_op", "--fsdp", "shard_grad_op",
                                                             "--fsdp=full_shard offload"]
    simple = json.dumps({"version": 2, "reshard_after_forward": False, "auto_wrap_policy": "NO_WRAP"})
    offload = json.dumps({"version": 2, "reshard_after_forward": True, "cpu_offload": True,
                          "auto_wrap_policy": "NO_WRAP"})
    assert argv_of(migrate_yaml(text, "fsdp")) == [
        "--fsdp", "--fsdp_config", simple, "--fsdp", "--fsdp_config", simple, "--fsdp", "--fsdp_config", offload]


def test_not_literal_or_not_in_place_warns() -> None:
    found = rewrite_yaml_steps("args:\n  - --sharded_ddp\n  - {inputValue: mode}\n", Settings())
    assert not found.edits and [i.rule for i in found.issues] == ["non-literal"]
    found = rewrite_yaml_steps("args:\n  - !!str --sharded_ddp\n  - --fp16\n", Settings())
    assert not found.edits and [i.rule for i in found.issues] == ["argv-layout"]
    found = rewrite_yaml_steps("base: &f --sharded_ddp\nargs:\n  - *f\n  - --fp16\n", Settings())
    assert not found.edits  # an alias: the anchored text is not an argv element


def test_shell_lines_still_follow_the_shell_rules() -> None:
    text = ("steps:\n"
            "  - script:\n"
            "      - python train.py --sharded_ddp\n"
            "containers:\n"
            "  - command: [/bin/sh, -c]\n"
            "    args:\n"
            "      - |\n"
            "        python train.py --sharded_ddp true\n"
            "  - command:\n"
            "      - bash\n"
            "      - -c\n"
            "      - python prepare.py --sharded_ddp && exec python train.py \"$@\"\n"
            "      - --\n"
            "      - --sharded_ddp\n")
    assert migrate_yaml(text) == (text.replace("--sharded_ddp\n", "--sharded_ddp simple\n")
                                  .replace("--sharded_ddp true", "--sharded_ddp simple")
                                  .replace("prepare.py --sharded_ddp", "prepare.py --sharded_ddp simple")
                                  .replace("      - --sharded_ddp simple\n", "      - --sharded_ddp\n      - simple\n"))


def test_invalid_yaml_is_reported_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    data = b"args:\n  - --sharded_ddp\n  - [unclosed\n"
    path.write_bytes(data)
    report = process_file(Job(str(path), path.name, "yaml", Settings()))
    assert report.error is not None and "does not parse as yaml" in report.error
    assert report.new_data is None and path.read_bytes() == data


_ITEMS = st.sampled_from(["--sharded_ddp", "--sharded_ddp=true", "--sharded_ddp=false", "--sharded_ddp=zero_dp_2",
                          "true", "false", "True", "no", "1", "yes", "zero_dp_2", "zero_dp_3 offload", "simple",
                          "--fp16", "--seed", "42", "out"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_ITEMS, st.sampled_from(["", '"', "'"])), min_size=1, max_size=10),
       st.sampled_from(["list", "fsdp"]), st.booleans())
def test_same_result_as_json_in_any_form(items: list[tuple[str, str]], to: Target, flow: bool) -> None:
    # both FSDP forms: the current one inserts two elements for one flag
    argv, quotes = [a for a, _ in items], [q for _, q in items]
    if flow:
        text = "spec:\n  args: [" + ", ".join(f"{q}{a}{q}" for a, q in items) + "]\n"
    else:
        text = block(argv, quotes, indent="  ")  # an indentless sequence, as kubectl writes them
    once = migrate_yaml(text, to)
    assert argv_of(once) == migrate_json(argv, to)
    assert migrate_yaml(once, to) == once
