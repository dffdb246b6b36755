"""The atomic directory writer, on its own: real crashes (SIGKILL of a child process) at
each point of a save leave the previous directory readable and verifiable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from shardcompat import _atomic
from shardcompat._atomic import CorruptDirectory, atomic_directory, recover, verify

REPO = Path(__file__).resolve().parents[1]


def _write(path: Path, payload: bytes, **fields: object) -> None:
    with atomic_directory(path, {"fields": fields}) as tmp:
        (tmp / "data.bin").write_bytes(payload)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "more.txt").write_text("more")


def _hidden(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith("."))


def test_write_verify_and_replace(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    _write(target, b"one", n=1)
    manifest = verify(target)
    assert manifest["fields"] == {"n": 1}
    assert set(manifest["files"]) == {"data.bin", "sub/more.txt"}
    assert manifest["files"]["data.bin"]["size"] == 3
    _write(target, b"second", n=2)  # replacing a non-empty directory
    assert verify(target)["fields"] == {"n": 2}
    assert (target / "data.bin").read_bytes() == b"second"
    assert _hidden(target) == [], "temporaries or backups were left behind"


def test_replace_without_renameat2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The portable path (backup + rename) gives the same result where the swap is missing."""
    target = tmp_path / "ckpt"
    _write(target, b"one")
    monkeypatch.setattr(_atomic, "_exchange", lambda a, b: False)
    _write(target, b"two")
    assert (target / "data.bin").read_bytes() == b"two"
    assert _hidden(target) == []


def test_failure_in_body_leaves_previous(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    _write(target, b"one")
    with pytest.raises(RuntimeError, match="disk full"), atomic_directory(target, {}) as tmp:
        (tmp / "data.bin").write_bytes(b"partial")
        raise RuntimeError("disk full")
    assert (target / "data.bin").read_bytes() == b"one"
    verify(target)
    assert _hidden(target) == []


def test_damage_is_reported_per_file(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    _write(target, b"0123456789")
    (target / "data.bin").write_bytes(b"01234")  # truncated
    (target / "sub" / "more.txt").write_text("mose")  # same size, flipped byte
    with pytest.raises(CorruptDirectory) as info:
        verify(target)
    text = str(info.value)
    assert "data.bin: 5 bytes, the manifest says 10 (truncated?)" in text
    assert "sub/more.txt: sha256 differs from the manifest (corrupted)" in text
    (target / "sub" / "more.txt").unlink()
    with pytest.raises(CorruptDirectory, match=r"sub/more.txt: missing"):
        verify(target)


@pytest.mark.parametrize(
    ("content", "match"),
    [(None, "has no manifest.json"), ("{not json", "not valid JSON"), ('{"x": 1}', "lists no files")],
)
def test_bad_manifest(tmp_path: Path, content: str | None, match: str) -> None:
    target = tmp_path / "ckpt"
    target.mkdir()
    if content is not None:
        (target / "manifest.json").write_text(content)
    with pytest.raises(CorruptDirectory, match=match):
        verify(target)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(CorruptDirectory, match="does not exist"):
        verify(tmp_path / "nothing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CorruptDirectory, match="is a file"):
        verify(tmp_path / "file")


# ------------------------------------------------------------------ real crashes
_CHILD = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from pathlib import Path
    from shardcompat import _atomic

    target, point = Path(sys.argv[1]), sys.argv[2]
    real_rename = os.rename
    if point == "between-renames":
        _atomic._exchange = lambda a, b: False
        def rename(src, dst, _n=[0]):
            real_rename(src, dst)
            _n[0] += 1
            if _n[0] == 1:  # the old checkpoint is now the backup; the new one not yet in place
                os.kill(os.getpid(), 9)
        os.rename = rename
    if point == "after-swap":
        real_rmtree = _atomic.shutil.rmtree
        def rmtree(path, *a, **k):
            os.kill(os.getpid(), 9)  # swapped in, the previous one not yet removed
        _atomic.shutil.rmtree = rmtree
    with _atomic.atomic_directory(target, {{"n": 2}}) as tmp:
        with (tmp / "data.bin").open("wb") as f:
            # mid-write: up to 4000 x 64 KiB, slowly, so the parent kills us midway
            for _ in range(4000 if point == "mid-write" else 1):
                f.write(b"x" * 65536)
                f.flush()
                if point == "mid-write":
                    time.sleep(0.001)
    """
)


def _crash(tmp_path: Path, point: str) -> Path:
    target = tmp_path / "ckpt"
    _write(target, b"previous", n=1)
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(repo=str(REPO)))
    proc = subprocess.Popen([sys.executable, str(script), str(target), point])
    if point == "mid-write":
        deadline = time.monotonic() + 30
        while not any(target.parent.glob(".ckpt.tmp-*/data.bin")):
            assert time.monotonic() < deadline, "the child never started writing"
            assert proc.poll() is None, "the child exited before it was killed"
            time.sleep(0.01)
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
    assert proc.wait(60) == -signal.SIGKILL
    return target


def test_sigkill_mid_write_keeps_previous(tmp_path: Path) -> None:
    target = _crash(tmp_path, "mid-write")
    assert any(p.name.startswith(".ckpt.tmp-") for p in tmp_path.iterdir()), "no temp dir: the kill came too late"
    assert verify(target)["fields"] == {"n": 1}
    assert (target / "data.bin").read_bytes() == b"previous"
    recover(target)
    assert _hidden(target) == [], "recover() left the dead save's temporary directory"


def test_sigkill_between_renames_is_recovered(tmp_path: Path) -> None:
    target = _crash(tmp_path, "between-renames")
    assert not target.exists(), "the crash point was not reached"
    recover(target)  # every save and load runs this first
    assert (target / "data.bin").read_bytes() == b"previous"
    verify(target)
    assert _hidden(target) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux-only")
def test_sigkill_after_swap_has_new_and_cleans_old(tmp_path: Path) -> None:
    target = _crash(tmp_path, "after-swap")
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["n"] == 2, "the swap did not happen (renameat2 unavailable?)"
    verify(target)
    recover(target)
    assert _hidden(target) == []
    assert os.listdir(target)
