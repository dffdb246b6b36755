"""The rest of the 4.30 surface in the legacy table (``SURFACE``): consistent with the installed
release, and served under the shim (the names the 4.x scripts and Trainer subclasses import)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from shardcompat.transformers._legacy_imports import resolve  # noqa: E402
from shardcompat.transformers.legacy_table import SURFACE, Home, Served  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# A release that still has the 4.30 API serves these names itself and the layer stays out of the
# way (test_legacy_inert.py): the rows' targets are today's homes, which it may predate.
on_a_4x_release = pytest.mark.skipif(
    "evaluation_strategy" in {f.name for f in dataclasses.fields(transformers.TrainingArguments)},
    reason="this Transformers has the 4.30 API itself (test_legacy_inert.py checks the layer leaves it alone)",
)


def test_patterns_are_unique() -> None:
    keys = [(r.pattern, r.origin, r.backend, r.gone_model) for r in SURFACE]
    assert len(keys) == len(set(keys))


@on_a_4x_release
@pytest.mark.parametrize("row", [r for r in SURFACE if r.target and "*" not in r.pattern],
                         ids=lambda r: r.pattern)
def test_every_served_target_resolves_on_the_installed_release(row) -> None:  # type: ignore[no-untyped-def]
    assert row.served is not Served.REFUSED
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resolve(row.target)


def test_served_rows_say_who_serves_them_and_refused_rows_name_a_replacement() -> None:
    for r in SURFACE:
        assert r.replacement and r.reason, r.pattern
        if r.served is Served.REFUSED:
            assert r.home is Home.NONE, r.pattern
        elif r.home in (Home.IMPORT, Home.CLASS):
            assert r.target or r.alias, r.pattern


_SCRIPT = r"""
import warnings
warnings.simplefilter("error", FutureWarning)
import transformers
from shardcompat.transformers._dropin import install, uninstall
done = install()
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    from transformers.utils import is_offline_mode, get_full_repo_name
    from transformers.trainer import ShardedDDPOption, ALL_LAYERNORM_LAYERS, is_fairscale_available
    from transformers.trainer_utils import ShardedDDPOption as FromUtils
    from transformers.training_args import ShardedDDPOption as FromArgs
    from transformers.deepspeed import is_deepspeed_zero3_enabled, HfDeepSpeedConfig
    from transformers import AdamW, BertTokenizerFast
    from transformers.file_utils import is_offline_mode as from_file_utils
import huggingface_hub, torch
from transformers.integrations.deepspeed import HfDeepSpeedConfig as Today
from transformers.pytorch_utils import ALL_LAYERNORM_LAYERS as layernorms
assert ShardedDDPOption is FromUtils is FromArgs and ShardedDDPOption("zero_dp_2").value == "zero_dp_2"
assert ALL_LAYERNORM_LAYERS is layernorms and HfDeepSpeedConfig is Today
assert is_offline_mode is huggingface_hub.is_offline_mode is from_file_utils
assert is_deepspeed_zero3_enabled() is False
assert is_fairscale_available() == (__import__("importlib").util.find_spec("fairscale") is not None)
assert BertTokenizerFast is transformers.BertTokenizer
assert get_full_repo_name("m", organization="org") == "org/m"
p = torch.nn.Parameter(torch.ones(2))
opt = AdamW([p], lr=0.1)
assert isinstance(opt, torch.optim.AdamW) and opt.defaults["eps"] == 1e-6 and opt.defaults["weight_decay"] == 0.0
try:
    AdamW([p], correct_bias=False)
    raise SystemExit("correct_bias=False served")
except ValueError as e:
    assert "torch.optim.AdamW" in str(e)
assert all(issubclass(w.category, FutureWarning) for w in seen) and len(seen) >= 10, [str(w.message) for w in seen]
assert all("docs/transformers-legacy.md" in str(w.message) for w in seen)
try:
    from transformers.trainer import smp_gather
    raise SystemExit("refused name imported")
except ImportError as e:
    assert "SageMaker" in str(e) and "docs/transformers-legacy.md" in str(e), e
uninstall(done)
import sys
assert "transformers.deepspeed" not in sys.modules and not hasattr(transformers, "AdamW")
try:
    from transformers.trainer import ShardedDDPOption
    raise SystemExit("still served after uninstall")
except ImportError:
    pass
print("OK")
"""


@on_a_4x_release
@pytest.mark.timeout(120)
def test_the_names_4x_trainer_code_imports_are_served_under_the_shim_and_gone_after() -> None:
    """A fresh process: the import forms of issue 30's list, each served with today's object."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=110)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]


