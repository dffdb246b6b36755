"""Trainer subclasses written for Transformers 4.2x-4.30 run unchanged (issue 30.2).

``scripts/run_subclass_legacy.py`` is such a subclass (see its docstring: ``create_optimizer``
with parameter groups and an ``OSS`` branch, ``compute_loss`` returning ``(loss, outputs)``,
``training_step(self, model, inputs)``, a length-grouped ``_get_train_sampler(self)``,
``_save_checkpoint(..., metrics=None)`` and ``_save`` calling ``super()``, ``log(self, logs)``,
a QA-style ``evaluate``, positional ``Trainer`` arguments in 4.x order).  It runs unmodified
under ``shardcompat run --nproc 2`` with ``simple``, ``zero_dp_2`` and ``"zero_dp_3 auto_wrap"``;
the reference is its hand port to today's signatures (:data:`PORT`, each edit asserted to apply)
on the installed release's own classes under stock ``torchrun`` (DDP over gloo, 2 CPU ranks).
GPT-2's dropout stays at its default.  Per-micro-batch losses, logged losses, evaluations and
the saved weights must agree.

The protocol table itself is checked against the sources: Transformers 4.30.2's ``trainer.py``
and ``trainer_seq2seq.py`` (read with ``ast``; the wheel is fetched with ``pip download`` into a
cache, or taken from ``SHARDCOMPAT_TRANSFORMERS_430_SOURCE``, and the test skips, saying so,
where neither works) against the installed release (read with ``inspect``).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from ._source430 import source_430
from ._stock import TORCHRUN

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

from shardcompat.transformers import _overrides  # noqa: E402
from shardcompat.transformers._overrides import PROTOCOL, Served  # noqa: E402

SCRIPT = Path(__file__).parent / "scripts" / "run_subclass_legacy.py"
SHARDING_4X = Path(__file__).parents[1] / "fixtures" / "transformers" / "sharding_4x.json"  # stock 4.34.1's values
LEGACY_RELEASE = not inspect.signature(transformers.Trainer.compute_loss).parameters.get("num_items_in_batch")
SHARDINGS = {"none": [], "simple": ["simple"], "zero_dp_2": ["zero_dp_2"], "zero_dp_3-auto_wrap": ["zero_dp_3 auto_wrap"]}

# The hand port to today's signatures: (old, new, how many times).
PORT = [
    ("    def create_optimizer(self):\n", "    def create_optimizer(self, model=None):\n", 1),
    ("            if self.sharded_ddp == ShardedDDPOption.SIMPLE:\n", "            if False:  # no sharded_ddp today\n", 1),
    ("    def compute_loss(self, model, inputs, return_outputs=False):\n",
     "    loss_is_scaled_for_ga = False  # compute_loss returns a per-batch mean\n\n"
     "    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):\n", 1),
    ("    def training_step(self, model, inputs):\n        loss = super().training_step(model, inputs)\n",
     "    def training_step(self, model, inputs, num_items_in_batch=None):\n"
     "        loss = super().training_step(model, inputs, num_items_in_batch)\n", 1),
    ("    def _get_train_sampler(self):\n", "    def _get_train_sampler(self, train_dataset=None):\n", 1),
    ("    def _save_checkpoint(self, model, trial, metrics=None):\n"
     '        self.checkpoint_metrics.append(None if metrics is None else round(metrics["eval_loss"], 6))\n'
     "        super()._save_checkpoint(model, trial, metrics=metrics)\n",
     "    def _save_checkpoint(self, model, trial):\n"
     '        self.checkpoint_metrics.append(round(self.state.log_history[-1]["eval_loss"], 6))\n'
     "        super()._save_checkpoint(model, trial)\n", 1),
    ("    def log(self, logs):\n", "    def log(self, logs, start_time=None):\n", 1),
    ("        super().log(logs)\n", "        super().log(logs, start_time)\n", 1),
    ("model, training_args, default_data_collator, Tokens(64, 1), Tokens(8, 2), None, None, compute_metrics",
     "model=model, args=training_args, data_collator=default_data_collator, train_dataset=Tokens(64, 1), "
     "eval_dataset=Tokens(8, 2), compute_metrics=compute_metrics", 1),
    ("    if trainer.is_world_master():", "    if trainer.is_world_process_zero():", 1),
    *(READ_4X := [  # the 4.x internals and arguments the script reads and prints
        ('    """The 4.x attributes such code read."""\n    return {\n', '    return {}\n    return {\n', 1),
        ("    sharded_ddp = [ShardedDDPOption(o).value for o in training_args.sharded_ddp]\n",
         "    sharded_ddp = []  # no sharded_ddp today\n", 1),
        ('    """The 4.x sharding arguments such code read."""\n    return {\n', '    return {}\n    return {\n', 1),
    ]),
]
# What shardcompat-migrate --transformers-legacy reports for a person to decide, and that person's edits.
HAND = [
    ("try:\n    from transformers.trainer_utils import ShardedDDPOption\n"
     "except ImportError:  # until the legacy-names table serves it at its 4.x path (issue 30.1)\n"
     "    from shardcompat.transformers._sharded_ddp_option import ShardedDDPOption\n", "", 1),
    PORT[1],  # the sharded_ddp branch
    ('        self.checkpoint_metrics.append(None if metrics is None else round(metrics["eval_loss"], 6))\n',
     '        self.checkpoint_metrics.append(round(self.state.log_history[-1]["eval_loss"], 6))\n', 1),
    *READ_4X,  # the 4.x internals and arguments the script prints
]
#: The lines the tool reports (in the unmigrated script), each one a HAND edit covers.
REPORTED = ("ShardedDDPOption", "self.sharded_ddp", "def _save_checkpoint", "trainer.sharded_ddp", "trainer.fsdp",
            "trainer.use_apex", "trainer.scaler", "trainer.amp_dtype")
FLAGS = [
    "--max_steps", "4", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "4",
    "--gradient_accumulation_steps", "2", "--learning_rate", "5e-3", "--weight_decay", "0.01", "--logging_steps", "1",
    "--eval_steps", "2", "--save_strategy", "steps", "--save_steps", "2", "--report_to", "none",
    "--disable_tqdm", "true", "--seed", "0",
]


def port(source: str, edits: list[tuple[str, str, int]] = PORT) -> str:
    for old, new, count in edits:
        assert source.count(old) == count, old
        source = source.replace(old, new)
    return source


def migrate(root: Path) -> tuple[Path, list[str]]:
    """A copy of the script, migrated by shardcompat-migrate --transformers-legacy, then given
    the hand edits for what the tool reported; and the reported lines."""
    from codemods.cli import build_parser, run

    copy = root / "migrated" / SCRIPT.name
    copy.parent.mkdir()
    copy.write_text(SCRIPT.read_text())
    report = run(build_parser().parse_args([str(copy), "--transformers-legacy", "--no-legacy", "--write",
                                            "--no-progress"]))
    assert not [f.error for f in report.files if f.error]
    lines = SCRIPT.read_text().splitlines()
    reported = [lines[w.line - 1] for f in report.files for w in f.warnings]
    copy.write_text(port(copy.read_text(), HAND))
    return copy, reported


def _run(command: list[str], out: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONWARNINGS": "default::FutureWarning", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           **(env or {})}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    return {"code": done.returncode, "output": done.stdout + done.stderr, "out": out}


class Runs:
    """The module's runs, each started when a test first reads it: a test selected alone (as
    ``transformers(current-fairscale)`` selects ``simple``) starts only the runs it compares."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ported = root / "run_subclass_ported.py"
        self.ported.write_text(port(SCRIPT.read_text()) if not LEGACY_RELEASE else SCRIPT.read_text())
        self.done: dict[str, dict[str, Any]] = {}

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in self.done:
            self.done[name] = self._start(name)
        return self.done[name]

    def _start(self, name: str) -> dict[str, Any]:
        out = self.root / name
        given = {"OPTIMIZER_GIVEN": "1"}  # Trainer(optimizers=(AdamW(...), None)), no sharding: stock on both sides
        stock = [*TORCHRUN, str(self.ported), *FLAGS, "--eval_strategy", "steps", "--use_cpu", "--output_dir", str(out)]
        ours = [sys.executable, "-m", "shardcompat", "run", "--nproc", "2", str(SCRIPT), *FLAGS,
                "--evaluation_strategy", "steps", "--output_dir", str(out)]
        if name == "stock":
            return _run(stock, out)
        if name == "stock-given":
            return _run(stock, out, given)
        if name == "none-given":
            return _run(ours, out, given)
        if name == "migrated":
            migrated, reported = migrate(self.root)  # the copy goes to root/migrated, its output beside it
            out = self.root / "migrated-out"
            run = _run([*TORCHRUN, str(migrated), *FLAGS, "--eval_strategy", "steps", "--use_cpu",
                        "--output_dir", str(out)], out)
            return {**run, "reported": reported}
        words = SHARDINGS[name]
        return _run([*ours, *(["--sharded_ddp", *words] if words else [])], out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("subclasses"))


