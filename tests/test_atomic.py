"""The atomic directory writer, on its own: it owns exactly the files its manifest lists, leaves
everything else in the directory byte-identical, refuses a name someone else holds, and a real
crash (SIGKILL of a child process) at any line of a write leaves the old or the new files,
never a mix.  The kill sweep over every line runs in the reliability suite; a sample here."""

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
from shardcompat._atomic import CorruptDirectory, ForeignFiles, atomic_directory, recover, verify

FORMAT = "test-writer"
OLD = {"data.bin": b"previous", "sub/more.txt": b"more", "old-only.txt": b"only in the old write"}
NEW = {"data.bin": b"second" * 1000, "sub/more.txt": b"MORE", "new-only/x.txt": b"only in the new write"}
# The user's own things, among and inside ours: they must survive every write byte-identical.
USER = {
    "notes.txt": b"my notes",
    ".hidden-user": b"dot file",
    "user-dir/a.txt": b"a",
    "user-dir/deeper/b.bin": bytes(range(256)),
    "sub/user-in-our-folder.txt": b"mine, in a folder the writer also uses",
}


def _write(path: Path, files: dict[str, bytes], **fields: object) -> None:
    with atomic_directory(path, {"format": FORMAT, "fields": fields}) as tmp:
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)


def _put(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (links as ``link -> target``)."""
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = f"link -> {os.readlink(path)}".encode()
        elif path.is_file():
            out[rel] = path.read_bytes()
    return out


def _ours(root: Path) -> dict[str, bytes]:
    return {
        rel: data for rel, data in _tree(root).items()
        if rel not in USER and rel != "manifest.json" and not rel.startswith(".shardcompat-")
    }


def test_write_verify_and_replace(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    _write(target, OLD, n=1)
    manifest = verify(target)
    assert manifest["fields"] == {"n": 1} and manifest["format"] == FORMAT
    assert set(manifest["files"]) == set(OLD)
    assert manifest["files"]["data.bin"]["size"] == len(OLD["data.bin"])
    _write(target, NEW, n=2)  # replacing: a file only the old write had goes, a new folder comes
    assert verify(target)["fields"] == {"n": 2}
    assert _ours(target) == NEW
    assert sorted(os.listdir(target)) == ["data.bin", "manifest.json", "new-only", "sub"]


def test_users_files_and_folders_survive_byte_identical(tmp_path: Path) -> None:
    """Into a folder that already holds the user's things, twice (first write, then a replace)."""
    target = tmp_path / "out"
    _put(target, USER)
    _write(target, OLD, n=1)
    assert {k: v for k, v in _tree(target).items() if k in USER} == USER
    _write(target, NEW, n=2)
    tree = _tree(target)
    assert {k: v for k, v in tree.items() if k in USER} == USER
    assert _ours(target) == NEW
    assert verify(target)["fields"] == {"n": 2}
    assert not list(target.glob(".shardcompat-*")), "temporaries were left behind"


def test_emptied_folders_go_but_not_the_users(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    _write(target, {"rng/r0.pt": b"0", "rng/r1.pt": b"1", "keep/k.pt": b"k", "m": b"m"})
    (target / "keep" / "user.txt").write_text("user")
    _write(target, {"m": b"m2"})
    assert not (target / "rng").exists(), "a folder only the old write used was left empty"
    assert _tree(target / "keep") == {"user.txt": b"user"}


def test_failure_in_body_leaves_previous(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    _put(target, USER)
    _write(target, OLD)
    with pytest.raises(RuntimeError, match="disk full"), atomic_directory(target, {"format": FORMAT}) as tmp:
        (tmp / "data.bin").write_bytes(b"partial")
        raise RuntimeError("disk full")
    assert _ours(target) == OLD and {k: v for k, v in _tree(target).items() if k in USER} == USER
    verify(target)
    assert not list(target.glob(".shardcompat-*"))


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda t: (t / "manifest.json").write_text("my own manifest"), r"manifest.json exists and is not the manifest"),
        (lambda t: (t / "manifest.json").write_text('{"format": "other", "files": {}}'), r"its format is 'other'"),
        (lambda t: (t / "data.bin").write_text("user's data.bin"), r"data.bin exists and was not written by"),
        (lambda t: (t / "data.bin").mkdir(), r"data.bin exists and was not written by"),
        (lambda t: (t / "sub").write_text("a file where a folder goes"), r"sub is not a plain directory"),
        (lambda t: (t / "sub").symlink_to(t.parent / "elsewhere"), r"sub is not a plain directory"),
    ],
    ids=["foreign-manifest", "other-format", "taken-name", "folder-on-name", "file-on-folder", "linked-folder"],
)
def test_a_name_someone_else_holds_is_refused_and_nothing_changes(tmp_path: Path, setup: object, match: str) -> None:
    target = tmp_path / "ckpt"
    (tmp_path / "elsewhere").mkdir()
    target.mkdir()
    _put(target, {rel: data for rel, data in USER.items() if not rel.startswith("sub/")})
    setup(target)  # type: ignore[operator]
    before = _tree(target)
    with pytest.raises(ForeignFiles, match=match) as info:
        _write(target, OLD)
    assert "left untouched" in str(info.value) and "\n" not in str(info.value)
    assert _tree(target) == before, "a refused write changed the target"
    assert _tree(tmp_path / "elsewhere") == {}, "the write went through a link out of the target"
    assert not list(target.glob(".shardcompat-*"))


