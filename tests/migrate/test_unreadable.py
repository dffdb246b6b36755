"""A ``--check`` gate cannot pass on a tree it did not see: every file or folder the user running
``shardcompat-migrate`` may not read is reported by name with the reason and the run exits 2,
in a plain folder (os.walk) and in a git work tree (git's listing); a path given on the command
line that exists but cannot be looked up says "permission denied", not "no such file".

Run as an unprivileged user in a subprocess (see :mod:`tests.migrate.unprivileged`): the suite
runs as root, who reads files whatever their mode.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .unprivileged import give, migrate, world_folder

LEGACY = "python train.py --sharded_ddp --fp16\n"
DENIED_FILE = "error: permission denied: this user may not read the file; it was not scanned"
DENIED_FOLDER = "error: permission denied: this user may not read the folder; the files in it were not scanned"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def base() -> Iterator[Path]:
    with world_folder() as folder:
        yield folder


def _tree(base: Path) -> Path:
    root = base / "repo"
    (root / "closed").mkdir(parents=True)
    (root / "requirements.txt").write_text("transformers>=4.20\n")
    (root / "ok.sh").write_text(LEGACY)
    (root / "locked.sh").write_text(LEGACY)
    (root / "closed" / "hidden.sh").write_text(LEGACY)
    return root


def _lock(root: Path) -> None:
    (root / "locked.sh").chmod(0o000)
    (root / "closed").chmod(0o000)


def test_unreadable_file_and_folder_fail_the_check_by_name(base: Path) -> None:
    root = _tree(base)
    _lock(root)
    done = migrate(["--check", "repo"], base)
    assert done.returncode == 2, done.stderr
    assert f"repo/locked.sh: {DENIED_FILE}" in done.stderr, done.stderr
    assert f"repo/closed: {DENIED_FOLDER}" in done.stderr, done.stderr
    assert "--exclude it" in done.stderr, "the error says what to do"
    assert "repo/ok.sh:1: would flag-bare" in done.stderr, "the readable files are still checked"
    assert done.stderr.strip().endswith("2 errors"), done.stderr

    report = json.loads(migrate(["--check", "--json", "repo"], base).stdout)
    errors = {f["path"]: f["error"] for f in report["files"] if f["error"]}
    assert set(errors) == {"repo/locked.sh", "repo/closed"}, errors
    assert report["exit_code"] == 2

    # what the user excludes is not reported; the gate then fails for the legacy usage alone
    done = migrate(["--check", "repo", "--exclude", "closed", "--exclude", "locked.sh"], base)
    assert done.returncode == 1 and ": error:" not in done.stderr, done.stderr


def test_paths_given_that_cannot_be_read_say_permission_denied(base: Path) -> None:
    root = _tree(base)
    _lock(root)
    done = migrate(["--check", "repo/closed"], base)
    assert done.returncode == 2 and f"repo/closed: {DENIED_FOLDER}" in done.stderr, done.stderr
    done = migrate(["--check", "repo/closed/hidden.sh"], base)
    assert done.returncode == 2, done.stderr
    assert "no such file" not in done.stderr, done.stderr
    assert ("repo/closed/hidden.sh: error: permission denied: this user may not look it up "
            "(a folder above it is not searchable)") in done.stderr, done.stderr
    done = migrate(["--check", "repo/locked.sh"], base)
    assert done.returncode == 2 and f"repo/locked.sh: {DENIED_FILE}" in done.stderr, done.stderr
    done = migrate(["--check", "repo/missing.sh"], base)  # a path that is not there is still a usage error
    assert done.returncode == 2 and "no such file or folder: repo/missing.sh" in done.stderr, done.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed: the git-listed walk cannot run")
def test_unreadable_folders_in_a_git_work_tree_fail_the_check(base: Path) -> None:
    root = _tree(base)
    (root / "tracked").mkdir()
    (root / "tracked" / "run.sh").write_text(LEGACY)
    (root / "ignored").mkdir()
    (root / ".gitignore").write_text("ignored/\n")
    git = ["git", "-C", str(root), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "requirements.txt", "ok.sh", "tracked/run.sh", ".gitignore"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)
    give(root)  # git refuses a work tree that another user owns
    _lock(root)
    (root / "tracked").chmod(0o000)  # a tracked file in it: git lists it, it cannot be looked up
    (root / "ignored").chmod(0o000)  # git-ignored: not walked, so not reported
    done = migrate(["--check", "repo"], base)
    assert done.returncode == 2, done.stderr
    assert "fatal" not in done.stderr and "dubious" not in done.stderr, done.stderr
    assert f"repo/closed: {DENIED_FOLDER}" in done.stderr, done.stderr
    assert f"repo/tracked: {DENIED_FOLDER}" in done.stderr, done.stderr
    assert f"repo/locked.sh: {DENIED_FILE}" in done.stderr, done.stderr
    assert "ignored" not in done.stderr, done.stderr
    assert "tracked/run.sh" not in done.stderr, "the folder is reported once, not each file in it"
    assert done.stderr.strip().endswith("3 errors"), done.stderr
