"""The same sharding options text gets the same answer from every entry point.

``parse_options``, ``shardcompat explain`` and ``shardcompat train``'s flag (each quoted, and
unquoted as a shell splits it), ``prepare()``, ``add_sharded_ddp_argument`` and the Transformers
``TrainingArguments`` drop-in each answer a text with one canonical form or one refusal, and
with the same warnings (``ShardingOptionsWarning`` for repeated words and separator-only
text, ``FutureWarning`` for the legacy boolean).  A fixed corpus runs in the default suite;
the grammar fuzz's generator drives the same check in the reliability suite.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import shardcompat.adapter
from shardcompat import ShardingOptionsError, add_sharded_ddp_argument, parse_options
from shardcompat.cli import main
from shardcompat.options import ShardingOptions, ShardingOptionsWarning
from shardcompat.train import configure_parser
from tests.reliability.test_grammar_fuzz import _TEXT


@dataclass(frozen=True)
class Answer:
    canonical: str | None  # None: refused
    message: str  # the refusal's text (as the entry point shows it), else ""
    warned: frozenset[str]  # categories of the warnings it gave

    def same_as(self, other: Answer, *, exact_message: bool) -> bool:
        if (self.canonical, self.warned) != (other.canonical, other.warned):
            return False
        return self.canonical is not None or not exact_message or other.message in self.message


@contextlib.contextmanager
def _recording() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _answer(call: Callable[[], ShardingOptions]) -> Answer:
    """Run one entry point; a usage error (argparse, the CLI) is a refusal with its stderr."""
    stderr = io.StringIO()
    with _recording() as caught, contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            options = call()
        except ShardingOptionsError as error:
            return Answer(None, str(error), _categories(caught, stderr.getvalue()))
        except SystemExit as done:
            assert done.code == 2, done.code
            return Answer(None, stderr.getvalue(), _categories(caught, stderr.getvalue()))
    return Answer(str(options), "", _categories(caught, stderr.getvalue()))


def _categories(caught: list[warnings.WarningMessage], stderr: str) -> frozenset[str]:
    wanted = (ShardingOptionsWarning, FutureWarning)
    found = {w.category.__name__ for w in caught if issubclass(w.category, wanted)}
    if "warning: " in stderr and "legacy boolean" in stderr:  # the CLI prints FutureWarnings as itself
        found.add("FutureWarning")
    return frozenset(found)


def _parsed(parser: argparse.ArgumentParser, argv: list[str]) -> ShardingOptions:
    options: ShardingOptions = parser.parse_args(argv).sharded_ddp
    return options


def _train_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardcompat train")
    configure_parser(parser)
    return parser


def _plain_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="script.py")
    add_sharded_ddp_argument(parser)
    return parser


class _Parsed(Exception):
    def __init__(self, options: ShardingOptions) -> None:
        self.options = options


def _prepare(text: str) -> ShardingOptions:
    """``prepare()`` up to its parsed options: what it would resolve a backend for."""

    def stop(options: ShardingOptions, *_: Any) -> Any:
        raise _Parsed(options)

    saved = shardcompat.adapter.resolve, shardcompat.adapter.placement_from_env
    shardcompat.adapter.resolve = stop  # type: ignore[assignment]
    shardcompat.adapter.placement_from_env = lambda *_: None  # type: ignore[assignment,return-value]
    try:
        shardcompat.prepare(torch.nn.Linear(2, 2), torch.optim.SGD, text, optimizer_kwargs={"lr": 0.1})
    except _Parsed as parsed:
        return parsed.options
    finally:
        shardcompat.adapter.resolve, shardcompat.adapter.placement_from_env = saved
    raise AssertionError("prepare() went past resolve")


def _explain(text: str | list[str]) -> ShardingOptions:
    """``shardcompat explain --json`` of one quoted text, or of the words a shell split it into."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["explain", "--json", "--", *([text] if isinstance(text, str) else text)])
    return parse_options(json.loads(out.getvalue())["options"])  # the canonical form it printed


def _training_arguments(text: str) -> ShardingOptions:
    transformers = pytest.importorskip("transformers")
    del transformers
    import shardcompat.transformers as sct

    args = sct.TrainingArguments("/tmp/shardcompat-entry-points", sharded_ddp=text, report_to="none")
    return sct.sharding_options(args)


