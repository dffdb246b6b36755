"""Migrate a realistic legacy training repository, then show the migrated command lines and
values mean what they meant before, with no FutureWarning left."""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
import warnings
from pathlib import Path

from codemods.cli import main
from shardcompat import add_sharded_ddp_argument, parse_options
from shardcompat.options import ShardingOptions, Stage

TRAIN = '''\
"""Fine-tune a model; pass --sharded_ddp to shard (fairscale)."""
from dataclasses import dataclass, field

from transformers import HfArgumentParser, TrainingArguments


@dataclass
class ScriptArguments:
    model_name: str = field(default="gpt2")
    sharded_ddp: bool = field(default=False, metadata={"help": "Use --sharded_ddp (fairscale ShardedDDP)."})


def main():
    parser = HfArgumentParser((ScriptArguments, TrainingArguments))
    script, training = parser.parse_args_into_dataclasses()
    smoke = TrainingArguments(output_dir="smoke", sharded_ddp=True)
    return script, training, smoke
'''

LAUNCH = '''\
#!/usr/bin/env bash
set -e
echo "Launching with --sharded_ddp"
python train.py --output_dir out --sharded_ddp --fp16
python train.py --output_dir out --sharded_ddp true
python train.py --output_dir out --sharded_ddp=True --seed 3
python train.py --output_dir out --sharded_ddp false --fp16
python train.py --output_dir out --sharded_ddp zero_dp_2 offload
torchrun --nproc_per_node 2 train.py \\
    --output_dir out \\
    --sharded_ddp \\
    --do_train
'''

README = '''\
# Legacy training

Shard with `--sharded_ddp` (this sentence is prose).

```bash
python train.py --output_dir out --sharded_ddp
python train.py --output_dir out --sharded_ddp "zero_dp_3 offload"
```
'''

NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [
            {"name": "stdout", "output_type": "stream", "text": ["sharded_ddp: True\n"]}],
         "source": ["from transformers import TrainingArguments\n",
                    "args = TrainingArguments(output_dir=\"nb\", sharded_ddp=True)\n",
                    "!python train.py --output_dir out --sharded_ddp --fp16"]},
    ],
    "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
}


def build(root: Path) -> None:
    (root / "scripts").mkdir(parents=True)
    (root / "requirements.txt").write_text("transformers==4.5.1\nfairscale\n")
    (root / "train.py").write_text(TRAIN)
    (root / "scripts" / "launch.sh").write_text(LAUNCH)
    (root / "README.md").write_text(README)
    (root / "args.json").write_text(json.dumps({"output_dir": "out", "sharded_ddp": True}, indent=2) + "\n")
    (root / "explore.ipynb").write_text(json.dumps(NOTEBOOK, indent=1) + "\n")


def command_lines(root: Path) -> list[str]:
    """Every ``train.py`` command line in the launcher, the README code block and the notebook."""
    texts = [(root / "scripts" / "launch.sh").read_text()]
    readme = (root / "README.md").read_text()
    texts += re.findall(r"```bash\n(.*?)```", readme, re.S)
    notebook = json.loads((root / "explore.ipynb").read_text())
    texts += [line.lstrip("!") for c in notebook["cells"] for line in "".join(c["source"]).splitlines()
              if line.startswith("!")]
    lines = "\n".join(texts).replace("\\\n", " ").splitlines()
    return [line for line in lines if "train.py" in line and not line.startswith("echo")]


def meaning(line: str) -> ShardingOptions:
    parser = argparse.ArgumentParser()
    add_sharded_ddp_argument(parser)
    words = shlex.split(line)
    args, _ = parser.parse_known_args(words[words.index("train.py") + 1:])
    return args.sharded_ddp


def python_values(source: str) -> list[object]:
    """Literal ``sharded_ddp=`` keywords and the dataclass default."""
    tree = ast.parse(source)
    found: list[object] = [ast.literal_eval(k.value) for n in ast.walk(tree) if isinstance(n, ast.Call)
                           for k in n.keywords if k.arg == "sharded_ddp"]
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "sharded_ddp":
            assert isinstance(node.value, ast.Call)
            found += [ast.literal_eval(k.value) for k in node.value.keywords if k.arg == "default"]
    return found


def notebook_code(root: Path) -> str:
    cells = json.loads((root / "explore.ipynb").read_text())["cells"]
    return "".join(line for line in cells[0]["source"] if not line.startswith("!"))


def test_legacy_repo_end_to_end(tmp_path: Path) -> None:
    root = tmp_path / "legacy"
    build(root)
    before_lines = command_lines(root)
    before_values = python_values((root / "train.py").read_text()) + python_values(notebook_code(root))
    with warnings.catch_warnings(record=True) as legacy:
        warnings.simplefilter("always")
        before = [meaning(line) for line in before_lines]
        before_py = [parse_options(v) for v in before_values]
    assert any(issubclass(w.category, FutureWarning) for w in legacy), "the old repo uses legacy forms"
    assert Stage.SIMPLE in {o.stage for o in before} and ShardingOptions() in before

    assert main([str(root), "--write", "--no-progress"]) == 0

    after_lines = command_lines(root)
    assert len(after_lines) == len(before_lines)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        after = [meaning(line) for line in after_lines]
        after_py = [parse_options(v) for v in python_values((root / "train.py").read_text())
                    + python_values(notebook_code(root))]
        config = parse_options(json.loads((root / "args.json").read_text())["sharded_ddp"])
    assert after == before
    assert after_py == before_py
    assert config == ShardingOptions(stage=Stage.SIMPLE)
    assert '"sharded_ddp": "simple"' in (root / "args.json").read_text()
    train = (root / "train.py").read_text()
    assert 'sharded_ddp: str = field(default="", metadata={"help": "Use --sharded_ddp' in train
    assert '"""Fine-tune a model; pass --sharded_ddp to shard (fairscale)."""' in train  # docstring kept
    assert 'echo "Launching with --sharded_ddp"' in (root / "scripts" / "launch.sh").read_text()
    assert "Shard with `--sharded_ddp` (this sentence is prose)." in (root / "README.md").read_text()
    notebook = json.loads((root / "explore.ipynb").read_text())
    assert notebook["cells"][0]["outputs"] == NOTEBOOK["cells"][0]["outputs"]  # type: ignore[index]

    snapshot = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert main([str(root), "--check", "--no-progress"]) == 0
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot
