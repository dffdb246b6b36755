"""Write a directory so that readers see the old one or the new one, never half of either.

A checkpoint is a directory of files plus ``manifest.json`` (sha256 and size of every file),
written last: a directory without a valid manifest is not a checkpoint.  The new directory is
built under a hidden temporary name next to the target and then swapped in:

* Linux: ``renameat2(RENAME_EXCHANGE)`` swaps the two directories in one atomic step, even
  when the target is a non-empty directory (which plain ``rename`` refuses).
* elsewhere: the old directory is renamed to a hidden backup, the new one renamed into place,
  the backup removed.  A crash between the two renames leaves no target but an intact backup;
  :func:`recover` (run by every save and load) puts it back.

No torch here: this is plain file handling, tested on its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import json
import os
import shutil
import sys
import uuid
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "MANIFEST",
    "CorruptDirectory",
    "atomic_directory",
    "commit",
    "file_digests",
    "new_temporary",
    "read_manifest",
    "recover",
    "sha256",
    "verify",
    "write_manifest",
]

MANIFEST = "manifest.json"
_TMP = ".tmp-"
_OLD = ".old-"
_CHUNK = 1 << 20


class CorruptDirectory(ValueError):
    """A directory is not the complete, unmodified result of one write; the message says how."""


def _hidden(path: Path, kind: str, tag: str) -> Path:
    return path.with_name(f".{path.name}{kind}{tag}")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_digests(root: Path) -> dict[str, dict[str, Any]]:
    """``{relative posix path: {"sha256", "size"}}`` for every file under ``root`` but the manifest."""
    files: dict[str, dict[str, Any]] = {}
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        if rel != MANIFEST:
            files[rel] = {"sha256": sha256(file), "size": file.stat().st_size}
    return files


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync directories; the rename still orders
        pass
    finally:
        os.close(fd)


def write_manifest(root: Path, manifest: Mapping[str, Any]) -> None:
    """Checksum everything under ``root``, then write ``manifest.json`` (the commit marker) last."""
    for file in root.rglob("*"):
        if file.is_file():
            _fsync(file)
    body = {**manifest, "files": file_digests(root)}
    tmp = root / f"{MANIFEST}.partial"
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True, default=str))
    _fsync(tmp)
    os.replace(tmp, root / MANIFEST)
    _fsync(root)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths (Linux ``renameat2``); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    libc_name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def commit(tmp: Path, path: Path) -> None:
    """Put the finished directory ``tmp`` at ``path``, replacing what is there atomically."""
    if not path.exists() and not path.is_symlink():
        os.rename(tmp, path)
    elif _exchange(tmp, path):
        shutil.rmtree(tmp)  # tmp now holds the previous checkpoint
    else:
        backup = _hidden(path, _OLD, uuid.uuid4().hex[:12])
        os.rename(path, backup)
        os.rename(tmp, path)  # a crash just before this leaves only the backup: recover()
        shutil.rmtree(backup)
    _fsync(path.parent)


def recover(path: Path) -> None:
    """Undo what a crash mid-commit left: restore a backup if the target is gone, drop temporaries.

    Not safe to run while another process is writing the same ``path``; saves to one path
    are serialised by the collective that calls them.
    """
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        return
    backups = sorted(parent.glob(f".{path.name}{_OLD}*"), key=lambda p: p.stat().st_mtime)
    if backups and not path.exists():
        os.rename(backups.pop(), path)
    for leftover in [*backups, *parent.glob(f".{path.name}{_TMP}*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def new_temporary(path: Path) -> Path:
    """A fresh, empty hidden directory next to ``path`` (same file system, so rename works)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _hidden(path, _TMP, uuid.uuid4().hex[:12])
    tmp.mkdir()
    return tmp


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str], manifest: Mapping[str, Any]) -> Iterator[Path]:
    """Yield an empty temporary directory; on success write its manifest and swap it in at ``path``.

    If the body raises, the temporary directory is removed and ``path`` is untouched.
    """
    target = Path(path)
    recover(target)
    tmp = new_temporary(target)
    try:
        yield tmp
        write_manifest(tmp, manifest)
        commit(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the checkpoint at ``path``, or :class:`CorruptDirectory` saying why not."""
    if not path.exists():
        raise CorruptDirectory(f"{path} does not exist")
    if not path.is_dir():
        raise CorruptDirectory(f"{path} is not a checkpoint directory (it is a file)")
    file = path / MANIFEST
    if not file.exists():
        raise CorruptDirectory(
            f"{path} has no {MANIFEST}: it is not a checkpoint, or its save did not finish"
        )
    try:
        manifest: dict[str, Any] = json.loads(file.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise CorruptDirectory(f"{file} is not valid JSON ({error}): the manifest is damaged") from None
    if not isinstance(manifest.get("files"), dict):
        raise CorruptDirectory(f"{file} lists no files: the manifest is damaged")
    return manifest


def verify(path: str | os.PathLike[str], only: Collection[str] | None = None) -> dict[str, Any]:
    """Check every file the manifest lists (present, size, sha256); return the manifest.

    ``only``: check just those of the listed files.  Reports every problem at once, naming the
    file and what differs.
    """
    root = Path(path)
    manifest = read_manifest(root)
    problems: list[str] = []
    for rel, want in sorted(manifest["files"].items()):
        if only is not None and rel not in only:
            continue
        file = root / rel
        if not file.is_file():
            problems.append(f"{rel}: missing")
            continue
        size = file.stat().st_size
        if size != want.get("size"):
            problems.append(f"{rel}: {size} bytes, the manifest says {want.get('size')} (truncated?)")
        elif sha256(file) != want.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest (corrupted)")
    if problems:
        raise CorruptDirectory(f"checkpoint {root} is damaged:\n  " + "\n  ".join(problems))
    return manifest
