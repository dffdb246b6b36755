"""Issue 30's seq2seq project, both ways: ``scripts/run_seq2seq_project_legacy.py`` (a 4.2x-era
``Seq2SeqTrainer`` subclass with ``compute_loss(self, model, inputs)``, labels encoded in
``with tokenizer.as_target_tokenizer():``, ``transformers.utils.is_offline_mode``, the trainer's
arguments by position) runs unchanged under ``shardcompat run --nproc 2`` with its own scripts'
``--sharded_ddp simple --adafactor`` (and ``zero_dp_2``, which 4.x paired with it too), and after ``shardcompat-migrate --transformers-legacy``
(which reports nothing for a person to do here) on stock ``torchrun``.  Both train as its hand
port to 5.x does on stock ``torchrun`` (DDP over gloo, 2 CPU ranks, ``--optim adafactor``): the
label-smoothed loss of every micro-batch on each rank, the logged losses, the evaluations with
generation and the saved weights.  T5's dropout stays at its default.
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

import pytest

from ._stock import TORCHRUN
from .test_legacy_scripts import LEGACY_RELEASE, SCRIPTS, _run, _translation_assets
from .test_subclasses import _close, _results

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

SCRIPT = SCRIPTS / "run_seq2seq_project_legacy.py"
# The hand port to 5.x: (old, new, how many times).
PORT = [
    ("from transformers.utils import is_offline_mode\n", "from huggingface_hub import is_offline_mode\n", 1),
    ("        with tokenizer.as_target_tokenizer():\n"
     "            labels = tokenizer(targets, max_length=args.max_target_length, truncation=True)\n",
     "        labels = tokenizer(text_target=targets, max_length=args.max_target_length, truncation=True)\n", 1),
    ("    def compute_loss(self, model, inputs):\n",
     "    loss_is_scaled_for_ga = False  # a per-batch mean\n\n"
     "    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):\n", 1),
    ("model, training_args, collator, train_dataset, eval_dataset, tokenizer, None, compute_metrics",
     "model=model, args=training_args, data_collator=collator, train_dataset=train_dataset, "
     "eval_dataset=eval_dataset, processing_class=tokenizer, compute_metrics=compute_metrics", 1),
]
COMMON = [
    "--max_steps", "4", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "4",
    "--gradient_accumulation_steps", "2", "--learning_rate", "5e-3", "--logging_steps", "1", "--eval_steps", "2",
    "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true", "--seed", "0",
]
STOCK = ["--optim", "adafactor", "--eval_strategy", "steps", "--use_cpu"]
# 4.x paired --adafactor with zero_dp_2 too (fairscale's FSDP then fed it flat shards, so it
# trained unfactored); FSDP2's DTensor shards train what unsharded Adafactor trains.
LEGACY_RUNS = {"legacy": "simple", "legacy-zero_dp_2": "zero_dp_2"}


def _port(source: str) -> str:
    for old, new, count in PORT:
        assert source.count(old) == count, old
        source = source.replace(old, new)
    return source


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from codemods.cli import build_parser, run

    root = tmp_path_factory.mktemp("seq2seq")
    data = _translation_assets(root)
    ported = root / "ported" / SCRIPT.name
    migrated = root / "migrated" / SCRIPT.name
    for copy in (ported, migrated):
        copy.parent.mkdir()
    ported.write_text(_port(SCRIPT.read_text()))
    shutil.copy(SCRIPT, migrated)
    report = run(build_parser().parse_args([str(migrated), "--transformers-legacy", "--no-legacy", "--write",
                                            "--no-progress"]))
    results: dict[str, Any] = {"reported": [w for f in report.files for w in f.warnings],
                               "migrated_source": migrated.read_text()}
    for name, command in (
        ("stock", [*TORCHRUN, str(ported), *data, *COMMON, *STOCK]),
        ("migrated", [*TORCHRUN, str(migrated), *data, *COMMON, *STOCK]),
        *((name, [sys.executable, "-m", "shardcompat", "run", "--nproc", "2", str(SCRIPT), *data, *COMMON,
                  "--adafactor", "--evaluation_strategy", "steps", "--sharded_ddp", sharded_ddp])
          for name, sharded_ddp in LEGACY_RUNS.items()),
    ):
        results[name] = _run([*command, "--output_dir", str(root / name)], root / name)
    return results


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(LEGACY_RELEASE, reason="this release has the 4.x API itself: nothing to serve or migrate")
@pytest.mark.parametrize("name", [*LEGACY_RUNS, "migrated"])
def test_the_project_trains_as_its_hand_port_unchanged_and_migrated(runs: dict[str, Any], name: str) -> None:
    stock, other = _results(runs, "stock"), _results(runs, name)
    for a, b in zip(stock, other):  # each rank's own micro-batches, dropout on
        assert len(a["losses"]) == 8 and _close(a["losses"], b["losses"], 1e-4), (a["losses"], b["losses"])
        logged = [[e["loss"] for e in r["log_history"] if "loss" in e] for r in (a, b)]
        assert len(logged[0]) == 4 and _close(*logged, 1e-4), logged
        evals = [[e["eval_loss"] for e in r["log_history"] if "eval_loss" in e] for r in (a, b)]
        assert len(evals[0]) >= 2 and _close(*evals, 1e-4), evals
        assert a["eval"]["eval_exact_match"] == b["eval"]["eval_exact_match"]
        assert "Adafactor" in a["optimizer"] and "Adafactor" in b["optimizer"], (a["optimizer"], b["optimizer"])
    weights = [transformers.T5ForConditionalGeneration.from_pretrained(runs[n]["out"] / "final").state_dict()
               for n in ("stock", name)]
    assert max(float((weights[0][k] - weights[1][k]).abs().max()) for k in weights[0]) <= 1e-5
    if name in LEGACY_RUNS:  # sharded: each rank held half of the optimizer state
        if name == "legacy":
            assert any(n in ("OSS", "ZeroRedundancyOptimizer") for n in other[0]["optimizer"]), other[0]["optimizer"]
        else:  # stepping FSDP2's DTensor shards
            assert "torch-fsdp2" in runs[name]["output"], runs[name]["output"][-2000:]
        for spelling in ("LabelSmoothedTrainer.compute_loss(self, model, inputs", "as_target_tokenizer",
                         "transformers.utils.is_offline_mode", "8 positional arguments"):
            assert spelling in runs[name]["output"], spelling
    else:  # the tool wrote today's forms and left nothing for a person
        assert not runs["reported"], runs["reported"]
        source = runs["migrated_source"]
        assert "with tokenizer.as_target_tokenizer():\n" not in source and "text_target=targets" in source
        assert "from huggingface_hub import is_offline_mode" in source and "processing_class=tokenizer" in source
        assert "is the Transformers 4.x form" not in runs[name]["output"]