def _results(runs: Runs, name: str) -> list[dict[str, Any]]:
    run = runs[name]
    assert run["code"] == 0, run["output"][-6000:]
    return [json.loads((run["out"] / f"result-{rank}.json").read_text()) for rank in (0, 1)]


def _close(a: list[float], b: list[float], tol: float) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(LEGACY_RELEASE, reason="this release has the 4.x override protocol itself: nothing to serve")
@pytest.mark.parametrize("name", list(SHARDINGS))
def test_a_4x_subclass_runs_unchanged_and_trains_as_its_port_on_stock_ddp(runs: Runs, name: str) -> None:
    stock, sharded = _results(runs, "stock"), _results(runs, name)
    for a, b in zip(stock, sharded):  # each rank's own micro-batches
        assert len(a["losses"]) == 8, a["losses"]
        assert _close(a["losses"], b["losses"], 1e-4), (a["losses"], b["losses"])
        logged = [[e["loss"] for e in r["log_history"] if "loss" in e] for r in (a, b)]
        assert len(logged[0]) == 4 and _close(*logged, 1e-4), logged
        evals = [[e["eval_loss"] for e in r["log_history"] if "eval_loss" in e] for r in (a, b)]
        assert len(evals[0]) >= 2 and _close(*evals, 1e-4), evals
        assert a["eval"].keys() == b["eval"].keys() and a["eval"]["eval_accuracy"] == b["eval"]["eval_accuracy"]
        # _save_checkpoint(metrics=) got the evaluation of its step, as 4.x passed it
        assert _close(a["checkpoint_metrics"], b["checkpoint_metrics"], 1e-4), (a, b)
        assert all(r["log_history"][0].get("seen_by_subclass") == 1.0 for r in (a, b))  # log(self, logs) ran
    _reads_4x_sharding_as_4_30(name, sharded)
    model_class = transformers.GPT2LMHeadModel
    weights = [model_class.from_pretrained(runs[n]["out"] / "final").state_dict() for n in ("stock", name)]
    assert max(float((weights[0][k] - weights[1][k]).abs().max()) for k in weights[0]) <= 1e-5
    assert (runs[name]["out"] / "written_by_world_master.txt").exists()  # 3.x's is_world_master(), on rank 0
    assert (runs[name]["out"] / "final" / "saved_by_subclass.txt").exists()  # the _save override
    assert (runs[name]["out"] / "checkpoint-2" / "saved_by_subclass.txt").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(LEGACY_RELEASE, reason="this release has the 4.x override protocol itself: nothing to serve")
