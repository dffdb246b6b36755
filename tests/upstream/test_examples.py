"""Transformers' own example scripts of a 4.x release run unchanged, and migrated, as stock 5.x does.

Issue 30's "tested by running it": the scripts come from a checkout of Transformers that this
repository does not carry (third-party files); ``nox -s upstream_examples -- PATH`` names its
``examples/pytorch`` folder (``SHARDCOMPAT_UPSTREAM_EXAMPLES``), e.g. one ``git archive v4.30.2
examples`` wrote.  For each script:

- unchanged: ``shardcompat run --nproc 2 SCRIPT`` with the 4.x flags (``--evaluation_strategy``,
  ``--no_cuda``, ``--overwrite_output_dir``) and ``--sharded_ddp "zero_dp_3 auto_wrap"``;
- migrated: a copy of its folder after ``shardcompat-migrate --transformers-legacy --write``
  (which must report nothing), on plain ``torchrun`` with the installed Transformers (DDP);
- per-step losses, evaluations, metrics and the saved weights must agree.

Models, tokenizers and data are built here (the asset builders of ``test_legacy_scripts``).  The
hub's metric scripts cannot be downloaded here: ``evaluate.load("accuracy")`` (and ``"squad"``,
``"seqeval"``, ``"sacrebleu"``) finds a local ``accuracy/accuracy.py`` (evaluate's own local-script
form, ``metrics/``: stand-ins that score what the scripts read) in the run's folder, the same file
for both sides.  Deselected by default (``-m upstream``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from ..transformers._stock import TORCHRUN
from ..transformers.test_legacy_scripts import (
    WORDS,
    _clm_assets,
    _glue_assets,
    _jsonl,
    _sentence,
    _tokenizer,
    _translation_assets,
)

pytestmark = pytest.mark.upstream
transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[test]')")
pytest.importorskip("evaluate", reason="the 4.x example scripts import evaluate (pip install evaluate)")

METRICS = Path(__file__).parent / "metrics"  # local stand-ins for the hub's metric scripts


def _text_files(root: Path) -> list[str]:
    """Train and validation text files of sentences (4.x's language-modeling scripts read both with
    the train file's loader)."""
    files = []
    for split, size in (("train", 64), ("validation", 16)):
        rng = random.Random(split)
        (root / f"{split}.txt").write_text("".join(_sentence(rng) + "\n" for _ in range(size)))
        files += [f"--{split}_file", str(root / f"{split}.txt")]
    return files


def _clm_text_assets(root: Path) -> list[str]:
    """``test_legacy_scripts``' tiny GPT-2, on text files."""
    args = _clm_assets(root)
    for flag, value in zip(_text_files(root)[::2], _text_files(root)[1::2]):
        args[args.index(flag) + 1] = value
    return args


def _bert(root: Path, head: str, mask: bool = False, **config_kwargs: Any) -> list[str]:
    """A tiny BERT with ``head`` (``ForMaskedLM``, ...) and its tokenizer in ``root/model``."""
    import torch

    size = _tokenizer(root / "model", mask=mask)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32, **config_kwargs)
    getattr(transformers, f"Bert{head}")(config).save_pretrained(root / "model")
    return ["--model_name_or_path", str(root / "model")]


def _mlm_assets(root: Path) -> list[str]:
    """A tiny BERT masked LM; text files of sentences."""
    return [*_bert(root, "ForMaskedLM", mask=True), *_text_files(root), "--max_seq_length", "16"]


def _swag_assets(root: Path) -> list[str]:
    """A tiny BERT multiple-choice model; four endings, the label picks one."""
    model = _bert(root, "ForMultipleChoice")

    def row(rng: random.Random) -> dict[str, Any]:
        return {"sent1": _sentence(rng), "sent2": _sentence(rng), **{f"ending{i}": _sentence(rng) for i in range(4)},
                "label": rng.randrange(4)}

    return [*model, "--train_file", str(_jsonl(root, "train", 32, row)),
            "--validation_file", str(_jsonl(root, "validation", 16, row)), "--max_seq_length", "16"]


def _with(build: Callable[[Path], list[str]], *extra: str) -> Callable[[Path], list[str]]:
    """``build``'s arguments and ``extra``; JSON-lines files renamed ``.json`` (the 4.x scripts
    accept csv, json or txt by extension)."""

    def assets(root: Path) -> list[str]:
        args = build(root)
        for i, arg in enumerate(args):
            if arg.endswith(".jsonl"):
                args[i] = str(Path(arg).rename(Path(arg).with_suffix(".json")))
        return [*args, *extra]

    return assets


def _ner_assets(root: Path) -> list[str]:
    """A tiny BERT token classifier; each word tagged by where it sits in the vocabulary."""
    tags = ["O", "B-X", "I-X"]
    model = _bert(root, "ForTokenClassification", num_labels=len(tags))

    def row(rng: random.Random) -> dict[str, Any]:
        words = _sentence(rng).split()
        return {"tokens": words, "ner_tags": [tags[int(w[1:]) % len(tags)] for w in words]}

    return [*model, "--train_file", str(_jsonl(root, "train", 64, row)),
            "--validation_file", str(_jsonl(root, "validation", 16, row)), "--max_seq_length", "16"]


def _squad_files(root: Path) -> list[str]:
    """SQuAD-form JSON (``{"data": [...]}``), the answer one word of the context."""
    files = []
    for split, count in (("train", 32), ("validation", 8)):
        rng, rows = random.Random(split), []
        for i in range(count):
            words = _sentence(rng).split() + _sentence(rng).split()
            k = rng.randrange(len(words))
            start = len(" ".join(words[:k])) + (1 if k else 0)
            rows.append({"id": f"{split}{i}", "title": "t", "context": " ".join(words), "question": f"where {words[k]}",
                         "answers": {"text": [words[k]], "answer_start": [start]}})
        (root / f"{split}.json").write_text(json.dumps({"data": rows}))
        files += [f"--{split}_file", str(root / f"{split}.json")]
    return files


def _qa_assets(root: Path) -> list[str]:
    """A tiny BERT for extractive QA on SQuAD-form JSON."""
    return [*_bert(root, "ForQuestionAnswering"), *_squad_files(root), "--max_seq_length", "32", "--doc_stride", "8"]


def _seq2seq_qa_assets(root: Path) -> list[str]:
    """``test_legacy_scripts``' tiny T5, generating the answer of SQuAD-form JSON."""
    model = _translation_assets(root)[:2]  # --model_name_or_path and the T5 it wrote
    return [*model, *_squad_files(root), "--context_column", "context", "--question_column", "question",
            "--answer_column", "answers", "--predict_with_generate", "--max_seq_length", "32",
            "--max_answer_length", "8", "--generation_max_length", "8"]


def _xlnet_qa_assets(root: Path) -> list[str]:
    """A tiny XLNet for beam-search QA (its script loads XLNetTokenizerFast itself: a Unigram
    tokenizer over the same words) on SQuAD-form JSON."""
    import tokenizers
    import torch

    specials = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
    pieces = [*specials, *(f"\u2581{w}" for w in WORDS), "\u2581", *"w0123456789"]
    backend = tokenizers.Tokenizer(tokenizers.models.Unigram([(p, -float(i > 8)) for i, p in enumerate(pieces)], unk_id=0))
    backend.pre_tokenizer, backend.decoder = tokenizers.pre_tokenizers.Metaspace(), tokenizers.decoders.Metaspace()
    transformers.XLNetTokenizerFast(tokenizer_object=backend).save_pretrained(root / "model")
    torch.manual_seed(0)
    config = transformers.XLNetConfig(vocab_size=len(pieces), d_model=32, n_layer=2, n_head=2, d_inner=64,
                                      pad_token_id=specials.index("<pad>"), start_n_top=2, end_n_top=2)
    transformers.XLNetForQuestionAnswering(config).save_pretrained(root / "model")
    return ["--model_name_or_path", str(root / "model"), *_squad_files(root), "--max_seq_length", "32",
            "--doc_stride", "8"]


def _plm_assets(root: Path) -> list[str]:
    """A tiny XLNet for permutation language modeling; text files of sentences."""
    import torch

    size = _tokenizer(root / "model", mask=True)
    torch.manual_seed(0)
    config = transformers.XLNetConfig(vocab_size=size, d_model=32, n_layer=2, n_head=2, d_inner=64, pad_token_id=0)
    transformers.XLNetLMHeadModel(config).save_pretrained(root / "model")
    return ["--model_name_or_path", str(root / "model"), *_text_files(root), "--max_seq_length", "16"]


@dataclass(frozen=True)
class Upstream:
    """One example script: its assets, the class its output loads with, the metric its evaluations
    log, and the hand edits after migrating, for what the tool reported ((file, old, new): every
    ``old`` in the file, at least one)."""

    assets: Callable[[Path], list[str]]
    model_class: str
    metric: str = "eval_loss"
    hand: tuple[tuple[str, str, str], ...] = ()
    weights: float = 1e-5  # the largest weight difference allowed


_LEGACY_LOOP = "self.prediction_loop if self.args.use_legacy_prediction_loop else self.evaluation_loop"
SCRIPTS: dict[str, Upstream] = {  # under examples/pytorch
    "language-modeling/run_clm.py": Upstream(_clm_text_assets, "AutoModelForCausalLM"),
    "language-modeling/run_mlm.py": Upstream(_mlm_assets, "AutoModelForMaskedLM"),
    "text-classification/run_glue.py": Upstream(_with(_glue_assets, "--max_seq_length", "16"),
                                                "AutoModelForSequenceClassification"),
    "multiple-choice/run_swag.py": Upstream(_with(_swag_assets), "AutoModelForMultipleChoice"),
    # QuestionAnsweringTrainer (trainer_qa.py): a Trainer subclass overriding evaluate and predict
    # with the 4.x prediction loop; the migrate tool reports both of its 4.x internals.
    # Its losses agree to the last digit, but qa_outputs.bias's gradient is zero up to rounding (the
    # bias is added to every position's logit, which the softmax cancels), and Adam's step on it is
    # the sign of that rounding, which the sharded and the DDP reductions round differently: up to
    # the learning rate's order (5e-3) times the noise's share, 2e-4 here.
    "question-answering/run_qa.py": Upstream(_qa_assets, "AutoModelForQuestionAnswering", "eval_f1", hand=(
        ("trainer_qa.py", _LEGACY_LOOP, "self.evaluation_loop"),
        ("trainer_qa.py", "if self.args.tpu_metrics_debug or self.args.debug:", "if self.args.debug:"),
    ), weights=1e-3),
    "language-modeling/run_plm.py": Upstream(_plm_assets, "AutoModelForCausalLM"),
    "token-classification/run_ner.py": Upstream(_with(_ner_assets), "AutoModelForTokenClassification",
                                                "eval_accuracy"),
    # XLNet's beam search over start and end logits, through the same QuestionAnsweringTrainer; its
    # start_logits.dense.bias is run_qa's qa_outputs.bias again (Adam steps on rounding noise).
    "question-answering/run_qa_beam_search.py": Upstream(_xlnet_qa_assets, "XLNetForQuestionAnswering", "eval_f1",
                                                         hand=(
        ("trainer_qa.py", _LEGACY_LOOP, "self.evaluation_loop"),
        ("trainer_qa.py", "if self.args.tpu_metrics_debug or self.args.debug:", "if self.args.debug:"),
    ), weights=1e-3),
    "translation/run_translation.py": Upstream(_with(_translation_assets, "--source_lang", "en", "--target_lang", "de"),
                                               "AutoModelForSeq2SeqLM", "eval_bleu"),
    # QuestionAnsweringSeq2SeqTrainer (trainer_seq2seq_qa.py): a Seq2SeqTrainer subclass of the same
    # kind, generating the answers (FSDP2 generates through its hooks, see the Trainer drop-in).
    "question-answering/run_seq2seq_qa.py": Upstream(_seq2seq_qa_assets, "AutoModelForSeq2SeqLM", "eval_f1", hand=(
        ("trainer_seq2seq_qa.py", _LEGACY_LOOP, "self.evaluation_loop"),
        ("trainer_seq2seq_qa.py", "if self.args.tpu_metrics_debug or self.args.debug:", "if self.args.debug:"),
    )),
}
RUN = ["--do_train", "--do_eval", "--max_steps", "4", "--gradient_accumulation_steps", "2", "--logging_steps", "1",
       "--learning_rate", "5e-3", "--report_to", "none", "--disable_tqdm", "true", "--seed", "0", "--eval_steps", "2",
       "--save_strategy", "no", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "4",
       "--overwrite_output_dir"]
LEGACY = ["--evaluation_strategy", "steps", "--no_cuda", "--sharded_ddp", "zero_dp_3 auto_wrap"]
STOCK = ["--eval_strategy", "steps", "--use_cpu"]


@pytest.fixture(scope="module")
def examples() -> Path:
    where = os.environ.get("SHARDCOMPAT_UPSTREAM_EXAMPLES")
    if not where or not (Path(where) / "language-modeling" / "run_clm.py").is_file():
        pytest.fail("set SHARDCOMPAT_UPSTREAM_EXAMPLES to the examples/pytorch folder of a Transformers 4.x "
                    f"checkout (got {where!r}); e.g. nox -s upstream_examples -- PATH", pytrace=False)
    return Path(where)


def _run(command: list[str], cwd: Path) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_EVALUATE_OFFLINE": "1", "PYTHONWARNINGS": "default::FutureWarning"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return output


def _history(out: Path, metric: str) -> tuple[list[float], list[float]]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [e["loss"] for e in history if "loss" in e], [e[metric] for e in history if metric in e]


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_the_upstream_script_runs_unchanged_and_migrated_as_stock(examples: Path, script: str,
                                                                    tmp_path: Path) -> None:
    case = SCRIPTS[script]
    shutil.copytree(METRICS, tmp_path, dirs_exist_ok=True)  # evaluate.load("accuracy") finds ./accuracy
    data = case.assets(tmp_path / "assets")
    folder, name = script.split("/")
    unchanged = _run([sys.executable, "-m", "shardcompat", "run", "--nproc", "2", str(examples / script), *data,
                      *RUN, *LEGACY, "--output_dir", str(tmp_path / "unchanged")], tmp_path)
    assert "shardcompat: 'zero_dp_3 auto_wrap'" in unchanged and "FutureWarning" in unchanged

    migrated = tmp_path / "migrated"
    shutil.copytree(examples / folder, migrated)
    report = _run([sys.executable, "-m", "codemods.cli", str(migrated), "--transformers-legacy", "--write"], tmp_path)
    for line in report.splitlines():
        assert not (line.startswith(str(migrated / name)) and "warning" in line), line  # nothing for a person
    assert "evaluation_strategy" not in (migrated / name).read_text()
    for file, old, new in case.hand:
        source = (migrated / file).read_text()
        assert old in source, (file, old)
        (migrated / file).write_text(source.replace(old, new))
    _run([*TORCHRUN, str(migrated / name), *data, *RUN, *STOCK, "--output_dir", str(tmp_path / "stock")], tmp_path)

    (a_losses, a_evals), (b_losses, b_evals) = (_history(tmp_path / side, case.metric) for side in ("stock", "unchanged"))
    assert len(a_losses) == len(b_losses) == 4 and len(a_evals) == len(b_evals) == 2, (a_losses, b_losses)
    assert max(abs(a - b) for a, b in zip(a_losses, b_losses)) <= 1e-4, (a_losses, b_losses)
    assert max(abs(a - b) for a, b in zip(a_evals, b_evals)) <= 1e-4, (a_evals, b_evals)
    metrics = [json.loads((tmp_path / side / "eval_results.json").read_text()) for side in ("stock", "unchanged")]
    assert metrics[0].keys() == metrics[1].keys(), metrics
    for key in ("eval_accuracy", "eval_exact_match", "eval_f1", "eval_bleu"):  # what argmax, generate and post-processing gave
        assert metrics[0].get(key) == metrics[1].get(key), key
    assert {"eval_accuracy", "eval_f1", "eval_bleu", "perplexity"} & metrics[0].keys(), metrics  # a score beside the loss
    loader = getattr(transformers, case.model_class)
    a, b = (loader.from_pretrained(tmp_path / side).state_dict() for side in ("stock", "unchanged"))
    assert a.keys() == b.keys()
    assert max(float((a[k].float() - b[k].float()).abs().max()) for k in a) <= case.weights
