"""The one rule for inline code in Markdown and reStructuredText prose."""

from __future__ import annotations

import pytest

from codemods.formats.markdown import rewrite_markdown, rewrite_rst
from codemods.formats.spans import apply_spans
from codemods.run.context import Settings


def md(text: str) -> str:
    return apply_spans(text, rewrite_markdown(text, Settings()).edits)


def rst(text: str) -> str:
    return apply_spans(text, rewrite_rst(text, Settings()).edits)


@pytest.mark.parametrize("sentence", [
    "Add `--sharded_ddp` to the command line.",
    "To save memory, pass `--sharded_ddp` to `finetune.py`.",
    "Run the script with `--fp16` and use `--sharded_ddp` on 2 GPUs.",
    "The main benefit of enabling `--sharded_ddp` is memory.",
    "Just specify `--sharded_ddp` when you launch it.",
    "Then run `python train.py --sharded_ddp`.",
    "`--sharded_ddp --fp16` is the fastest.",
])
def test_instructions_are_rewritten(sentence: str) -> None:
    assert md(sentence + "\n") == sentence.replace("--sharded_ddp", "--sharded_ddp simple", 1) + "\n"


@pytest.mark.parametrize("sentence", [
    "This release brings the new `--sharded_ddp` and `--deepspeed` arguments.",
    "The `--sharded_ddp` flag enables sharding.",
    "Do not use `--sharded_ddp` on TPUs.",
    "Without `--sharded_ddp` the batch size is 16.",
    "Replace `--sharded_ddp` with `--sharded_ddp simple`.",
    "Instead of `--sharded_ddp`, write the mode.",
    "It was called `--sharded_ddp` back then.",
    "| `--sharded_ddp --fp16` | 30 | 17.38 |",
    "`--sharded_ddp zero_dp_2` is already in the list syntax.",
])
def test_mentions_are_left(sentence: str) -> None:
    assert md(sentence + "\n") == sentence + "\n"


def test_list_items_are_decided_together() -> None:
    listing = ("Next, re-run the benchmark adding one of the following:\n\n"
               "1. `--fp16`\n2. `--sharded_ddp` (fairscale)\n3. `--sharded_ddp --fp16` (fairscale)\n")
    assert md(listing) == listing.replace("`--sharded_ddp`", "`--sharded_ddp simple`").replace(
        "`--sharded_ddp --fp16`", "`--sharded_ddp simple --fp16`")
    # without the lead-in, the one fragment decides for its siblings
    items = "- `--sharded_ddp` alone\n- `--sharded_ddp --fp16` with half precision\n"
    assert md(items) == "- `--sharded_ddp simple` alone\n- `--sharded_ddp simple --fp16` with half precision\n"
    # a reference list of options only names them
    reference = "Options:\n\n- `--sharded_ddp`: shards optimizer state\n- `--deepspeed`: DeepSpeed\n"
    assert md(reference) == reference


def test_rst_roles_and_wrapped_literals() -> None:
    text = ("Add ``--sharded_ddp`` to the command line, or :obj:`--sharded_ddp` with ``--fp16``.\n"
            "The :obj:`--sharded_ddp` argument is experimental; use :obj:`--sharded_ddp\n"
            "zero_dp_2` for ZeRO-2.\n")
    assert rst(text) == text.replace("Add ``--sharded_ddp``", "Add ``--sharded_ddp simple``").replace(
        "or :obj:`--sharded_ddp` with", "or :obj:`--sharded_ddp simple` with")


def test_a_second_run_changes_nothing() -> None:
    text = ("Add `--sharded_ddp` to the command line.\n\n- `--sharded_ddp`\n- `--sharded_ddp --fp16`\n")
    once = md(text)
    assert once != text and md(once) == once
