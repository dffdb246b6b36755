"""``--write`` keeps what a file is besides its text: owner, group and mode stay (also run as
root on another user's file), a hard-linked file is written in place so that every name sees
the new text, an ordinary file is still replaced atomically (written beside it, renamed over
it), nothing is removed that the run did not write, and a failed write leaves the old text.
What was not written is never listed in the words of an applied edit."""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
from pathlib import Path

import pytest

from codemods.cli import main
from codemods.run.write import atomic_write

from .unprivileged import NOBODY, as_user, give, migrate, world_folder

LEGACY = "python train.py --sharded_ddp --fp16\n"
MIGRATED = "python train.py --sharded_ddp simple --fp16\n"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "requirements.txt").write_text("transformers>=4.20\n")
    (root / "ok.sh").write_text(LEGACY)
    return root


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file to another user")
def test_root_keeps_another_users_owner_group_and_mode(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    theirs = tree / "theirs.sh"
    theirs.write_text(LEGACY)
    os.chown(theirs, NOBODY, NOBODY)
    theirs.chmod(0o640)
    before = theirs.stat()
    assert main([str(tree), "--write", "--no-progress"]) == 0, _err(capsys)
    after = theirs.stat()
    assert theirs.read_text() == MIGRATED
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (NOBODY, NOBODY, 0o640)
    assert after.st_ino != before.st_ino, "an ordinary file is written beside and renamed (atomic)"
    assert sorted(p.name for p in tree.iterdir()) == ["ok.sh", "requirements.txt", "theirs.sh"]


def test_mode_and_set_id_bits_are_kept(tree: Path) -> None:
    script = tree / "ok.sh"
    script.chmod(0o2750)
    assert main([str(tree), "--write", "--no-progress"]) == 0
    assert script.read_text() == MIGRATED and stat.S_IMODE(script.stat().st_mode) == 0o2750


def test_a_hard_link_from_outside_sees_the_new_text(tree: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "elsewhere.sh"
    os.link(tree / "ok.sh", outside)
    inode = outside.stat().st_ino
    assert main([str(tree), "--write", "--no-progress"]) == 0
    err = _err(capsys)
    assert (tree / "ok.sh").read_text() == MIGRATED and outside.read_text() == MIGRATED
    assert (tree / "ok.sh").stat().st_ino == inode and outside.stat().st_nlink == 2, "the link was split"
    assert "ok.sh: a file with 2 names (hard links): written in place" in err, err
    assert "ok.sh:1: flag-bare: '--sharded_ddp' -> '--sharded_ddp simple'" in err, err
    assert main([str(tree), "--write", "--no-progress"]) == 0
    assert outside.read_text() == MIGRATED, "a second write changed more"


def test_two_names_in_the_tree_are_one_file_rewritten_once(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.link(tree / "ok.sh", tree / "same.sh")
    assert main([str(tree), "--check", "--no-progress"]) == 1
    err = _err(capsys)
    assert "same.sh: skipped: another name (hard link) of" in err and "1 would change" in err, err
    assert main([str(tree), "--write", "--no-progress"]) == 0
    assert (tree / "ok.sh").read_text() == MIGRATED == (tree / "same.sh").read_text()
    assert (tree / "ok.sh").stat().st_ino == (tree / "same.sh").stat().st_ino


def test_never_removes_what_it_did_not_write(tree: Path) -> None:
    theirs = tree / ".shardcompat-mine.tmp"  # a name like the run's temporary files
    theirs.write_text("keep me\n")
    assert main([str(tree), "--write", "--no-progress"]) == 0
    assert theirs.read_text() == "keep me\n"
    assert sorted(p.name for p in tree.iterdir()) == [".shardcompat-mine.tmp", "ok.sh", "requirements.txt"]


def _limit_file_size(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("linked", [False, True], ids=["atomic", "in-place"])
def test_a_write_that_fails_leaves_the_old_text(linked: bool) -> None:
    """A real failure half way (the file size limit, EFBIG), atomic and in place: the old text
    stays, the error names the file, no temporary file is left."""
    with world_folder() as base:
        root = base / "repo"
        root.mkdir()
        (root / "requirements.txt").write_text("transformers>=4.20\n")
        big = root / "big.sh"
        text = LEGACY * 200  # grows by 7 bytes a line
        big.write_text(text)
        if linked:
            os.link(big, base / "other-name.sh")
        give(root)
        done = migrate(["--write", "repo", "--no-progress"], base, preexec=lambda: _limit_file_size(len(text) + 100))
        assert done.returncode == 2, done.stderr
        assert "repo/big.sh: error: cannot write: File too large" in done.stderr, done.stderr
        assert big.read_text() == text, "the old text was not kept"
        assert sorted(p.name for p in root.iterdir()) == ["big.sh", "requirements.txt"]
        assert "repo/big.sh:1: not changed: would flag-bare" in done.stderr, done.stderr


def test_unwritten_files_never_read_as_applied(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tree / "locked.sh"
    locked.write_text(LEGACY)
    locked.chmod(0o444)
    assert main([str(tree), "--write", "--no-progress"]) == 2
    err = _err(capsys)
    assert "locked.sh: error: read-only file (mode 0444): not changed" in err, err
    assert "locked.sh:1: not changed: would flag-bare: '--sharded_ddp' -> '--sharded_ddp simple'" in err, err
    assert "locked.sh:1: flag-bare" not in err, err
    assert "ok.sh:1: flag-bare: '--sharded_ddp' -> '--sharded_ddp simple'" in err, "what was written reads as done"

    locked.chmod(0o644)
    locked.write_text(LEGACY)
    locked.chmod(0o444)
    (tree / "ok.sh").write_text(LEGACY)
    for mode in ("--check", "--diff"):
        main([str(tree), mode, "--no-progress"])
        err = _err(capsys)
        assert "ok.sh:1: would flag-bare" in err and "locked.sh:1: would flag-bare" in err, err
        assert ":1: flag-bare" not in err, err
    main([str(tree), "--write", "--json"])
    files = {f["path"].rsplit("/", 1)[-1]: f for f in json.loads(capsys.readouterr().out)["files"]}
    assert files["ok.sh"]["written"] and not files["locked.sh"]["written"], files
    locked.chmod(0o644)


@pytest.mark.skipif(not as_user(), reason="needs root to make a file of another owner in a shared folder")
def test_a_group_writable_file_of_another_owner_keeps_its_owner() -> None:
    """Run as uid 65534 on a root-owned file that its group (65534) may write, in a folder that
    user may write: a rename would give the file to 65534, so it is written in place."""
    with world_folder() as base:
        root = base / "repo"
        root.mkdir()
        (root / "requirements.txt").write_text("transformers>=4.20\n")
        shared = root / "shared.sh"
        shared.write_text(LEGACY)
        os.chown(shared, 0, NOBODY)
        shared.chmod(0o664)
        root.chmod(0o777)
        done = migrate(["--write", "repo", "--no-progress"], base)
        assert done.returncode == 0, done.stderr
        after = shared.stat()
        assert shared.read_text() == MIGRATED
        assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (0, NOBODY, 0o664)
        assert "written in place, so that owner and group stay" in done.stderr, done.stderr
        assert sorted(p.name for p in root.iterdir()) == ["requirements.txt", "shared.sh"]


def test_atomic_write_returns_how_it_wrote(tmp_path: Path) -> None:
    plain = tmp_path / "a.txt"
    plain.write_text("old\n")
    assert atomic_write(str(plain), b"new\n") == "" and plain.read_text() == "new\n"
    os.link(plain, tmp_path / "b.txt")
    assert "hard links" in atomic_write(str(plain), b"newer\n")
    assert (tmp_path / "b.txt").read_text() == "newer\n"


def test_extended_attributes_are_kept(tree: Path) -> None:
    script = tree / "ok.sh"
    try:
        os.setxattr(script, "user.origin", b"vendored")
    except (AttributeError, OSError) as error:
        pytest.skip(f"no user extended attributes on this file system or platform: {error}")
    inode = script.stat().st_ino
    assert main([str(tree), "--write", "--no-progress"]) == 0
    assert script.read_text() == MIGRATED and script.stat().st_ino != inode, "written atomically"
    assert os.getxattr(script, "user.origin") == b"vendored"
