"""``shardcompat-migrate`` under dropped privileges over a large real tree (issue 33): the folder
layout and Python files of the installed torch package, with files and folders at random
places made unreadable, legacy usages injected at others, hard links and files of another
owner.  Run as uid 65534 (root reads everything):

* ``--check`` reports exactly the unreadable files and folders (a folder once, not what is in
  it), by name, and exits 2, as a plain folder and as a git work tree;
* ``--write`` migrates every readable legacy file, leaves the unreadable ones byte-identical,
  keeps the owner, group and mode of a root-owned group-writable file, writes hard-linked
  files in place (both names see the new text), and leaves no temporary file.

The small, fixed cases of the same contract run in the default suite
(``tests/migrate/test_unreadable.py``, ``tests/migrate/test_write_metadata.py``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.migrate.unprivileged import NOBODY, as_user, give, migrate, world_folder

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(900)]

LEGACY = "\n\nargs = TrainingArguments(output_dir='out', sharded_ddp=True)\n"
MIGRATED = "\n\nargs = TrainingArguments(output_dir='out', sharded_ddp=\"simple\")\n"
LOCKED_FILES, LOCKED_FOLDERS, INJECTED = 25, 10, 40


def _torch() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed: its sources are the corpus")
    return Path(next(iter(spec.submodule_search_locations)))


class Corpus:
    def __init__(self, base: Path, rng: random.Random) -> None:
        self.root = base / "repo"
        self.seed_note = ""
        source = _torch()
        for file in sorted(source.rglob("*.py")):
            if "__pycache__" in file.parts:
                continue
            target = self.root / file.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)
        (self.root / "requirements.txt").write_text("transformers>=4.20\n")
        files = sorted(p for p in self.root.rglob("*.py"))
        folders = sorted(p for p in self.root.rglob("*") if p.is_dir())
        assert len(files) > 1000, f"the corpus is too small to mean much ({len(files)} files)"
        small = [p for p in files if p.stat().st_size < 16_000]
        self.injected = set(rng.sample(small, INJECTED))
        for path in self.injected:
            with path.open("a") as handle:
                handle.write(LEGACY)
        self.locked_folders = set(rng.sample(folders, LOCKED_FOLDERS))
        self.locked_files = set(rng.sample(files, LOCKED_FILES))
        self.digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}

    def lock(self) -> None:
        for path in self.locked_files | self.locked_folders:
            path.chmod(0o000)

    def unlock(self) -> None:
        for path in sorted(self.locked_files | self.locked_folders, key=lambda p: len(p.parts)):
            path.chmod(0o755 if path.is_dir() else 0o644)

    def hidden(self, path: Path) -> bool:
        """Under a locked folder (so neither scanned nor reported itself)."""
        return any(folder in path.parents for folder in self.locked_folders)

    def expected_errors(self) -> set[str]:
        out = {p for p in self.locked_folders | self.locked_files if not self.hidden(p)}
        return {str(p.relative_to(self.root.parent)) for p in out}

    def readable_legacy(self) -> set[Path]:
        return {p for p in self.injected if p not in self.locked_files and not self.hidden(p)}


@pytest.fixture
def corpus() -> Iterator[Corpus]:
    seed = random.randrange(1 << 30)
    with world_folder() as base:
        made = Corpus(base, random.Random(seed))
        made.seed_note = f"(seed {seed})"
        yield made


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    try:
        return dict(json.loads(done.stdout))
    except json.JSONDecodeError:
        pytest.fail(f"no JSON report (exit {done.returncode}): {done.stderr[-2000:]}")


def _check(corpus: Corpus, label: str) -> None:
    base = corpus.root.parent
    done = migrate(["--check", "--json", "--no-progress", "repo"], base)
    report = _report(done)
    files = report["files"]
    assert isinstance(files, list)
    errors = {f["path"]: f["error"] for f in files if f["error"]}
    assert set(errors) == corpus.expected_errors(), (
        f"{label} {corpus.seed_note}: missing {sorted(corpus.expected_errors() - set(errors))[:5]}, "
        f"extra {sorted(set(errors) - corpus.expected_errors())[:5]}")
    assert all(e.startswith("permission denied: this user may not read the") for e in errors.values()), errors
    assert done.returncode == 2 and report["exit_code"] == 2, label
    would = {f["path"] for f in files if f["edits"]}
    expected = {str(p.relative_to(base)) for p in corpus.readable_legacy()}
    assert would == expected, f"{label} {corpus.seed_note}: legacy files not found {sorted(expected - would)[:5]}"


def test_check_reports_every_unreadable_place_plain_and_git(corpus: Corpus) -> None:
    give(corpus.root)
    corpus.lock()
    _check(corpus, "plain folder")
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the git work tree half cannot run")
    corpus.unlock()
    git = ["git", "-C", str(corpus.root), "-c", "user.email=t@example.com", "-c", "user.name=t",
           "-c", "safe.directory=*"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)  # every file tracked: git lists those in locked folders
    subprocess.run([*git, "commit", "-q", "-m", "corpus"], check=True)
    give(corpus.root)
    corpus.lock()
    _check(corpus, "git work tree")


@pytest.mark.skipif(not as_user(), reason="needs root to make a root-owned file in the unprivileged user's tree")
def test_write_keeps_what_it_cannot_read_and_what_files_are(corpus: Corpus) -> None:
    base = corpus.root.parent
    readable = sorted(corpus.readable_legacy())
    give(corpus.root)
    shared, linked = readable[0], readable[1]
    os.chown(shared, 0, NOBODY)  # root's file, writable by its group: must stay root's
    shared.chmod(0o664)
    shared.parent.chmod(0o777)
    other_name = base / "other-name.py"  # a second name outside the tree
    os.link(linked, other_name)
    corpus.lock()
    done = migrate(["--write", "--json", "--no-progress", "repo"], base)
    report = _report(done)
    assert done.returncode == 2, corpus.seed_note  # the unreadable ones
    corpus.unlock()
    for path in readable:
        assert path.read_text().endswith(MIGRATED), f"{path} was not migrated {corpus.seed_note}"
    for path, digest in corpus.digests.items():
        if path not in corpus.readable_legacy():
            assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{path} changed {corpus.seed_note}"
    info = shared.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, NOBODY, 0o664)
    assert other_name.read_text() == linked.read_text() and other_name.stat().st_ino == linked.stat().st_ino
    assert not list(base.rglob(".shardcompat-*")), "a temporary file was left"
    files = report["files"]
    assert isinstance(files, list)
    assert {f["path"] for f in files if f["written"]} == {str(p.relative_to(base)) for p in readable}
