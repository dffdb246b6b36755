"""4.30-era scripts run unchanged under ``shardcompat run`` and train as their hand-ported twins do on stock 5.x.

``scripts/run_glue_legacy.py`` (sequence classification), ``scripts/run_glue_dataset_legacy.py``
(the same on GLUE's TSV files through 4.x's ``GlueDataset`` and ``glue_compute_metrics``, whose
stock twin imports them from ``shardcompat.transformers.glue``), ``scripts/run_translation_legacy.py``
(seq2seq, ``--predict_with_generate``) and ``scripts/run_clm_datasets_legacy.py`` (causal LM on
CSV / JSON files through ``datasets.load_dataset``) use the API of Transformers 4.30 (see their
docstrings) and ``--evaluation_strategy``/``--overwrite_output_dir`` on their command lines; the
causal-LM one also 4.30's ``--per_gpu_*_batch_size``, ``--no_cuda``, ``--warmup_ratio`` and
``--fp16_opt_level``, which its stock twin spells as 5.x does (:data:`FLAGS`).  The reference is
each script after the minimal manual port (:data:`PORTS`, every edit asserted to apply), run on
the installed Transformers' own classes under plain ``torchrun`` (DDP over gloo, 2 CPU ranks).
The legacy script runs unmodified through ``shardcompat run --nproc 2`` with ``--sharded_ddp``;
per-step losses, evaluations, generated metrics and saved weights must equal the reference's.
The default run checks ``"zero_dp_3 auto_wrap"``; ``SHARDCOMPAT_TRANSFORMERS_GRID=full`` adds
the bare flag and ``zero_dp_2`` (``additions``: only those, see ``_grid``).  Models, tokenizers and data are built here; nothing is downloaded.
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

from ._grid import FULL, LEAN
from ._stock import TORCHRUN

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

SCRIPTS = Path(__file__).parent / "scripts"
SHARDINGS: dict[str, list[str]] = {}
if LEAN:
    SHARDINGS["zero_dp_3-auto_wrap"] = ["zero_dp_3 auto_wrap"]
if FULL:
    SHARDINGS.update({"bare-flag": [], "zero_dp_2": ["zero_dp_2"]})
WORDS = [f"w{i}" for i in range(40)]


def _own_field(after: str) -> tuple[str, str, int]:
    """The port's one real change: overwrite_output_dir becomes a field of the script's own dataclass."""
    return (after, after + '    overwrite_output_dir: bool = field(default=False, metadata={"help": "Start over."})\n', 1)


# The minimal manual port of each script to 5.x: (old, new, how many times).
COMMON_PORT = [
    ("import check_min_version, send_example_telemetry", "import check_min_version", 1),
    ("use_auth_token=True if", "token=True if", 3),
    ("        tokenizer=tokenizer,\n", "        processing_class=tokenizer,\n", 1),
    ("not training_args.overwrite_output_dir", "not data_args.overwrite_output_dir", 1),
]
PORTS = {
    "run_glue_legacy.py": [
        *COMMON_PORT,
        ("    is_torch_tpu_available,\n", "    is_torch_xla_available,\n", 1),
        ("not is_torch_tpu_available()", "not is_torch_xla_available()", 1),
        ('    send_example_telemetry("run_glue", model_args, data_args)\n', "", 1),
        ("elif os.path.isdir(model_args.model_name_or_path):",  # 4.x resumed a model folder as a fresh start
         'elif os.path.isfile(os.path.join(model_args.model_name_or_path, "trainer_state.json")):', 1),
        _own_field('    pad_to_max_length: bool = field(default=True, metadata={"help": "Pad every sample to max_seq_length."})\n'),
    ],
    "run_glue_dataset_legacy.py": [  # 4.x's GLUE layer has no Transformers successor: shardcompat keeps it
        *(edit for edit in COMMON_PORT if "tokenizer=" not in edit[0]),  # it passes no tokenizer, as 3.x-4.0
        ("    is_torch_tpu_available,\n", "    is_torch_xla_available,\n", 1),
        ("not is_torch_tpu_available()", "not is_torch_xla_available()", 1),
        ('    send_example_telemetry("run_glue", model_args, data_args)\n', "", 1),
        ("    GlueDataset,\n", "", 1),
        ("    glue_compute_metrics,\n    glue_output_modes,\n    glue_tasks_num_labels,\n", "", 1),
        ("from transformers import GlueDataTrainingArguments as DataTrainingArguments\n",
         "from shardcompat.transformers.glue import GlueDataTrainingArguments, GlueDataset, glue_compute_metrics, "
         "glue_output_modes, glue_tasks_num_labels\n\n\n@dataclass\nclass DataTrainingArguments(GlueDataTrainingArguments):\n"
         '    overwrite_output_dir: bool = field(default=False, metadata={"help": "Start over."})\n', 1),
    ],
    "run_squad_dataset_legacy.py": [  # 4.x's SQuAD layer has no Transformers successor: shardcompat keeps it
        *(edit for edit in COMMON_PORT if "tokenizer=" not in edit[0]),  # it passes no tokenizer, as 4.x's
        ('    send_example_telemetry("run_squad", model_args, data_args)\n', "", 1),
        ("    SquadDataset,\n", "", 1),
        ("from transformers.data.metrics.squad_metrics import compute_predictions_logits, squad_evaluate\n"
         "from transformers.data.processors.squad import SquadResult\n", "", 1),
        ("from transformers import SquadDataTrainingArguments as DataTrainingArguments\n",
         "from shardcompat.transformers.squad import SquadDataTrainingArguments, SquadDataset, SquadResult, "
         "compute_predictions_logits, squad_evaluate\n\n\n@dataclass\nclass DataTrainingArguments(SquadDataTrainingArguments):\n"
         '    overwrite_output_dir: bool = field(default=False, metadata={"help": "Start over."})\n', 1),
    ],
    "run_translation_legacy.py": [
        *COMMON_PORT,
        ('    send_example_telemetry("run_translation", model_args, data_args)\n', "", 1),
        _own_field('    num_beams: Optional[int] = field(default=1, metadata={"help": "Beams for evaluate and predict."})\n'),
    ],
    "run_clm_datasets_legacy.py": [
        ("            use_auth_token=True if", "            token=True if", 1),  # load_dataset's (datasets 3.0)
        *COMMON_PORT,
        ("    is_torch_tpu_available,\n", "    is_torch_xla_available,\n", 1),
        ("not is_torch_tpu_available()", "not is_torch_xla_available()", 2),
        ('    send_example_telemetry("run_clm", model_args, data_args)\n', "", 1),
        _own_field('    preprocessing_num_workers: Optional[int] = field(default=None, metadata={"help": "Processes for map()."})\n'),
    ],
}
RUN_FLAGS = [
    "--do_train", "--do_eval", "--max_steps", "4", "--gradient_accumulation_steps", "2", "--logging_steps", "1",
    "--learning_rate", "5e-3", "--report_to", "none", "--disable_tqdm", "true", "--seed", "0",
    "--overwrite_output_dir", "--eval_steps", "2", "--save_strategy", "no",
]


BATCH = ["--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "4"]
# Each script's own flags: (the legacy command line, the stock twin's 5.x spelling of it).
FLAGS = {
    "run_clm_datasets_legacy.py": (
        ["--per_gpu_train_batch_size", "2", "--per_gpu_eval_batch_size", "4", "--no_cuda", "--warmup_ratio", "0.25",
         "--fp16_opt_level", "O2"],
        [*BATCH, "--use_cpu", "--warmup_steps", "0.25"],
    ),
}

# On a release that still has the 4.30 API (4.34.1 in the nox session) the reference is the
# script itself, unported: there the layer must change nothing.
LEGACY_RELEASE = hasattr(transformers, "is_torch_tpu_available")
EVAL_FLAG = "--evaluation_strategy" if LEGACY_RELEASE else "--eval_strategy"


def flags(script: str) -> tuple[list[str], list[str]]:
    legacy, stock = FLAGS.get(script, (BATCH, BATCH))
    return legacy, legacy if LEGACY_RELEASE else stock


def port(script: str, source: str) -> str:
    if LEGACY_RELEASE:
        return source
    for old, new, count in PORTS[script]:
        assert source.count(old) == count, old
        source = source.replace(old, new)
    return source


def _tokenizer(model_dir: Path, mask: bool = False) -> int:
    """A word-level tokenizer saved with save_pretrained (BERT's specials, </s> for T5, [MASK] for a
    masked LM); its size."""
    import tokenizers

    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "</s>", *(["[MASK]"] * mask), *WORDS])}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        eos_token="</s>", **({"mask_token": "[MASK]"} if mask else {})).save_pretrained(model_dir)
    return len(vocab)


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))


def _jsonl(root: Path, split: str, size: int, row: Any) -> Path:
    rng = random.Random(split)
    path = root / f"{split}.jsonl"
    path.write_text("".join(json.dumps(row(rng)) + "\n" for _ in range(size)))
    return path


def _glue_assets(root: Path) -> list[str]:
    """A tiny BERT classifier; sentence pairs labelled by comparing their first words."""
    import torch

    size = _tokenizer(root / "model")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32, num_labels=2)
    transformers.BertForSequenceClassification(config).save_pretrained(root / "model")

    def row(rng: random.Random) -> dict[str, Any]:
        a, b = _sentence(rng), _sentence(rng)
        return {"sentence1": a, "sentence2": b, "label": int(a.split()[0] < b.split()[0])}

    return ["--model_name_or_path", str(root / "model"), "--train_file", str(_jsonl(root, "train", 64, row)),
            "--validation_file", str(_jsonl(root, "validation", 16, row))]


def _glue_tsv_assets(root: Path) -> list[str]:
    """The same classifier; the task's files in GLUE's MRPC layout (read by ``GlueDataset``)."""
    model = _glue_assets(root)[:2]
    rows = {split: [json.loads(line) for line in (root / f"{split}.jsonl").read_text().splitlines()]
            for split in ("train", "validation")}
    data = root / "MRPC"
    data.mkdir()
    for split, name in (("train", "train.tsv"), ("validation", "dev.tsv")):
        lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        lines += [f"{r['label']}\t{2 * i}\t{2 * i + 1}\t{r['sentence1']}\t{r['sentence2']}" for i, r in enumerate(rows[split])]
        (data / name).write_text("\n".join(lines) + "\n")
    # --overwrite_cache: a 4.x release's own GlueDataset would torch.load its pickled cache, which
    # today's torch refuses (weights_only); each run builds its features
    return [*model, "--task_name", "MRPC", "--data_dir", str(data), "--max_seq_length", "16", "--overwrite_cache"]


def _squad_assets(root: Path) -> list[str]:
    """A tiny BERT reader; SQuAD 1.1 files whose answer is the word after the question's first word."""
    import torch

    size = _tokenizer(root / "model")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32)
    transformers.BertForQuestionAnswering(config).save_pretrained(root / "model")
    data = root / "squad"
    data.mkdir()
    for split, count in (("train-v1.1.json", 24), ("dev-v1.1.json", 8)):
        rng = random.Random(split)
        paragraphs = []
        for n in range(count):
            words = rng.sample(WORDS, 12)  # two spans of the document (12 words, stride 8, 24 tokens)
            at = rng.randrange(11)
            question = f"{words[at]} {rng.choice(WORDS)}"
            start = len(" ".join(words[:at + 1])) + 1
            answer = {"text": words[at + 1], "answer_start": start}
            paragraphs.append({"context": " ".join(words), "qas": [
                {"id": f"{split}-{n}", "question": question, "answers": [answer]}]})
        (data / split).write_text(json.dumps({"version": "1.1", "data": [{"title": "w", "paragraphs": paragraphs}]}))
    # --overwrite_cache: each run builds its features (a 4.x release's own cache is a torch.save pickle)
    return ["--model_name_or_path", str(root / "model"), "--data_dir", str(data), "--max_seq_length", "24",
            "--doc_stride", "8", "--max_query_length", "6", "--overwrite_cache"]


