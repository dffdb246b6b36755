"""The whole-tree CLI: check, diff, write, a second write, errors, skipped folders, scope, JSON."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from codemods.cli import main

REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "requirements.txt").write_text("transformers>=4.20\ntorch\n")
    (root / "train.py").write_text(
        "from transformers import TrainingArguments\n"
        "args = TrainingArguments(output_dir='out', sharded_ddp=True)\n"
    )
    run = root / "scripts" / "run.sh"
    run.write_text("#!/bin/bash\npython train.py --sharded_ddp --fp16\n")
    run.chmod(0o755)
    (root / "config.json").write_bytes(b'{\r\n  "sharded_ddp": false\r\n}')
    (root / "broken.py").write_text("def f(:\n    sharded_ddp = True\n")
    (root / "clean.py").write_text("print('nothing to see')\n")
    venv = root / ".venv" / "lib"
    venv.mkdir(parents=True)
    (venv / "legacy.py").write_text("TrainingArguments(sharded_ddp=True)\n")
    (root / "node_modules").mkdir()
    (root / "node_modules" / "x.sh").write_text("python t.py --sharded_ddp\n")
    (root / "skipme").mkdir()
    (root / "skipme" / "old.sh").write_text("python t.py --sharded_ddp\n")
    return root


def test_check_diff_write_and_second_write(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = _tree(repo)
    assert main([str(repo), "--check", "--exclude", "skipme"]) == 2  # broken.py: exit 2 wins
    assert _tree(repo) == original
    err = capsys.readouterr().err
    assert "broken.py: error: does not parse as Python" in err
    assert "3 would change" in err

    assert main([str(repo), "--exclude", "skipme", "--exclude", "broken.py", "--check"]) == 1
    assert main([str(repo), "--exclude", "skipme", "--exclude", "broken.py"]) == 0  # diff mode
    out = capsys.readouterr().out
    assert "+python train.py --sharded_ddp simple --fp16" in out
    assert "+args = TrainingArguments(output_dir='out', sharded_ddp=\"simple\")" in out
    assert _tree(repo) == original, "diff mode writes nothing"

    assert main([str(repo), "--write", "--exclude", "skipme"]) == 2
    after = _tree(repo)
    assert after["broken.py"] == original["broken.py"]
    assert after[".venv/lib/legacy.py"] == original[".venv/lib/legacy.py"]
    assert after["node_modules/x.sh"] == original["node_modules/x.sh"]
    assert after["skipme/old.sh"] == original["skipme/old.sh"]
    assert after["config.json"] == b'{\r\n  "sharded_ddp": ""\r\n}'
    assert after["scripts/run.sh"] == b"#!/bin/bash\npython train.py --sharded_ddp simple --fp16\n"
    assert stat.S_IMODE(os.stat(repo / "scripts" / "run.sh").st_mode) == 0o755
    assert not list(repo.rglob(".shardcompat-*")), "no temporary files left"

    assert main([str(repo), "--write", "--exclude", "skipme", "--exclude", "broken.py"]) == 0
    assert _tree(repo) == after, "a second write changes nothing"
    assert main([str(repo), "--check", "--exclude", "skipme", "--exclude", "broken.py"]) == 0


def test_json_report(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(repo), "--check", "--json", "--exclude", "skipme"]) == 2
    report = json.loads(capsys.readouterr().out)
    files = {f["path"].split("repo/")[-1]: f for f in report["files"]}
    assert files["scripts/run.sh"]["kind"] == "shell"
    assert files["scripts/run.sh"]["edits"][0] == {
        "line": 2, "rule": "flag-bare", "before": "--sharded_ddp", "after": "--sharded_ddp simple", "note": ""}
    assert files["broken.py"]["error"].startswith("does not parse as Python")
    assert report["exit_code"] == 2 and report["changed"] == 3


def test_git_aware_walk(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("skipme/\nbroken.py\n")
    assert main([str(repo), "--check"]) == 1
    err = capsys.readouterr().err
    assert "skipme" not in err and "broken.py" not in err


def test_single_file_and_scope(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(repo / "scripts" / "run.sh"), "--check"]) == 1  # evidence from the whole root
    other = tmp_path / "other"
    other.mkdir()
    (other / "run.sh").write_text("python mine.py --sharded_ddp\n")
    capsys.readouterr()
    assert main([str(other), "--check"]) == 1, "no Transformers evidence: held for review, still legacy usage"
    err = capsys.readouterr().err
    assert "review" in err and "other/run.sh: warning: scope: not edited" in err  # the file, no ':0:'
    assert (other / "run.sh").read_text() == "python mine.py --sharded_ddp\n"
    assert main([str(other), "--check", "--scope", "all"]) == 1


def test_rewrite_that_would_not_parse_is_not_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "r"
    root.mkdir()
    (root / "requirements.txt").write_text("transformers\n")
    bad = root / "cfg.yaml"
    bad.write_text("sharded_ddp: true\nkey: [unclosed\n")
    assert main([str(root), "--write"]) == 2
    assert bad.read_text() == "sharded_ddp: true\nkey: [unclosed\n"


def test_subprocess_entry_point(repo: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "codemods.cli", str(repo), "--check", "--no-progress", "--exclude", "broken.py",
         "--exclude", "skipme", "--jobs", "2"],
        capture_output=True, text=True, cwd=REPO, check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "would change" in done.stderr and done.stdout == ""


def test_pool_gives_the_same_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codemods import cli

    root = tmp_path / "many"
    root.mkdir()
    (root / "requirements.txt").write_text("transformers\n")
    for i in range(12):
        (root / f"run{i}.sh").write_text(f"python train.py --seed {i} --sharded_ddp\n")
        (root / f"t{i}.py").write_text("TrainingArguments(sharded_ddp=True)\n")
    assert cli.pool_size([], 2) == 1
    monkeypatch.setattr(cli, "_PER_WORKER", 4)  # 12 Python files: a pool of two, as a large tree gets
    assert main([str(root), "--write", "--jobs", "2"]) == 0
    assert all((root / f"run{i}.sh").read_text().endswith("--sharded_ddp simple\n") for i in range(12))
    assert all('"simple"' in (root / f"t{i}.py").read_text() for i in range(12))


def test_startup_stays_light() -> None:
    code = ("import sys, codemods.cli; "
            "print(any(m == 'torch' or m.startswith('libcst') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(("command", "before", "after"), [
    ("sharded_ddp.commands.MigrateShardedDDP",
     "args = TrainingArguments(sharded_ddp=True)\ncmd = 'python t.py --sharded_ddp'\n",
     "args = TrainingArguments(sharded_ddp=\"simple\")\ncmd = 'python t.py --sharded_ddp simple'\n"),
    ("fairscale.commands.FairscaleImportsCommand",
     "from fairscale.optim.oss import OSS\nopt = OSS\n",
     "from shardcompat.fairscale.optim.oss import OSS\nopt = OSS\n"),
    ("transformers_legacy.commands.TransformersLegacyCommand",
     "args = TrainingArguments('o', evaluation_strategy='steps')\ntrainer = Trainer(tokenizer=tok)\n",
     "args = TrainingArguments('o', eval_strategy='steps')\ntrainer = Trainer(processing_class=tok)\n"),
])
def test_libcst_runner(tmp_path: Path, command: str, before: str, after: str) -> None:
    """The commands docs/migration.md gives for libcst's own runner (``.libcst.codemod.yaml``)."""
    target = tmp_path / "t.py"
    target.write_text(before)
    done = subprocess.run(
        [sys.executable, "-m", "libcst.tool", "codemod", command, "--no-format",
         "--hide-progress", "-j", "1", str(target)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text() == after


def test_check_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0 clean, 1 legacy usage found (to edit, held for review, or warned about), 2 unreadable."""
    held = tmp_path / "held"  # no evidence that this tree uses Transformers: nothing is edited
    (held / "docs").mkdir(parents=True)
    (held / "launch.sh").write_text("python train.py --sharded_ddp --fp16\n")
    (held / "docs" / "usage.md").write_text("Add `--sharded_ddp` to the command line.\n")
    before = _tree(held)
    assert main([str(held), "--check"]) == 1
    assert main([str(held), "--write"]) == 0 and _tree(held) == before, "held: reported, not written"
    assert main([str(held), "--check"]) == 1, "still legacy usage after a --write that could not edit it"

    warned = tmp_path / "warned"
    warned.mkdir()
    (warned / "requirements.txt").write_text("transformers\n")
    (warned / "run.sh").write_text("python train.py --sharded_ddp $MODE\n")  # left as is, with a warning
    assert main([str(warned), "--write"]) == 0 and main([str(warned), "--check"]) == 1

    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "requirements.txt").write_text("transformers\n")
    (clean / "run.sh").write_text("python train.py --sharded_ddp --fp16\n")
    assert main([str(clean), "--check"]) == 1
    assert main([str(clean), "--write"]) == 0
    assert main([str(clean), "--check"]) == 0, "migrated: clean"
    (clean / "broken.py").write_text("def f(:\n    sharded_ddp = True\n")
    assert main([str(clean), "--check"]) == 2
    capsys.readouterr()


def test_transformers_version_needs_to_fsdp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), "--transformers", "4.40"])
    assert exit_info.value.code == 2 and "--transformers goes with --to fsdp" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--to", "fsdp", "--transformers", "four"])
    assert "not a version number" in capsys.readouterr().err
