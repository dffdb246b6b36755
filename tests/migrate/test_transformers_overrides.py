"""``--transformers-legacy`` on Trainer subclasses and removed imports (issue 30 §3), row by row
of the tables the runtime serves by: every adapted hook of ``_overrides.PROTOCOL`` written in its
4.x form comes out in today's form (re-parsed, its ``super()`` call bound against today's
signature), and every removed name of ``legacy_table.SURFACE`` that has a home today is imported
from there and resolves in the installed release; the rest is reported and left as it was."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codemods.formats.python import migrate_source
from codemods.rules.transformers_legacy import UNMIGRATED
from codemods.rules.transformers_legacy.homes import row_for
from codemods.run.context import Settings
from shardcompat.transformers._overrides import PROTOCOL, Change, Served
from shardcompat.transformers.legacy_table import SURFACE, Removed

SETTINGS = Settings(legacy=False, transformers_legacy=True)
ROOT = Path(__file__).resolve().parents[2]
ADAPTED = [c for c in PROTOCOL if c.served is Served.ADAPTED and c.method != "__init__"]


def _migrate(code: str) -> tuple[str, list[str]]:
    result = migrate_source(code, SETTINGS)
    out = result.code if isinstance(result.code, str) else code
    again = migrate_source(out, SETTINGS)
    assert again.code is None or again.code == out, "a second run changes nothing more"
    ast.parse(out)
    return out, [w.message for w in result.warnings if w.rule == UNMIGRATED]


def _names(c: Change, which: str) -> list[str]:
    return [p.name for p in c.parameters(which) if p.kind is not p.VAR_KEYWORD]


def _subclass(c: Change) -> str:
    legacy = _names(c, "legacy")
    params = ", ".join(p for p in c.legacy.split(", ") if p and not p.startswith("**")) if c.legacy else ""
    self_ = "" if c.static else "self" + (", " if params else "")
    call = ", ".join(legacy)
    decorator = "    @staticmethod\n" if c.static else ""
    base = "Seq2SeqTrainer" if c.owner == "Seq2SeqTrainer" else "Trainer"
    target = f"{base}.{c.method}" if c.static else f"super().{c.method}"
    return (f"from transformers import {base}\n\n\nclass Mine({base}):\n{decorator}"
            f"    def {c.method}({self_}{params}):\n        return {target}({call})\n")


@pytest.mark.parametrize("c", ADAPTED, ids=[f"{c.owner}.{c.method}" for c in ADAPTED])
def test_every_adapted_hook_in_its_4x_form_comes_out_in_todays(c: Change) -> None:
    code, reported = _migrate(_subclass(c))
    tree = ast.parse(code)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == c.method)
    declared = [a.arg for a in fn.args.args][0 if c.static else 1:]
    assert declared == _names(c, "today"), code
    assert not reported, reported
    if c.static:
        return
    call = next(n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == c.method)
    today = inspect.Signature(c.parameters("today"))
    bound = today.bind(*[ast.unparse(a) for a in call.args], **{k.arg: ast.unparse(k.value) for k in call.keywords})
    assert not set(c.removed) & set(bound.arguments), code  # today's release no longer takes them
    if c.method != "compute_loss":  # what today's caller passed the override goes on to the base
        assert all(bound.arguments.get(n) == n for n in c.new), code
    else:  # a 4.x compute_loss's loss stays a per-batch mean, and the class says so
        assert "num_items_in_batch" not in bound.arguments and "loss_is_scaled_for_ga = False" in code


def test_a_subclass_in_todays_form_and_one_taking_anything_are_left_byte_for_byte() -> None:
    code = textwrap.dedent("""\
        from transformers import Trainer


        class Today(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

            def training_step(self, *args, **kwargs):
                return super().training_step(*args, **kwargs)

            def log(self, logs, **kwargs):
                super().log(logs, **kwargs)


        class NotATrainer:
            def compute_loss(self, model, inputs):
                return 0
        """)
    result = migrate_source(code, SETTINGS)
    assert result.code in (None, code) and not result.edits and not result.warnings


def test_a_name_clash_with_todays_parameter_is_reported_and_left() -> None:
    code = ("from transformers import Trainer\n\n\nclass T(Trainer):\n"
            "    def create_optimizer(self):\n        model = self.model\n        return super().create_optimizer()\n")
    out, reported = _migrate(code)
    assert out == code and any("already uses the name 'model'" in m for m in reported), reported


def _imports() -> list[Removed]:
    rows = []
    for r in SURFACE:
        module, _, name = r.pattern.rpartition(".")
        if r.family or not r.pattern.startswith("transformers.") or row_for(module, name) is not r:
            continue
        rows.append(r)
    return rows


IMPORTS = _imports()


@pytest.mark.parametrize("row", IMPORTS, ids=[r.pattern for r in IMPORTS])
def test_every_removed_import_moves_home_or_is_reported(row: Removed) -> None:
    transformers = pytest.importorskip("transformers")
    if hasattr(transformers, "is_torch_tpu_available"):
        pytest.skip("the homes are 5.x's: this Transformers has the 4.30 API itself")
    module, _, name = row.pattern.rpartition(".")
    code, reported = _migrate(f"from {module} import {name}\n\n\ndef main():\n    return {name}\n")
    if code == f"from {module} import {name}\n\n\ndef main():\n    return {name}\n":
        assert reported and name in reported[0], reported
        return
    assert not reported, reported
    (statement,) = [n for n in ast.parse(code).body if isinstance(n, ast.ImportFrom)]
    (alias,) = statement.names
    assert (alias.asname or alias.name) == name, code  # the uses stay
    assert statement.module is not None
    home = importlib.import_module(statement.module)  # and it is there in the installed release
    assert hasattr(home, alias.name), f"{statement.module}.{alias.name} (transformers {transformers.__version__})"


def test_adamw_keeps_430s_defaults_and_correct_bias_false_is_reported() -> None:
    code, reported = _migrate("from transformers import AdamW\n\nopt = AdamW(params, lr=1e-3)\n"
                              "opt2 = AdamW(params, 1e-3, (0.9, 0.98), 1e-8, correct_bias=True)\n")
    assert "from torch.optim import AdamW" in code and not reported
    assert "AdamW(params, lr=1e-3, eps=1e-6, weight_decay=0.0)" in code
    assert "AdamW(params, 1e-3, (0.9, 0.98), 1e-8, weight_decay=0.0)" in code
    before = "from transformers import AdamW\n\nopt = AdamW(params, correct_bias=False)\n"
    code, reported = _migrate(before)
    assert code == before and any("correct_bias=False" in m for m in reported), reported


_TARGETS = r"""
import tempfile, warnings
warnings.simplefilter("ignore")
import transformers
if MODE == "legacy":
    from shardcompat.transformers._dropin import install
    install()
d = tempfile.mkdtemp()
open(d + "/vocab.txt", "w").write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]))
tokenizer = transformers.BertTokenizer(d + "/vocab.txt")
inputs, targets = ["a b c", "c"], ["b", "a c a"]
"""
_LABELS = """\
def encode(tokenizer, inputs, targets):
    model_inputs = tokenizer(inputs, max_length=8, truncation=True)
    with tokenizer.as_target_tokenizer():
        labels = tokenizer(targets, max_length=4, padding="max_length", truncation=True)
    model_inputs["labels"] = labels["input_ids"]
    return model_inputs