def _entry_points(text: str, with_transformers: bool) -> dict[str, tuple[Answer, bool]]:
    """Each entry point's answer, and whether its refusal text must be parse_options' own."""
    answers = {
        "parse_options": (_answer(lambda: parse_options(text)), True),
        "prepare()": (_answer(lambda: _prepare(text)), True),
        "explain": (_answer(lambda: _explain(text)), True),
        "train --sharded_ddp='...'": (_answer(lambda: _parsed(_train_parser(), [f"--sharded_ddp={text}"])), True),
        "add_sharded_ddp_argument": (_answer(lambda: _parsed(_plain_parser(), [f"--sharded_ddp={text}"])), True),
    }
    words = text.split()
    # Unquoted, as a shell splits it; no words is the bare flag (legacy 'simple'), and a word
    # that starts with '-' is argparse's next option, not ours.
    if words and not any(w.startswith("-") for w in words):
        answers["train --sharded_ddp ..."] = (_answer(lambda: _parsed(_train_parser(), ["--sharded_ddp", *words])), False)
        answers["parse_options(words)"] = (_answer(lambda: parse_options(words)), False)
        answers["explain ..."] = (_answer(lambda: _explain(words)), False)
    if with_transformers:
        answers["TrainingArguments"] = (_answer(lambda: _training_arguments(text)), True)
    return answers


def check_agreement(text: str, with_transformers: bool) -> Answer:
    answers = _entry_points(text, with_transformers)
    reference = answers["parse_options"][0]
    for name, (answer, exact) in answers.items():
        assert answer.same_as(reference, exact_message=exact), (text, name, answer, reference)
    return reference


def _has_transformers() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


CORPUS = [
    "", " ", ",", " ; , ", "simple", "zero_dp_2 zero_dp_2", "zero_dp_3 offload offload", "zero_dp_3 full_shard",
    "stage=3 zero_dp_3", "zero_dp_2 bucket_cap_mb=5 bucket_cap_mb=5.0", "zero_dp_2 bucket_cap_mb=5 bucket_cap_mb=6",
    "zero_dp_3 wrap=Block, Linear", "zero_dp_3;auto_wrap", "ZERO-DP-3 Offload", "True", "false", "yes",
    "zero_dp3", "simple offload", "zero_dp_2 zero_dp_3", "true zero_dp_2", "hybrid_shard", "backend=torch-fsdp2 zero_dp_2",
    "zero_dp_3\tauto_wrap\nmin_num_params=1000", "offload", "mixed_precision=bf16 zero_dp_3",
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("text", CORPUS, ids=repr)
def test_every_entry_point_gives_the_same_answer(text: str) -> None:
    check_agreement(text, _has_transformers())


@pytest.mark.parametrize(
    ("text", "canonical", "warning"),
    [
        ("zero_dp_2 zero_dp_2", "zero_dp_2", "'zero_dp_2' repeats what 'zero_dp_2 zero_dp_2' already says; the options are 'zero_dp_2'"),
        ("zero_dp_3 offload offload", "zero_dp_3 offload", "'offload' repeats"),
        (" ; , ", "", "hold no option (only separators): they mean off, plain DDP"),
    ],
)
def test_repeats_and_empty_text_say_what_they_became(text: str, canonical: str, warning: str) -> None:
    with pytest.warns(ShardingOptionsWarning, match=warning.replace("(", r"\(").replace(")", r"\)")):
        assert str(parse_options(text)) == canonical


def test_the_empty_string_is_off_without_a_warning() -> None:
    """``""`` is Transformers' own default for ``sharded_ddp`` and what shardcompat-migrate
    writes for ``False``: off, as ``None`` is (documented in the option reference)."""
    with _recording() as caught:
        assert parse_options("") == parse_options(None) == ShardingOptions()
    assert not [w for w in caught if issubclass(w.category, (ShardingOptionsWarning, FutureWarning))]


@pytest.mark.reliability
@pytest.mark.timeout(1800)
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(_TEXT)
def test_fuzzed_text_gets_the_same_answer_everywhere(text: str) -> None:
    check_agreement(text, _has_transformers())