def test_an_optimizer_given_to_the_trainer_without_sharding_trains_as_stock(runs: Runs) -> None:
    for a, b in zip(_results(runs, "stock-given"), _results(runs, "none-given")):
        assert len(a["losses"]) == 8 and a["losses"] == b["losses"], (a["losses"], b["losses"])
        assert a["eval"] == b["eval"] and a["optimizer"] == b["optimizer"] == "given"
        assert [e.get("loss") for e in a["log_history"]] == [e.get("loss") for e in b["log_history"]]
    weights = [transformers.GPT2LMHeadModel.from_pretrained(runs[n]["out"] / "final").state_dict()
               for n in ("stock-given", "none-given")]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def _reads_4x_sharding_as_4_30(name: str, results: list[dict[str, Any]]) -> None:
    """The script's arguments as stock 4.34.1 parsed them (the fixture), its Trainer as 4.30 set it, and
    the optimizer its own create_optimizer built (fairscale's OSS, or the facade's, under simple)."""
    spelling = " ".join(SHARDINGS[name])
    recorded = json.loads(SHARDING_4X.read_text())["arguments"][spelling]
    for r in results:
        assert r["arguments"] == {"sharded_ddp": recorded["sharded_ddp"], "in": spelling == "simple",
                                  "len": len(recorded["sharded_ddp"]), "fsdp": recorded["fsdp"],
                                  "fsdp_config": recorded["fsdp_config"]}, r["arguments"]
        seen = r["seen"]
        assert seen["sharded_ddp"] == (spelling.split()[0] if spelling else None) and seen["fsdp"] is None, seen
        assert seen["place_model_on_device"] is (name in ("none", "simple")), seen
        assert (seen["use_apex"], seen["use_cuda_amp"], seen["do_grad_scaling"]) == (False, False, False), seen
        assert (seen["amp_dtype"], seen["scaler"]) == ("None", "NoneType"), seen  # unset in fp32, as in 4.30
        # fairscale's OSS where it is installed (transformers(current-fairscale)), else the facade's NativeOSS
        assert r["optimizer"] in (("OSS", "NativeOSS") if name == "simple" else ("AdamW",)), r["optimizer"]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(LEGACY_RELEASE, reason="this release has the 4.x override protocol itself: nothing to migrate")
def test_the_migrated_subclass_trains_on_stock_transformers_as_its_hand_port(runs: Runs) -> None:
    """shardcompat-migrate --transformers-legacy writes today's overrides and calls; what it reports
    is what a person still decides (the sharded_ddp branch, the metrics today's release does not pass,
    the 4.x internals), and with those edits the script trains on stock torchrun as the hand port."""
    reported = runs["migrated"]["reported"]
    assert reported and all(any(key in line for key in REPORTED) for line in reported), reported
    assert {key for key in REPORTED if any(key in line for line in reported)} == set(REPORTED), reported
    for a, b in zip(_results(runs, "stock"), _results(runs, "migrated")):
        assert len(a["losses"]) == 8 and _close(a["losses"], b["losses"], 1e-6), (a["losses"], b["losses"])
        logged = [[e["loss"] for e in r["log_history"] if "loss" in e] for r in (a, b)]
        assert len(logged[0]) == 4 and _close(*logged, 1e-6), logged
        assert _close(a["checkpoint_metrics"], b["checkpoint_metrics"], 1e-6)
        assert a["eval"] == b["eval"] and b["optimizer"] == "AdamW"
        assert all(r["log_history"][0].get("seen_by_subclass") == 1.0 for r in (a, b))
    assert "is the Transformers 4.x form" not in runs["migrated"]["output"]
    assert (runs["migrated"]["out"] / "written_by_world_master.txt").exists()  # renamed is_world_process_zero()
    weights = [transformers.GPT2LMHeadModel.from_pretrained(runs[n]["out"] / "final").state_dict()
               for n in ("stock", "migrated")]
    assert max(float((weights[0][k] - weights[1][k]).abs().max()) for k in weights[0]) <= 1e-6


# ---------------------------------------------------------------------- in this process
def test_classes_in_todays_form_are_left_alone() -> None:
    import shardcompat.transformers as sct

    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Today(sct.Trainer):  # type: ignore[misc]
            def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                             num_items_in_batch: Any = None) -> Any:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

            def training_step(self, *args: Any, **kwargs: Any) -> Any:
                return super().training_step(*args, **kwargs)

            def _get_train_sampler(self, train_dataset: Any = None) -> Any:
                return super()._get_train_sampler(train_dataset)

    assert "__shardcompat_legacy__" not in vars(Today.compute_loss)
    assert Today.training_step is vars(Today)["training_step"] and Today._get_train_sampler is vars(Today)["_get_train_sampler"]


def test_stock_transformers_subclasses_are_not_touched() -> None:
    """Nothing leaks: a subclass of the release's own Trainer keeps its methods as written."""

    class Stock(transformers.Trainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False) -> Any:
            return 0

    assert not hasattr(Stock.compute_loss, "__shardcompat_legacy__")


def test_an_override_that_is_never_called_today_is_said_once() -> None:
    import shardcompat.transformers as sct

    if hasattr(transformers.Trainer, "_rotate_checkpoints"):
        pytest.skip("this release still calls _rotate_checkpoints")
    with pytest.warns(FutureWarning, match=r"_rotate_checkpoints.*no longer has this method.*rotate_checkpoints"):
        class Old(sct.Trainer):  # type: ignore[misc]
            def _rotate_checkpoints(self, use_mtime: bool = False, output_dir: Any = None) -> None:
                pass


class _Sub(transformers.Trainer):  # type: ignore[misc]
    pass