def _translation_assets(root: Path) -> list[str]:
    """A tiny T5; the "translation" reverses the words."""
    import torch

    size = _tokenizer(root / "model")
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=size, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=4)
    transformers.T5ForConditionalGeneration(config).save_pretrained(root / "model")

    def row(rng: random.Random) -> dict[str, Any]:
        en = _sentence(rng)
        return {"translation": {"en": en, "de": " ".join(reversed(en.split()))}}

    return ["--model_name_or_path", str(root / "model"), "--train_file", str(_jsonl(root, "train", 64, row)),
            "--validation_file", str(_jsonl(root, "validation", 8, row)), "--predict_with_generate",
            "--generation_max_length", "8"]


def _clm_assets(root: Path) -> list[str]:
    """A tiny GPT-2; training text in a CSV file, validation text in JSON lines (both read by ``datasets``)."""
    import torch

    size = _tokenizer(root / "model")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=size, n_positions=16, n_embd=32, n_layer=2, n_head=2, bos_token_id=4, eos_token_id=4)
    transformers.GPT2LMHeadModel(config).save_pretrained(root / "model")
    rng = random.Random("train")
    train = root / "train.csv"
    train.write_text("text\n" + "".join(_sentence(rng) + "\n" for _ in range(64)))
    validation = _jsonl(root, "validation", 16, lambda rng: {"text": _sentence(rng)})
    return ["--model_name_or_path", str(root / "model"), "--train_file", str(train), "--validation_file",
            str(validation), "--block_size", "8", "--cache_dir", str(root / "cache")]