def test_target_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ForeignFiles, match="exists and is not a directory"):
        _write(tmp_path / "file", OLD)
    assert (tmp_path / "file").read_text() == "x"


def test_a_manifest_naming_paths_outside_is_not_trusted(tmp_path: Path) -> None:
    """A crafted manifest cannot make a write remove files outside the directory."""
    target, victim = tmp_path / "ckpt", tmp_path / "victim.txt"
    victim.write_text("keep me")
    target.mkdir()
    (target / "manifest.json").write_text(json.dumps({"format": FORMAT, "files": {"../victim.txt": {}}}))
    with pytest.raises(ForeignFiles, match="is not a path inside the directory"):
        _write(target, OLD)
    assert victim.read_text() == "keep me"


def test_damage_is_reported_per_file_on_one_line(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    _write(target, {"data.bin": b"0123456789", "sub/more.txt": b"more"})
    (target / "data.bin").write_bytes(b"01234")  # truncated
    (target / "sub" / "more.txt").write_text("mose")  # same size, flipped byte
    with pytest.raises(CorruptDirectory) as info:
        verify(target)
    text = str(info.value)
    assert f"{target / 'data.bin'}: 5 bytes, the manifest says 10 (truncated?)" in text
    assert f"{target / 'sub' / 'more.txt'}: sha256 differs from the manifest (corrupted)" in text
    assert "\n" not in text
    (target / "sub" / "more.txt").unlink()
    with pytest.raises(CorruptDirectory, match=r"sub/more.txt: missing"):
        verify(target)


@pytest.mark.parametrize(
    ("content", "match"),
    [(None, "manifest.json is missing"), ("{not json", "not valid JSON"), ('{"x": 1}', "lists no files")],
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
# The child loads _atomic.py alone (no torch: a few tens of ms a process) and SIGKILLs itself
# at the N-th line it executes in that module, so every point of a write can be a crash point.
_CHILD = textwrap.dedent(
    """
    import importlib.util, json, os, sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_atomic", {module!r})
    atomic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(atomic)
    target, kill_at, files = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    count = 0

    def trace(frame, event, arg):
        global count
        if frame.f_code.co_filename != atomic.__file__:
            return None
        if event == "line":
            count += 1
            if count == kill_at:
                os.kill(os.getpid(), 9)
        return trace

    sys.settrace(trace)
    with atomic.atomic_directory(target, {{"format": {fmt!r}, "n": 2}}) as tmp:
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
    sys.settrace(None)
    print(count)
    """
)


def _child(tmp_path: Path) -> Path:
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(module=_atomic.__file__, fmt=FORMAT))
    return script


def _crash_at(tmp_path: Path, kill_at: int) -> subprocess.CompletedProcess[str]:
    """A fresh folder with the user's files and the old write, and a child writing NEW into it."""
    target = tmp_path / f"kill-{kill_at}"
    _put(target, USER)
    _write(target, OLD, n=1)
    files = {rel: data.decode() for rel, data in NEW.items()}
    return subprocess.run(
        [sys.executable, str(_child(tmp_path)), str(target), str(kill_at), json.dumps(files)],
        capture_output=True, text=True, timeout=60, check=False,
    )


def _lines_in_a_write(tmp_path: Path) -> int:
    done = _crash_at(tmp_path, 0)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def _old_or_new_never_a_mix(target: Path) -> int:
    """After recover() (which the next write runs first): exactly the old or the new write, verified, the
    user's files byte-identical, nothing of ours left over.  Returns which write it is."""
    recover(target)
    manifest = verify(target)
    n = manifest["n"] if "n" in manifest else manifest["fields"]["n"]
    assert _ours(target) == (OLD if n == 1 else NEW), f"{target}: a mix of two writes"
    assert {k: v for k, v in _tree(target).items() if k in USER} == USER, f"{target}: user files changed"
    assert not list(target.glob(".shardcompat-*")), f"{target}: leftovers after recover()"
    return int(n)


def kill_sweep(tmp_path: Path, every: int) -> list[int]:
    """Kill a write at every ``every``-th line (and the last ones); the state after each."""
    total = _lines_in_a_write(tmp_path)
    points = sorted({*range(1, total + 1, every), *range(max(1, total - 3), total + 1)})
    seen = []
    for point in points:
        done = _crash_at(tmp_path, point)
        assert done.returncode == -signal.SIGKILL, f"line {point}/{total}: {done.returncode} {done.stderr}"
        seen.append(_old_or_new_never_a_mix(tmp_path / f"kill-{point}"))
    assert seen == sorted(seen), f"a later kill left the older write: {seen}"
    assert seen[0] == 1 and seen[-1] == 2, f"the sweep did not straddle the commit point: {seen}"
    return seen


def test_sigkill_at_sampled_lines_leaves_old_or_new(tmp_path: Path) -> None:
    kill_sweep(tmp_path, every=37)


def test_sigkill_mid_write_keeps_previous(tmp_path: Path) -> None:
    """A kill by time, while a large file is being written (no tracing involved)."""
    target = tmp_path / "ckpt"
    _put(target, USER)
    _write(target, OLD, n=1)
    script = tmp_path / "slow.py"
    script.write_text(textwrap.dedent(f"""
        import importlib.util, sys, time
        from pathlib import Path
        spec = importlib.util.spec_from_file_location("_atomic", {_atomic.__file__!r})
        atomic = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(atomic)
        with atomic.atomic_directory(Path(sys.argv[1]), {{"format": {FORMAT!r}, "n": 2}}) as tmp:
            with (tmp / "data.bin").open("wb") as f:
                for _ in range(4000):
                    f.write(b"x" * 65536)
                    f.flush()
                    time.sleep(0.001)
    """))
    proc = subprocess.Popen([sys.executable, str(script), str(target)])
    deadline = time.monotonic() + 30
    while not any(target.glob(".shardcompat-staging-*/data.bin")):
        assert time.monotonic() < deadline, "the child never started writing"
        assert proc.poll() is None, "the child exited before it was killed"
        time.sleep(0.01)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(60) == -signal.SIGKILL
    assert any(target.glob(".shardcompat-staging-*")), "no staging dir: the kill came too late"
    assert _ours(target) == OLD, "the old write changed before the new one was complete"
    assert _old_or_new_never_a_mix(target) == 1


def test_recover_finishes_a_committed_write_in_two_processes_at_once(tmp_path: Path) -> None:
    """Two writers' recover() at once (a reader never runs it): rolling forward twice is harmless."""
    target = tmp_path / "ckpt"
    _put(target, USER)
    _write(target, OLD, n=1)
    staging = _atomic.new_staging(target)
    _put(staging, NEW)
    _atomic.write_manifest(staging, {"format": FORMAT, "n": 2})
    journal = {"staging": staging.name, "add": sorted(NEW), "remove": ["old-only.txt"]}
    (target / _atomic.JOURNAL).write_text(json.dumps(journal))  # crashed right after the commit point
    with pytest.raises(CorruptDirectory, match="stopped while moving its files into place"):
        verify(target)  # a reader does not recover: it is told, not misled
    os.replace(staging / "data.bin", target / "data.bin")  # and half of the moves had happened
    recover(target)
    recover(target)
    assert _old_or_new_never_a_mix(target) == 2