@pytest.mark.skipif(LEGACY_RELEASE, reason="this release has the 4.x override protocol itself: nothing to serve")
def test_the_4x_super_call_forms_are_completed_from_what_the_release_passed() -> None:
    """base_call maps a 4.x super() call onto today's parameters, with the release's values."""
    me = _Sub.__new__(_Sub)  # base_call reads only the class and the instance dict
    me.__dict__[_overrides._PENDING] = {"_maybe_log_save_evaluate": {"grad_norm": 0.5, "start_time": 7.0,
                                                                     "learning_rate": 1e-3}}
    args, kwargs = _overrides.base_call(me, "_maybe_log_save_evaluate", ("loss", "model", None, 1.0, None), {})
    assert args == () and kwargs == {"tr_loss": "loss", "grad_norm": 0.5, "model": "model", "trial": None,
                                     "epoch": 1.0, "ignore_keys_for_eval": None, "start_time": 7.0,
                                     "learning_rate": 1e-3}
    args, kwargs = _overrides.base_call(me, "_save_checkpoint", ("model", None, {"eval_loss": 1.0}), {})
    assert kwargs == {"model": "model", "trial": None}
    today = (("loss", 0.5, "model", None, 1.0, None, 7.0), {"learning_rate": 1e-3})
    assert _overrides.base_call(me, "_maybe_log_save_evaluate", *today) == today


@pytest.mark.skipif(not LEGACY_RELEASE, reason="needs a release with the 4.x override protocol (nox -s 'transformers(4.34.1)')")
def test_on_a_release_with_the_4x_protocol_the_base_takes_every_call_as_it_comes() -> None:
    me = _Sub.__new__(_Sub)
    legacy = (("loss", "model", None, 1.0, None), {})
    assert _overrides.base_call(me, "_maybe_log_save_evaluate", *legacy) == legacy
    assert _overrides.base_call(me, "_save_checkpoint", ("model", None, {"eval_loss": 1.0}), {}) == (
        ("model", None, {"eval_loss": 1.0}), {})


# ---------------------------------------------------------------------- the table against the sources
def _ast_methods(path: Path, cls: str) -> dict[str, list[inspect.Parameter]]:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    out = {}
    for f in node.body:
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in f.decorator_list)
            text = ast.unparse(f.args)
            params = _overrides._parse(text)
            out[f.name] = params if static else params[1:]
    return out


def _names(params: list[inspect.Parameter]) -> list[str]:
    return [("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "") + p.name
            + ("=" if p.default is not p.empty else "") for p in params]


def _installed(cls: type, name: str) -> list[inspect.Parameter] | None:
    """The installed release's ``cls.name`` parameters after ``self`` (None: no such method)."""
    raw = inspect.getattr_static(cls, name, None)
    if raw is None or not (isinstance(raw, (staticmethod, classmethod)) or inspect.isfunction(raw)):
        return None
    params = list(inspect.signature(getattr(cls, name)).parameters.values())
    return params[1:] if inspect.isfunction(raw) else params


@pytest.mark.skipif(LEGACY_RELEASE, reason="the table is of 4.30.2 against the 5.x protocol")
@pytest.mark.parametrize(("cls", "source"), [("Trainer", "trainer.py"), ("Seq2SeqTrainer", "trainer_seq2seq.py")])
def test_every_changed_overridable_method_is_in_the_protocol_table(cls: str, source: str) -> None:
    old = _ast_methods(source_430() / source, cls)
    release = next(c for c in getattr(transformers, cls).__mro__ if c.__module__.startswith("transformers."))
    rows = {c.method: c for c in PROTOCOL if c.owner == cls}
    missing, wrong = [], []
    for name, params in old.items():
        today = _installed(release, name)
        if today is not None and _names(params) == _names(today):
            continue
        row = rows.get(name)
        if row is None:
            missing.append(f"{name}{_names(params)} -> {None if today is None else _names(today)}")
            continue
        if _names(row.parameters("legacy")) != _names(params) or (
                (today is None) != (row.today is None) or (today is not None and _names(row.parameters("today")) != _names(today))):
            wrong.append(name)
    assert not missing, "Trainer methods whose signature changed but are not in _overrides.PROTOCOL:\n" + "\n".join(missing)
    assert not wrong, f"rows that do not match the sources: {wrong}"
    for row in rows.values():  # and every row is a real method of 4.30.2
        assert row.method in old, row.method
        if row.served is Served.UNCHANGED:
            today = _installed(release, row.method)
            assert today is not None and _names(row.parameters("legacy")) == _names(old[row.method]) == _names(today)