SCRIPT_ASSETS = {"run_glue_legacy.py": _glue_assets, "run_glue_dataset_legacy.py": _glue_tsv_assets,
                 "run_translation_legacy.py": _translation_assets}
if not LEGACY_RELEASE:  # 4.34.1's own SquadDataset calls np.where on a bare bool, which NumPy 2 refuses
    SCRIPT_ASSETS["run_squad_dataset_legacy.py"] = _squad_assets
# The `datasets` script needs `datasets` (in the test extra), importable next to this Transformers.
try:
    import datasets  # noqa: F401
except ImportError:
    pass
else:
    SCRIPT_ASSETS["run_clm_datasets_legacy.py"] = _clm_assets
MODEL_CLASSES = {"run_glue_legacy.py": "AutoModelForSequenceClassification",
                 "run_glue_dataset_legacy.py": "AutoModelForSequenceClassification",
                 "run_squad_dataset_legacy.py": "AutoModelForQuestionAnswering",
                 "run_translation_legacy.py": "AutoModelForSeq2SeqLM",
                 "run_clm_datasets_legacy.py": "AutoModelForCausalLM"}
METRIC = {"run_glue_legacy.py": "eval_accuracy", "run_glue_dataset_legacy.py": "eval_f1",
          "run_squad_dataset_legacy.py": "eval_exact",
          "run_translation_legacy.py": "eval_gen_len",
          "run_clm_datasets_legacy.py": "eval_accuracy"}
