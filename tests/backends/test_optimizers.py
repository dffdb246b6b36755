"""Optimizers beyond Adam on every backend: trained as plain DDP trains them, or refused at
``prepare()`` with the optimizer, the reason and the options that serve it.

2 gloo ranks, one process group for every case (``tests._parity``), the BlockModel (2-D
weights, biases and norms), 4 steps.  Served: losses within LOSS_TOL (relative) and final
parameters within PARAM_TOL of hand-built DDP with the same optimizer.  Refused: the error is
``UnsupportedOptimizer``, raised by ``prepare`` itself (no step was taken).  The expectations
below are written out, not read from the table the code refuses by, so the two are checked
against each other; the docs' table is that code table (``markdown_table``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import torch

from shardcompat.backends import get
from shardcompat.backends._optim import (
    LAYOUTS,
    UnsupportedOptimizer,
    check_groups,
    check_optimizer,
    markdown_table,
    optimizer_row,
)
from shardcompat.options import parse_options
from tests._parity import OPTIMIZERS, Case, Result, build_model, case_id, ddp_diff, run_cases

LOSS_TOL = 1e-3  # relative
PARAM_TOL = 1e-4
NAMES = {"sgd": "SGD", "adagrad": "Adagrad", "adafactor": "Adafactor", "hf-adafactor": "Adafactor",
         "groups": "AdamW"}
OPTIONS = {"torch-zero": "simple", "torch-fsdp1": "zero_dp_2", "torch-fsdp2": "zero_dp_3 auto_wrap",
           "fairscale-sdp": "simple", "fairscale-fsdp": "zero_dp_3"}
REFUSED = {
    ("torch-fsdp1", "adafactor"), ("torch-fsdp1", "hf-adafactor"),
    ("torch-fsdp1", "groups"),  # tests._parity groups by p.dim(): FSDP1 hands it 1-D views
    ("torch-fsdp2", "adafactor"),  # Transformers' Adafactor is served there (test_adafactor_fsdp2.py)
    ("fairscale-fsdp", "adafactor"), ("fairscale-fsdp", "hf-adafactor"), ("fairscale-fsdp", "groups"),
}
_HF = ["hf-adafactor"] if __import__("importlib").util.find_spec("transformers") else []
CASES = [
    Case(OPTIONS[b], b, model="blocks", optimizer=o)
    for b in LAYOUTS if get(b).probe()
    for o in ["sgd", "adagrad", "adafactor", *_HF, "groups"]
]


@functools.cache
def _results() -> dict[Case, Result | str]:
    return run_cases(CASES, 2, timeout=400)


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("case", [c for c in CASES if (c.backend, c.optimizer) not in REFUSED], ids=case_id)
def test_the_optimizer_trains_as_ddp_trains_it(case: Case) -> None:
    _, param_diff = ddp_diff(_results(), case)
    got, want = _results()[case], _results()[case.reference]
    assert isinstance(got, Result) and isinstance(want, Result)
    relative = max(abs(a - b) / abs(b) for a, b in zip(got.losses, want.losses))
    assert relative <= LOSS_TOL and param_diff <= PARAM_TOL, (got.losses, want.losses, param_diff)
    assert want.losses[-1] < want.losses[0], "the reference did not learn: the test would prove nothing"


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("case", [c for c in CASES if (c.backend, c.optimizer) in REFUSED], ids=case_id)
def test_the_optimizer_is_refused_at_prepare(case: Case) -> None:
    got = _results()[case]
    assert isinstance(got, str) and got.startswith("UnsupportedOptimizer: "), got  # prepare() raised it
    assert f"{case.backend} ('{parse_options(case.options)}') cannot train {NAMES[case.optimizer]}" in got, got
    assert "Options that serve it: backend=torch-zero (simple, zero_dp_1)" in got, got
    if case.optimizer == "hf-adafactor":  # served on DTensor shards too
        assert "; backend=torch-fsdp2 (zero_dp_2, zero_dp_3)" in got, got
    if "adafactor" in case.optimizer:
        assert "factored second moments need whole 2-D parameters" in got, got
    else:
        assert "Group by name" in got or "flat parameters hold weights" in got, got


class _Adafactor(torch.optim.Adafactor):
    """A user's subclass: refused as its base is."""


@pytest.mark.parametrize("backend", list(LAYOUTS))
def test_refusals_follow_the_class_and_its_bases(backend: str) -> None:
    """One process, no group: the checks themselves, for every backend (fairscale not needed)."""
    options = parse_options(OPTIONS[backend])
    params = list(build_model("blocks").parameters())
    whole = backend in ("torch-zero", "fairscale-sdp")
    for optimizer in (torch.optim.Adafactor(params), _Adafactor(params)):
        if whole:
            check_optimizer(backend, options, optimizer)
        else:
            with pytest.raises(UnsupportedOptimizer, match=re.escape(f"{backend} ('{options}') cannot train")):
                check_optimizer(backend, options, optimizer)
    for name in ("sgd", "adagrad"):
        check_optimizer(backend, options, OPTIMIZERS[name](params))
    assert optimizer_row(_Adafactor(params)) is optimizer_row(torch.optim.Adafactor(params))


def test_groups_with_different_settings_are_refused_on_flat_parameters() -> None:
    options = parse_options("zero_dp_3")
    model = build_model("blocks")
    with pytest.raises(UnsupportedOptimizer, match="flat parameters hold weights, biases and norms alike"):
        check_groups("fairscale-fsdp", options, model, OPTIMIZERS["groups"])
    same = check_groups("fairscale-fsdp", options, model, OPTIMIZERS["adamw"])  # one group: served
    assert set(same.values()) == {0} and len(same) == len(list(model.parameters()))


def test_the_docs_table_is_the_code_table() -> None:
    text = (Path(__file__).parents[2] / "docs" / "optimizers.md").read_text()
    assert markdown_table() in text, "regenerate the table in docs/optimizers.md (shardcompat.backends._optim)"


def test_explain_lists_each_backends_refused_optimizers(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from shardcompat.cli import main

    main(["explain", "zero_dp_3 auto_wrap", "--json"])
    rows = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["backends"]}
    assert rows["torch-fsdp2"]["refused_optimizers"] == ["torch.optim.Adafactor"]
    main(["explain", "simple"])
    text = capsys.readouterr().out
    assert "refuses:" not in text.split("* torch-zero:")[1].split("\n  ")[0], text  # whole parameters: all served
    main(["explain", "zero_dp_2"])
    assert "refuses: torch.optim.Adafactor (docs/optimizers.md)" in capsys.readouterr().out
