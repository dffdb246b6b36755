"""The README and the user guide say what ``shardcompat.launch.spawn``'s two limits really are.

The defaults are read from ``spawn``'s signature and from torch (not written here again), so a
changed default fails this test until the docs say the new one.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
from pathlib import Path

import pytest
from torch.distributed import constants

from shardcompat.launch import default_collective_timeout, spawn
from shardcompat.train import configure_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "user-guide.md"]


def _prose(path: Path) -> str:
    """The text with its line breaks and indentation folded into single spaces."""
    return " ".join(path.read_text().split())


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_state_spawns_limits_as_its_signature_has_them(doc: Path) -> None:
    text = _prose(doc)
    parameters = inspect.signature(spawn).parameters
    for name in ("timeout", "collective_timeout"):
        default = parameters[name].default
        assert f"`{name}={default!r}`" in text, (doc.name, name, default)
    assert parameters["timeout"].default is None, "the docs say a job has no whole-job limit by default"
    assert re.search(r"[Nn]o limit stops the whole job by default|none by default", text), doc.name


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_name_torchs_own_collective_defaults(doc: Path) -> None:
    text = _prose(doc)
    gloo = default_collective_timeout("gloo")
    assert gloo == constants.default_pg_timeout.total_seconds()
    assert f"{gloo / 60:g} minutes for gloo" in text, doc.name
    nccl = getattr(constants, "default_pg_nccl_timeout", None)
    if nccl is not None:  # torch built with NCCL states its own default; a CPU build has none
        assert f"{nccl.total_seconds() / 60:g} minutes in builds with NCCL" in text, doc.name
    assert "torch's own default" in text, doc.name


def _spawn_calls(text: str) -> list[ast.Call]:
    """Every ``spawn(...)`` the prose shows in backticks, parsed as Python."""
    calls = []
    for snippet in re.findall(r"`(spawn\([^`]*\))`", text):
        node = ast.parse(snippet, mode="eval").body
        assert isinstance(node, ast.Call), snippet
        calls.append(node)
    return calls


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_spawn_call_the_docs_show_binds_to_the_real_signature(doc: Path) -> None:
    calls = _spawn_calls(_prose(doc))
    assert calls, f"{doc.name} shows no spawn(...) call with its limits"
    signature = inspect.signature(spawn)
    shown = set()
    for call in calls:
        keywords = {kw.arg: None for kw in call.keywords if kw.arg is not None}
        signature.bind(*[None] * len(call.args), **keywords)  # TypeError for a keyword spawn has not
        shown |= set(keywords)
    assert "timeout" in shown, f"{doc.name} shows no call that sets the whole-job limit"


def test_the_user_guide_names_trains_flags_for_the_same_limits() -> None:
    text = _prose(DOCS[1])
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    defaults = inspect.signature(spawn).parameters
    for flag, name in (("--timeout", "timeout"), ("--collective-timeout", "collective_timeout")):
        assert f"`{flag}`" in text
        assert parser.get_default(name) == defaults[name].default, (flag, "train passes spawn's own default")