RUNS = [(script, sharding) for script in SCRIPT_ASSETS for sharding in SHARDINGS]
# The module fixture starts every run, one after another (about 12 s each on 2 idle cores), inside
# the first test's time limit: 60 s a run, so that a busy machine (two pytest workers, another
# job) does not stop it half-way.  A run that hangs still stops at its own 600 s (_run).
pytestmark = pytest.mark.timeout(60 * (len(SCRIPT_ASSETS) + len(RUNS)))
# Evaluations with a loss, at steps 2 and 4: SQuAD's dev features carry no answer, so none there
EVAL_LOSSES = {"run_squad_dataset_legacy.py": 0}


def _run(command: list[str], out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONWARNINGS": "default::FutureWarning", "OMP_NUM_THREADS": "1",
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    return {"code": done.returncode, "output": done.stdout + done.stderr, "out": out}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    results = {}
    for script, build in SCRIPT_ASSETS.items():
        root = tmp_path_factory.mktemp(script.split("_")[1])
        data = build(root)
        legacy, stock = flags(script)
        ported = root / script.replace("legacy", "ported")
        ported.write_text(port(script, (SCRIPTS / script).read_text()))
        results[script, "stock"] = _run(
            [*TORCHRUN, str(ported),
             *data, *RUN_FLAGS, *stock, EVAL_FLAG, "steps", "--use_cpu", "--output_dir", str(root / "stock")],
            root / "stock")
        for name, words in SHARDINGS.items():
            out = root / name
            results[script, name] = _run(
                [sys.executable, "-m", "shardcompat", "run", "--nproc", "2", str(SCRIPTS / script),
                 *data, *RUN_FLAGS, *legacy, "--evaluation_strategy", "steps", "--output_dir", str(out),
                 "--sharded_ddp", *words],
                out)
    return results


Runs = dict[tuple[str, str], dict[str, Any]]


def _done(runs: Runs, script: str, name: str) -> Path:
    run = runs[script, name]
    assert run["code"] == 0, run["output"][-6000:]
    out: Path = run["out"]
    return out


def _history(out: Path) -> tuple[list[float], list[float]]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [e["loss"] for e in history if "loss" in e], [e["eval_loss"] for e in history if "eval_loss" in e]


@pytest.mark.parametrize("script", list(SCRIPT_ASSETS))
def test_the_ported_script_runs_on_stock_transformers(runs: Runs, script: str) -> None:
    losses, evals = _history(_done(runs, script, "stock"))
    assert len(losses) == 4 and len(evals) == EVAL_LOSSES.get(script, 2)  # evaluated at steps 2 and 4


@pytest.mark.parametrize(("script", "name"), RUNS)
def test_the_legacy_script_runs_unchanged_and_trains_as_stock_ddp(runs: Runs, script: str, name: str) -> None:
    stock, sharded = _done(runs, script, "stock"), _done(runs, script, name)
    (a_losses, a_evals), (b_losses, b_evals) = _history(stock), _history(sharded)
    assert len(a_losses) == len(b_losses) == 4 and len(a_evals) == len(b_evals) == EVAL_LOSSES.get(script, 2)
    assert max(abs(a - b) for a, b in zip(a_losses, b_losses)) <= 1e-4, (a_losses, b_losses)
    assert max((abs(a - b) for a, b in zip(a_evals, b_evals)), default=0.0) <= 1e-4, (a_evals, b_evals)
    model_class = getattr(transformers, MODEL_CLASSES[script])
    a, b = (model_class.from_pretrained(out).state_dict() for out in (stock, sharded))
    assert a.keys() == b.keys()
    assert max(float((a[k].float() - b[k].float()).abs().max()) for k in a) <= 1e-5
    assert (sharded / "tokenizer.json").exists()  # Trainer(tokenizer=) saved it, as processing_class does
    metrics = [json.loads((out / "eval_results.json").read_text()) for out in (stock, sharded)]
    assert metrics[0].keys() == metrics[1].keys()
    assert METRIC[script] in metrics[0], metrics[0]
    for key in ("eval_accuracy", "eval_acc", "eval_f1", "eval_exact_match", "eval_exact", "eval_gen_len"):
        assert metrics[0].get(key) == metrics[1].get(key), key


@pytest.mark.skipif(LEGACY_RELEASE, reason="this release has the 4.30 API itself: nothing to serve, nothing warns")
@pytest.mark.parametrize("script", list(SCRIPT_ASSETS))
def test_each_legacy_name_warned_with_its_replacement(runs: Runs, script: str) -> None:
    name = next(iter(SHARDINGS))
    _done(runs, script, name)
    output = runs[script, name]["output"]
    expected = [
        ("TrainingArguments --evaluation_strategy", "--eval_strategy"),
        ("TrainingArguments --overwrite_output_dir", "a field of the script's own arguments dataclass"),
        ("transformers.utils.send_example_telemetry", "no effect"),
        ("from_pretrained(use_auth_token=...)", "token="),
    ]
    if script not in ("run_glue_dataset_legacy.py", "run_squad_dataset_legacy.py"):
        expected.append(("Trainer(tokenizer=...)", "processing_class="))
    if script not in ("run_translation_legacy.py", "run_squad_dataset_legacy.py"):
        expected.append(("transformers.is_torch_tpu_available", "is_torch_xla_available()"))
    if script == "run_glue_legacy.py":  # resume_from_checkpoint=model_args.model_name_or_path (a model folder)
        expected.append(("trainer.train(resume_from_checkpoint=", "resume_from_checkpoint=None"))
    if script == "run_glue_dataset_legacy.py":
        expected += [(f"transformers.{name}", f"from shardcompat.transformers.glue import {name}")
                     for name in ("GlueDataset", "GlueDataTrainingArguments", "glue_compute_metrics")]
    if script == "run_squad_dataset_legacy.py":
        expected += [(f"transformers.{name}", f"from shardcompat.transformers.squad import {name}")
                     for name in ("SquadDataset", "SquadDataTrainingArguments")]
        expected += [(f"transformers.data.{where}.{name}", f"from shardcompat.transformers.squad import {name}")
                     for where, name in (("metrics.squad_metrics", "compute_predictions_logits"),
                                         ("processors.squad", "SquadResult"))]
    if script == "run_clm_datasets_legacy.py":
        expected += [
            ("datasets.load_dataset(use_auth_token=...)", "token="),
            ("TrainingArguments --per_gpu_train_batch_size", "--per_device_train_batch_size"),
            ("TrainingArguments --per_gpu_eval_batch_size", "--per_device_eval_batch_size"),
            ("TrainingArguments --no_cuda", "--use_cpu"),
            ("TrainingArguments --warmup_ratio", "--warmup_steps"),
            ("TrainingArguments --fp16_opt_level", "no effect"),
        ]
    for spelling, replacement in expected:
        line = next((ln for ln in output.splitlines() if spelling in ln and "FutureWarning" in ln), None)
        assert line is not None and replacement in line, (spelling, output[-3000:])
        assert "docs/transformers-legacy.md" in line