"""


@pytest.mark.timeout(180)
def test_a_migrated_as_target_tokenizer_block_encodes_as_the_served_one() -> None:
    pytest.importorskip("transformers")
    migrated, reported = _migrate(_LABELS)
    assert "as_target_tokenizer" not in migrated and "text_target=targets" in migrated and not reported
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = []
    for mode, body in (("legacy", _LABELS), ("today", migrated)):
        program = f"MODE = {mode!r}\n{_TARGETS}\n{body}\nprint(encode(tokenizer, inputs, targets))\n"
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=170)
        assert done.returncode == 0, done.stderr[-3000:]
        out.append(done.stdout.strip().splitlines()[-1])
    assert out[0] == out[1] and "labels" in out[0], out


def test_a_skip_marker_on_the_def_keeps_the_whole_override_in_its_4x_form() -> None:
    code = ("from transformers import Trainer\n\n\nclass T(Trainer):\n"
            "    def log(self, logs):  # shardcompat: skip\n        super().log(logs)\n\n"
            "    def compute_loss(self, model, inputs):  # shardcompat: skip\n        return 0\n")
    out, reported = _migrate(code)
    assert out == code and not reported


def test_super_init_tokenizer_becomes_processing_class_unless_both_are_given() -> None:
    head = "from transformers import Trainer\n\n\nclass Mine(Trainer):\n    def __init__(self, *args, tok=None, **kwargs):\n"
    out, left = _migrate(head + "        super().__init__(*args, tokenizer=tok, **kwargs)\n")
    assert "super().__init__(*args, processing_class=tok, **kwargs)" in out and not left
    both = head + "        super().__init__(*args, tokenizer=tok, processing_class=tok, **kwargs)\n"
    out, left = _migrate(both)
    assert out == both and left == ["super().__init__(tokenizer=..., processing_class=...): both given"]
