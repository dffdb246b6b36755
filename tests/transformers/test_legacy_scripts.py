"""A 4.30-era script runs unchanged under ``shardcompat run`` and trains as its hand-ported twin does on stock 5.x.

``scripts/run_glue_legacy.py`` uses the API of Transformers 4.30 (see its docstring) and
``--evaluation_strategy``/``--overwrite_output_dir`` on its command line.  The reference is the
same script after the minimal manual port (:data:`PORT`, every edit asserted to apply), run on
the installed Transformers' own classes under plain ``torchrun`` (DDP over gloo, 2 CPU ranks).
The legacy script runs unmodified through ``shardcompat run --nproc 2`` with ``--sharded_ddp``;
per-step losses, the evaluation and the saved weights must equal the reference's.  The default
run checks ``"zero_dp_3 auto_wrap"``; ``SHARDCOMPAT_TRANSFORMERS_GRID=full`` adds the bare
flag and ``zero_dp_2``.  Model, tokenizer and data are built here; nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

SCRIPTS = Path(__file__).parent / "scripts"
FULL = os.environ.get("SHARDCOMPAT_TRANSFORMERS_GRID") == "full"
SHARDINGS = {"zero_dp_3-auto_wrap": ["zero_dp_3 auto_wrap"]}
if FULL:
    SHARDINGS.update({"bare-flag": [], "zero_dp_2": ["zero_dp_2"]})
WORDS = [f"w{i}" for i in range(40)]

# The minimal manual port of run_glue_legacy.py to 5.x: (old, new, how many times).
PORT = [
    ("    is_torch_tpu_available,\n", "    is_torch_xla_available,\n", 1),
    ("not is_torch_tpu_available()", "not is_torch_xla_available()", 1),
    ("import check_min_version, send_example_telemetry", "import check_min_version", 1),
    ('    send_example_telemetry("run_glue", model_args, data_args)\n', "", 1),
    ("use_auth_token=True if", "token=True if", 3),
    ("        tokenizer=tokenizer,\n", "        processing_class=tokenizer,\n", 1),
    ("not training_args.overwrite_output_dir", "not data_args.overwrite_output_dir", 1),
    ('    pad_to_max_length: bool = field(default=True, metadata={"help": "Pad every sample to max_seq_length."})\n',
     '    pad_to_max_length: bool = field(default=True, metadata={"help": "Pad every sample to max_seq_length."})\n'
     '    overwrite_output_dir: bool = field(default=False, metadata={"help": "Start over in output_dir."})\n', 1),
]
COMMON = [
    "--do_train", "--do_eval", "--max_steps", "4", "--per_device_train_batch_size", "2",
    "--per_device_eval_batch_size", "4", "--gradient_accumulation_steps", "2", "--logging_steps", "1",
    "--learning_rate", "5e-3", "--report_to", "none", "--disable_tqdm", "true", "--seed", "0",
    "--overwrite_output_dir", "--eval_steps", "2", "--save_strategy", "no",
]


# On a release that still has the 4.30 API (4.34.1 in the nox session) the reference is the
# script itself, unported: there the layer must change nothing.
LEGACY_RELEASE = hasattr(transformers, "is_torch_tpu_available")
EVAL_FLAG = "--evaluation_strategy" if LEGACY_RELEASE else "--eval_strategy"


def port(source: str) -> str:
    if LEGACY_RELEASE:
        return source
    for old, new, count in PORT:
        assert source.count(old) == count, old
        source = source.replace(old, new)
    return source


def _assets(root: Path) -> dict[str, Path]:
    """A tiny BERT classifier and its word-level tokenizer saved with save_pretrained, and JSON-lines data."""
    import tokenizers
    import torch

    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")
    model_dir = root / "model"
    tokenizer.save_pretrained(model_dir)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2)
    transformers.BertForSequenceClassification(config).save_pretrained(model_dir)
    rng = random.Random(0)
    files = {}
    for split, size in (("train", 64), ("validation", 16)):
        path = root / f"{split}.jsonl"
        rows = []
        for _ in range(size):
            a, b = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(2))
            rows.append(json.dumps({"sentence1": a, "sentence2": b, "label": int(a.split()[0] < b.split()[0])}))
        path.write_text("\n".join(rows) + "\n")
        files[split] = path
    return {"model": model_dir, **files}


def _run(command: list[str], out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONWARNINGS": "default::FutureWarning", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    return {"code": done.returncode, "output": done.stdout + done.stderr, "out": out}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("glue")
    assets = _assets(root)
    data = ["--model_name_or_path", str(assets["model"]), "--train_file", str(assets["train"]),
            "--validation_file", str(assets["validation"])]
    ported = root / "run_glue_ported.py"
    ported.write_text(port((SCRIPTS / "run_glue_legacy.py").read_text()))
    results = {"stock": _run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(ported),
         *data, *COMMON, EVAL_FLAG, "steps", "--use_cpu", "--output_dir", str(root / "stock")],
        root / "stock")}
    for name, words in SHARDINGS.items():
        out = root / name
        results[name] = _run(
            [sys.executable, "-m", "shardcompat", "run", "--nproc", "2", str(SCRIPTS / "run_glue_legacy.py"),
             *data, *COMMON, "--evaluation_strategy", "steps", "--output_dir", str(out), "--sharded_ddp", *words],
            out)
    return results


def _done(runs: dict[str, dict[str, Any]], name: str) -> Path:
    assert runs[name]["code"] == 0, runs[name]["output"][-6000:]
    out: Path = runs[name]["out"]
    return out


def _history(out: Path) -> tuple[list[float], list[float]]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [e["loss"] for e in history if "loss" in e], [e["eval_loss"] for e in history if "eval_loss" in e]


def test_the_ported_script_runs_on_stock_transformers(runs: dict[str, dict[str, Any]]) -> None:
    losses, evals = _history(_done(runs, "stock"))
    assert len(losses) == 4 and len(evals) == 2  # evaluated at steps 2 and 4 (--eval_strategy steps)


@pytest.mark.parametrize("name", list(SHARDINGS))
def test_the_legacy_script_runs_unchanged_and_trains_as_stock_ddp(runs: dict[str, dict[str, Any]], name: str) -> None:

    stock, sharded = _done(runs, "stock"), _done(runs, name)
    (a_losses, a_evals), (b_losses, b_evals) = _history(stock), _history(sharded)
    assert len(a_losses) == len(b_losses) == 4
    assert max(abs(a - b) for a, b in zip(a_losses, b_losses)) <= 1e-4, (a_losses, b_losses)
    assert max(abs(a - b) for a, b in zip(a_evals, b_evals)) <= 1e-4, (a_evals, b_evals)
    a, b = (transformers.AutoModelForSequenceClassification.from_pretrained(out).state_dict()
            for out in (stock, sharded))
    assert a.keys() == b.keys()
    assert max(float((a[k].float() - b[k].float()).abs().max()) for k in a) <= 1e-5
    assert (sharded / "tokenizer.json").exists()  # Trainer(tokenizer=) saved it, as processing_class does


@pytest.mark.skipif(LEGACY_RELEASE, reason="this release has the 4.30 API itself: nothing to serve, nothing warns")
def test_each_legacy_name_warned_with_its_replacement(runs: dict[str, dict[str, Any]]) -> None:
    name = next(iter(SHARDINGS))
    output = runs[name]["output"]
    _done(runs, name)
    for spelling, replacement in [
        ("TrainingArguments --evaluation_strategy", "--eval_strategy"),
        ("TrainingArguments --overwrite_output_dir", "a field of the script's own arguments dataclass"),
        ("transformers.utils.send_example_telemetry", "no effect"),
        ("transformers.is_torch_tpu_available", "is_torch_xla_available()"),
        ("from_pretrained(use_auth_token=...)", "token="),
        ("Trainer(tokenizer=...)", "processing_class="),
    ]:
        line = next((ln for ln in output.splitlines() if spelling in ln and "FutureWarning" in ln), None)
        assert line is not None and replacement in line, (spelling, output[-3000:])
        assert "docs/transformers-legacy.md" in line
