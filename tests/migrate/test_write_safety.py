"""``shardcompat-migrate --write`` changes only what the user lets it: a read-only file or one in
a read-only folder is left byte-identical and reported by name with the reason (exit 2, as for a
file it cannot parse), a link stays a link, and a file outside the tree is never changed through
a link unless ``--follow-links`` asks.  Permission bits are honoured explicitly, so these tests
mean the same run as root (who could write anyway) and as a user."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from codemods.cli import main

LEGACY = "python train.py --sharded_ddp --fp16\n"


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "requirements.txt").write_text("transformers>=4.20\n")
    (root / "ok.sh").write_text(LEGACY)
    yield root
    for path in tmp_path.rglob("*"):  # let pytest clean up what the tests locked
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _outcome(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


def test_a_read_only_file_is_reported_and_left_alone(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tree / "locked.sh"
    locked.write_text(LEGACY)
    locked.chmod(0o444)
    assert main([str(tree), "--write", "--no-progress"]) == 2
    err = _outcome(capsys)
    assert f"{locked.name}: error: read-only file (mode 0444): not changed" in err, err
    assert locked.read_text() == LEGACY and stat.S_IMODE(locked.stat().st_mode) == 0o444
    assert (tree / "ok.sh").read_text() != LEGACY, "the writable file was not migrated"


def test_a_file_in_a_read_only_folder_is_reported_and_left_alone(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tree / "frozen"
    folder.mkdir()
    (folder / "run.sh").write_text(LEGACY)
    folder.chmod(0o555)
    assert main([str(tree), "--write", "--no-progress"]) == 2
    err = _outcome(capsys)
    assert "run.sh: error: its folder" in err and "is read-only (mode 0555)" in err, err
    assert (folder / "run.sh").read_text() == LEGACY
    assert sorted(os.listdir(folder)) == ["run.sh"], "a temporary file was left in the read-only folder"


def test_a_link_to_a_file_outside_the_tree_is_not_followed_unless_asked(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "shared" / "launch.sh"
    outside.parent.mkdir()
    outside.write_text(LEGACY)
    link = tree / "launch.sh"
    link.symlink_to(outside)
    assert main([str(tree), "--write", "--no-progress"]) == 2
    err = _outcome(capsys)
    assert f"launch.sh: error: a symbolic link to {outside}, which is not among the files migrated" in err, err
    assert "--follow-links" in err
    assert outside.read_text() == LEGACY and link.is_symlink()
    assert main([str(tree), "--write", "--follow-links", "--no-progress"]) == 0
    assert link.is_symlink() and os.readlink(link) == str(outside), "the link was replaced"
    assert outside.read_text() != LEGACY, "--follow-links did not rewrite the target"
    migrated = outside.read_text()
    assert main([str(tree), "--write", "--follow-links", "--no-progress"]) == 0
    assert outside.read_text() == migrated, "a second write changed more"


def test_a_link_inside_the_tree_stays_a_link_and_its_target_is_migrated_once(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tree / "alias.sh"
    link.symlink_to("ok.sh")
    assert main([str(tree), "--write", "--no-progress"]) == 0
    err = _outcome(capsys)
    assert link.is_symlink() and os.readlink(link) == "ok.sh"
    assert (tree / "ok.sh").read_text() != LEGACY
    assert "alias.sh: skipped: a symbolic link to a file migrated as itself" in err, err


def test_diff_mode_says_how_to_apply(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tree), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "+++ " in captured.out
    assert "nothing was written: run again with --write to apply these changes" in captured.err
    assert (tree / "ok.sh").read_text() == LEGACY
    assert main([str(tree), "--check", "--no-progress"]) == 1
    assert "run again with --write" not in capsys.readouterr().err
