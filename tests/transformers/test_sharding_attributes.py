"""Every sharding attribute 4.30 set reads as 4.30 left it, on every release (issue 46.1).

The list is derived from Transformers 4.30.2's own ``TrainingArguments.__post_init__`` and
``Trainer.__init__`` (read with ``ast``, see :mod:`._source430`): every ``self.X`` assigned under a
test of ``sharded_ddp`` or ``fsdp``, or named for them.  :data:`ATTRIBUTES` must list exactly those.

The values: ``tests/fixtures/transformers/sharding_4x.json`` holds what stock Transformers 4.34.1,
the last release with the field, gives for each spelling.  On 4.34.1 (``nox -s
"transformers(4.34.1)"``) the file is checked against the release itself; on every release the
drop-ins must give it.  One process, no process group, a few seconds.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from ._source430 import source_430

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

import shardcompat.transformers as sct  # noqa: E402
from shardcompat.options import parse_options  # noqa: E402
from shardcompat.transformers._arguments import RELEASE_HAS_FIELD  # noqa: E402
from shardcompat.transformers._sharded_ddp_option import (  # noqa: E402
    ATTRIBUTES,
    fsdp_config_value,
    trainer_value,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "transformers" / "sharding_4x.json"
SPELLINGS = ["", "simple", "zero_dp_2", "zero_dp_2 offload", "zero_dp_3 auto_wrap", "zero_dp_3 offload auto_wrap"]
UNSET = "<unset>"
# 4.31 dropped the "fsdp_" prefix of these fsdp_config keys (4.34.1 shows them without it).
RENAMED_431 = ("min_num_params", "transformer_layer_cls_to_wrap", "backward_prefetch")


@pytest.fixture(autouse=True)
def _environment() -> Any:
    with mock.patch.dict(os.environ):  # TrainingArguments export settings for Accelerate
        yield


# ---------------------------------------------------------------------- the list, from 4.30.2's source
def _method(path: Path, cls: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == name)


def _about_sharding(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return "sharded_ddp" in text or "fsdp" in text


def _self_attribute(target: ast.AST) -> ast.Attribute | None:
    while isinstance(target, ast.Subscript):
        target = target.value
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return target
    return None


def _assigned(statements: list[ast.stmt], guarded: bool = False) -> set[str]:
    """``self.X`` assigned in ``statements``: under a sharding test, or named for sharding."""
    found: set[str] = set()
    for s in statements:
        if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in s.targets if isinstance(s, ast.Assign) else [s.target]:
                attribute = _self_attribute(target)
                if attribute is not None and (guarded or _about_sharding(attribute)):
                    found.add(attribute.attr)
        inner = guarded or (isinstance(s, (ast.If, ast.While)) and _about_sharding(s.test))
        for block in ("body", "orelse", "finalbody"):
            found |= _assigned(getattr(s, block, None) or [], inner)
        for handler in getattr(s, "handlers", None) or []:
            found |= _assigned(handler.body, inner)
    return found


def test_every_sharding_attribute_4_30_set_is_listed() -> None:
    root = source_430()
    derived = {("TrainingArguments", a) for a in _assigned(_method(root / "training_args.py", "TrainingArguments",
                                                                   "__post_init__").body)}
    derived |= {("Trainer", a) for a in _assigned(_method(root / "trainer.py", "Trainer", "__init__").body)}
    assert ("Trainer", "place_model_on_device") in derived and ("TrainingArguments", "fsdp_config") in derived
    assert set(ATTRIBUTES) == derived, (sorted(derived - set(ATTRIBUTES)), sorted(set(ATTRIBUTES) - derived))


def test_4_30s_fsdp_config_defaults_are_the_keys_its_post_init_always_set() -> None:
    post_init = _method(source_430() / "training_args.py", "TrainingArguments", "__post_init__")
    always = {
        ast.literal_eval(t.slice) for s in post_init.body if isinstance(s, ast.Assign) for t in s.targets
        if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "self.fsdp_config"
    }
    assert set(fsdp_config_value(None)) == always == {"fsdp_min_num_params", "xla", "xla_fsdp_grad_ckpt"}


# ---------------------------------------------------------------------- the values
def _json(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(getattr(value, "value", value))


def _arguments(args: Any) -> dict[str, Any]:
    return {name: _json(getattr(args, name, UNSET)) for cls, name in ATTRIBUTES if cls == "TrainingArguments"}


def _the_430_spelling(values: dict[str, Any]) -> dict[str, Any]:
    """4.34.1's arguments with 4.30's fsdp_config keys (4.31 dropped their "fsdp_" prefix)."""
    config = {(f"fsdp_{k}" if k in RENAMED_431 else k): v for k, v in values["fsdp_config"].items()}
    return {**values, "fsdp_config": config}


def _trainer(args: Any) -> Any:
    from tests.transformers._runs import Tokens, build_model

    return sct.Trainer(model=build_model("gpt2"), args=args, train_dataset=Tokens("gpt2", 8, 1))


def _internals(trainer: Any) -> dict[str, Any]:
    return {name: _json(getattr(trainer, name, UNSET)) for cls, name in ATTRIBUTES if cls == "Trainer"}


def _dropin(spelling: str) -> Any:
    return sct.TrainingArguments("out", report_to="none", use_cpu=True, sharded_ddp=spelling)


@pytest.mark.skipif(not RELEASE_HAS_FIELD, reason="needs the last release with the field (nox -s 'transformers(4.34.1)')")
def test_the_recorded_4x_values_are_the_releases_own() -> None:
    recorded = json.loads(FIXTURE.read_text())
    for spelling in SPELLINGS:
        stock = transformers.TrainingArguments("out", report_to="none", use_cpu=True, sharded_ddp=spelling)
        assert _the_430_spelling(_arguments(stock)) == recorded["arguments"][spelling], spelling
    # without sharding the release's own Trainer can be built here (with it, it needs fairscale and a group)
    stock = transformers.TrainingArguments("out", report_to="none", use_cpu=True)
    from tests.transformers._runs import Tokens, build_model

    trainer = transformers.Trainer(model=build_model("gpt2"), args=stock, train_dataset=Tokens("gpt2", 8, 1))
    assert _internals(trainer) == recorded["trainer"], _internals(trainer)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_the_dropin_arguments_read_as_4x_left_them(spelling: str) -> None:
    recorded = json.loads(FIXTURE.read_text())["arguments"][spelling]
    args = _dropin(spelling)
    values = _arguments(args)
    assert (_the_430_spelling(values) if RELEASE_HAS_FIELD else values) == recorded
    assert sct.sharding_options(args) == parse_options(spelling)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_the_dropin_trainer_reads_as_4_30_set_it(spelling: str) -> None:
    recorded = json.loads(FIXTURE.read_text())["trainer"]
    internals = _internals(_trainer(_dropin(spelling)))
    options = parse_options(spelling)
    member = trainer_value(options) if options else None
    expected = {**recorded, "sharded_ddp": None if member is None else member.value,
                # 4.30 left a zero_dp_2/3 model where it was: the sharding placed it
                "place_model_on_device": not any(w in spelling for w in ("zero_dp_2", "zero_dp_3"))}
    assert internals == expected


def test_the_fsdp_config_of_4_30_takes_its_prefix_back_and_a_file(tmp_path: Path) -> None:
    config = tmp_path / "fsdp.json"
    config.write_text(json.dumps({"min_num_params": 100, "fsdp_transformer_layer_cls_to_wrap": "GPT2Block"}))
    assert fsdp_config_value(str(config)) == {"fsdp_min_num_params": 100, "fsdp_transformer_layer_cls_to_wrap": ["GPT2Block"],
                                              "xla": False, "xla_fsdp_grad_ckpt": False}
