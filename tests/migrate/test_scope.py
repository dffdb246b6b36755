"""Evidence decides the scope: other frameworks' own sharded_ddp is reported, not edited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codemods.cli import main


def _hf_repo(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "requirements.txt").write_text("transformers\n")
    return root


def _report(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    data = json.loads(capsys.readouterr().out)
    return {Path(f["path"]).name: f for f in data["files"]}


def test_espnet_config_is_foreign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _hf_repo(tmp_path / "r")
    (root / "conf").mkdir()
    (root / "conf" / "train_asr.yaml").write_text("batch_type: folded\naccum_grad: 1\nsharded_ddp: false\n")
    assert main([str(root), "--check", "--json"]) == 0
    files = _report(capsys)
    assert files["train_asr.yaml"]["scope"] == "foreign" and files["train_asr.yaml"]["review"]
    assert main([str(root), "--check", "--scope", "all", "--json"]) == 1


def test_espnet_repository_is_foreign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _hf_repo(tmp_path / "r")
    (root / "setup.py").write_text("install_requires=['espnet']\n")
    (root / "run.sh").write_text("python -m espnet2.bin.asr_train --sharded_ddp true\n")
    assert main([str(root), "--check", "--json"]) == 0
    assert _report(capsys)["run.sh"]["scope"] == "foreign"


def test_local_str2bool_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _hf_repo(tmp_path / "r")
    (root / "mytrain.py").write_text(
        "from transformers import AutoModel\n"
        "parser.add_argument('--sharded_ddp', type=str2bool, default=False)\n")
    (root / "run.sh").write_text("python mytrain.py --sharded_ddp true\npython hf.py --sharded_ddp true\n")
    assert main([str(root), "--write", "--json"]) == 0
    files = _report(capsys)
    assert files["mytrain.py"]["scope"] == "foreign"
    assert (root / "run.sh").read_text() == "python mytrain.py --sharded_ddp true\npython hf.py --sharded_ddp simple\n"
    assert files["run.sh"]["review"], "the command running mytrain.py is reported for review"
    assert main([str(root), "--check", "--json"]) == 0, "only the local flag's own usage is left: --check passes"


def test_serialized_outputs_are_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _hf_repo(tmp_path / "r")
    (root / "all_results.json").write_text('{"sharded_ddp": false}\n')
    (root / "checkpoint-500").mkdir()
    (root / "checkpoint-500" / "config.json").write_text('{"sharded_ddp": true}\n')
    assert main([str(root), "--check", "--json"]) == 0
    assert _report(capsys) == {}


def test_skip_marker_in_any_comment_syntax(tmp_path: Path) -> None:
    root = _hf_repo(tmp_path / "r")
    (root / "a.sh").write_text("# shardcompat: skip\npython t.py --sharded_ddp\n")
    (root / "b.md").write_text("<!-- shardcompat: skip -->\n`python t.py --sharded_ddp`\n")
    (root / "c.yaml").write_text("sharded_ddp: true  # shardcompat: skip\nother:\n  sharded_ddp: true\n")
    assert main([str(root), "--write"]) == 0
    assert (root / "a.sh").read_text() == "# shardcompat: skip\npython t.py --sharded_ddp\n"
    assert (root / "b.md").read_text() == "<!-- shardcompat: skip -->\n`python t.py --sharded_ddp`\n"
    assert (root / "c.yaml").read_text() == "sharded_ddp: true  # shardcompat: skip\nother:\n  sharded_ddp: simple\n"


def test_fsdp_target_and_fairscale_imports(tmp_path: Path) -> None:
    root = _hf_repo(tmp_path / "r")
    (root / "t.py").write_text("from fairscale.optim import OSS\nargs = TrainingArguments(sharded_ddp='zero_dp_3')\n")
    original = (root / "t.py").read_text()
    assert main([str(root), "--write", "--to", "fsdp", "--fairscale-imports"]) == 0
    assert (root / "t.py").read_text() == (
        "from shardcompat.fairscale.optim import OSS\n"
        'args = TrainingArguments(fsdp=True, fsdp_config={"version": 2, "reshard_after_forward": True, '
        '"auto_wrap_policy": "NO_WRAP"})\n')
    (root / "t.py").write_text(original)
    assert main([str(root), "--write", "--to", "fsdp", "--transformers", "4.40", "--fairscale-imports"]) == 0
    assert (root / "t.py").read_text() == ("from shardcompat.fairscale.optim import OSS\n"
                                          "args = TrainingArguments(fsdp='full_shard')\n")