@pytest.mark.timeout(120)
def test_tokenizer_target_mode_is_served_as_text_target() -> None:
    code = r"""
import tempfile, warnings
warnings.simplefilter("ignore")
import transformers
from shardcompat.transformers._dropin import install
install()
d = tempfile.mkdtemp()
open(d + "/vocab.txt", "w").write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]))
tok = transformers.BertTokenizer(d + "/vocab.txt")
with tok.as_target_tokenizer():
    old = tok(["a b", "c"], max_length=8, truncation=True)
new = tok(text_target=["a b", "c"], max_length=8, truncation=True)
assert old["input_ids"] == new["input_ids"]
batch = tok.prepare_seq2seq_batch(["a b c"], ["c"], max_length=8)
assert batch["labels"] == tok(text_target=["c"], max_length=8, truncation=True, padding="longest")["input_ids"]
assert tok.encode_plus("a", "b")["input_ids"] == tok("a", "b")["input_ids"]
assert tok.batch_encode_plus([("a", "b")])["input_ids"] == tok(["a"], ["b"])["input_ids"]
print("OK")
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=110)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]


_EVERY_ROW = r"""
import importlib, json, sys, warnings
warnings.simplefilter("ignore")
from shardcompat.transformers._legacy import install
from shardcompat.transformers._legacy_imports import resolve
from shardcompat.transformers.legacy_table import SURFACE, Home, Served
rows = [r for r in SURFACE if not r.family and r.pattern.startswith("transformers.")
        and r.home in (Home.IMPORT, Home.NONE)]
def own(pattern):  # what the release answers itself is never shadowed
    module, _, name = pattern.rpartition(".")
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False
rows = [r for r in rows if not own(r.pattern)]
install()
wrong = []
for r in rows:
    module, _, name = r.pattern.rpartition(".")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as error:  # a module 5.x no longer has, with only refused names
        if r.served is not Served.REFUSED or not (error.name or "").startswith(module.rsplit(".", 1)[0]):
            wrong.append([r.pattern, "module gone: " + str(error)])
        continue
    except ImportError as error:
        if r.served is not Served.REFUSED or "docs/transformers-legacy.md" not in str(error):
            wrong.append([r.pattern, "refused without the table's words: " + str(error)])
        continue
    if r.served is Served.REFUSED:
        wrong.append([r.pattern, "a refused name imported"])
    elif r.target is not None and value is not resolve(r.target_for(r.pattern)):
        wrong.append([r.pattern, "not the row's target"])
print(json.dumps(wrong))
"""


@on_a_4x_release
@pytest.mark.timeout(300)
def test_every_module_row_imports_through_the_shim_as_its_row_says() -> None:
    """Row by row: a served name is its target under ``shardcompat run``'s shim, a refused one
    raises an ImportError naming its replacement (a module 5.x lost whole stays lost)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _EVERY_ROW], capture_output=True, text=True, env=env, timeout=280)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    wrong = json.loads(out.stdout.strip().splitlines()[-1])
    assert not wrong, "\n".join(f"{p}: {why}" for p, why in wrong)


_REEXPORTS = r"""
import importlib, json, warnings
from shardcompat.transformers._legacy import install
from shardcompat.transformers._legacy_imports import resolve, row_for
from shardcompat.transformers.legacy_table import GONE_MODULES, REEXPORTS
def at_origin(origin, name):
    try:
        return hasattr(importlib.import_module(origin), name)
    except ImportError:
        return False
before = {s: at_origin(o, s.rsplit(".", 1)[1]) for s, o in REEXPORTS.items()}
install()
wrong, counts = [], {"origin": 0, "origin's row": 0}
for spelling, origin in REEXPORTS.items():
    module, _, name = spelling.rpartition(".")
    if module not in GONE_MODULES:
        wrong.append([spelling, "not a name of a removed module"])
        continue
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = getattr(importlib.import_module(module), name)
        except ImportError as error:  # the origin lost it and no row serves it: the codemod would move it there
            wrong.append([spelling, "refused: " + str(error)])
            continue
    own = row_for(module, name)  # a row of its own comes first (the origin lost the name)
    target = own.target_for(spelling) if own is not None and own.target else f"{origin}:{name}"
    if value is not resolve(target):
        wrong.append([spelling, "not the object its origin (or its own row) has"])
    elif not any(f" import {name} " in str(w.message) for w in caught):  # the origin, or a row's home
        wrong.append([spelling, "no FutureWarning naming an import of it"])
    counts["origin" if before[spelling] else "origin's row"] += 1
print(json.dumps([wrong, counts]))
"""


@on_a_4x_release
@pytest.mark.timeout(120)
def test_what_a_removed_module_re_exported_resolves_at_its_origin() -> None:
    """Every name of REEXPORTS (read from the 4.30.2 wheel) is served: the object the module 4.30
    imported it from has today (or serves by its own row), with a FutureWarning naming an import
    of it.  Where the origin lost it, a row of its own must say where it lives (as for
    ``whitespace_tokenize``), since ``shardcompat-migrate`` moves the import to what serves it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _REEXPORTS], capture_output=True, text=True, env=env, timeout=110)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    wrong, counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert not wrong, "\n".join(f"{p}: {why}" for p, why in wrong)
    assert counts["origin"] >= 20, counts  # the tokenizer classes, logging, the availability checks...
