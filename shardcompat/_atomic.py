"""Write a set of files into a directory so that readers see the old set or the new set, never a
mix, and leave everything else in the directory exactly as it was.

A checkpoint is a set of files plus ``manifest.json`` (sha256 and size of every file, and the
writer's ``format``), which is the commit marker: a directory without a valid manifest holds
no checkpoint.  The directory may be shared with the user's own files (a run's output folder:
logs, configs, other checkpoints), as with ``torch.distributed.checkpoint`` and
``save_pretrained``: a writer owns exactly the files its manifest lists and the manifest, and
never touches, moves or removes anything else.  Writing:

1. stage: the new files are written into a hidden staging directory *inside* the target
   (``.shardcompat-staging-<id>``; same file system, so renames are atomic), manifest last,
   everything fsynced.  A target that does not exist yet is staged *beside* it instead
   (``.shardcompat-staging-<id>-<name>``) and renamed into place whole, manifest inside, so a
   new folder appears under its name only complete (steps 2-4 do not apply);
2. check: every name the new manifest lists must be free in the target, or owned by the
   previous write of the same ``format`` (listed in its manifest); anything else is refused
   (:class:`ForeignFiles`) and the target is left as it was;
3. commit point: a journal (``.shardcompat-commit.json``) naming the staging directory, the
   files to move in and the previous files to remove is written atomically;
4. roll forward: each new file is renamed into place, the previous write's files that the new
   one does not have are removed, the new manifest is renamed into place, the journal removed.

A crash before 3 leaves the previous files untouched (and a staging directory that
:func:`recover` removes); a crash after 3 is finished by :func:`recover`, which the next *write*
into the target runs first.  Readers never run it: a folder handed to you is untrusted, and
its journal could name anything, so :func:`read_manifest` refuses a folder with a journal, and
:func:`recover` rolls forward only a journal whose every path is a plain path inside the target
(no symbolic link on the way), whose staging is one of this writer's, and whose files are those
the two manifests list.  Step 4 is idempotent and safe to run in several processes at once.

No torch here: this is plain file handling, tested on its own.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "JOURNAL",
    "MANIFEST",
    "CorruptDirectory",
    "ForeignFiles",
    "atomic_directory",
    "check_target",
    "commit",
    "contained",
    "file_digests",
    "new_staging",
    "read_manifest",
    "recover",
    "sha256",
    "verify",
    "write_json",
    "write_manifest",
]

MANIFEST = "manifest.json"
JOURNAL = ".shardcompat-commit.json"
_STAGING = ".shardcompat-staging-"
_INSIDE = re.compile(re.escape(_STAGING) + r"[0-9a-f]{12}")  # a staging inside the target
_CHUNK = 1 << 20
_JSON_ERRORS = (ValueError, UnicodeDecodeError, RecursionError, OSError)  # OSError: a folder, unreadable


class CorruptDirectory(ValueError):
    """A directory is not the complete, unmodified result of one write; the message says how."""


class ForeignFiles(ValueError):
    """The target holds something this writer did not write where it would put its own files.

    Raised before the target changes; the message names the entry and what to do.
    """


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


def write_json(path: Path, body: Mapping[str, Any]) -> None:
    """Write ``path`` whole or not at all (a sibling ``.partial`` renamed over it)."""
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True, default=str))
    _fsync(tmp)
    os.replace(tmp, path)
    _fsync(path.parent)


def write_manifest(root: Path, manifest: Mapping[str, Any]) -> None:
    """Checksum everything under ``root``, then write ``manifest.json`` (the commit marker) last."""
    for file in root.rglob("*"):
        if file.is_file():
            _fsync(file)
    write_json(root / MANIFEST, {**manifest, "files": file_digests(root)})


# ---------------------------------------------------------------------- ownership
def _relative(rel: object) -> str:
    """``rel`` if it is a plain relative path inside the directory, else :class:`CorruptDirectory`."""
    parts = PurePosixPath(str(rel)).parts
    if not isinstance(rel, str) or not parts or rel.startswith("/") or any(p in ("..", ".", "") for p in parts):
        raise CorruptDirectory(f"{rel!r} is not a path inside the directory")
    return rel


def contained(root: Path, rel: object) -> Path:
    """``root / rel``, where ``rel`` is a plain relative path and nothing on the way from ``root``
    to it (it included) is a symbolic link, so it cannot lead outside ``root``; else
    :class:`CorruptDirectory` naming the link."""
    place = root
    for part in PurePosixPath(_relative(rel)).parts:
        place = place / part
        if place.is_symlink():
            raise CorruptDirectory(
                f"{place} is a symbolic link: files of {root} are not followed through links, which "
                "could lead outside it; replace the link by the file itself"
            )
    return place


def _owned(target: Path, fmt: object) -> set[str]:
    """The files the previous write of format ``fmt`` left in ``target``: its manifest's list
    and the manifest itself (none when there is no manifest)."""
    file = target / MANIFEST
    if not file.exists() and not file.is_symlink():
        return set()
    try:
        if file.is_symlink() or not file.is_file():
            raise CorruptDirectory("it is not a regular file")
        previous = read_manifest(target)
        if previous.get("format") != fmt:
            raise CorruptDirectory(f"its format is {previous.get('format')!r}, not {fmt!r}")
        return {MANIFEST, *(_relative(rel) for rel in previous["files"])}
    except CorruptDirectory as error:
        raise ForeignFiles(
            f"{file} exists and is not the manifest of an earlier {fmt} write ({error}): "
            "it is someone else's file, left untouched; move it away or write to another directory"
        ) from None


def check_target(target: Path, fmt: object) -> set[str]:
    """Refuse a target that is not a directory or holds a foreign manifest; return what we own."""
    if target.is_symlink() and not target.exists():
        raise ForeignFiles(f"{target} is a dangling symbolic link: point it at a directory or remove it")
    if target.exists() and not target.is_dir():
        raise ForeignFiles(f"{target} exists and is not a directory: choose a directory to write into")
    return _owned(target, fmt) if target.exists() else set()


def _check_names(target: Path, names: Iterable[str], owned: Collection[str]) -> None:
    """Each new file's place is free or ours, and its folders real directories inside ``target``."""
    for rel in sorted(names):
        place = target
        for part in PurePosixPath(rel).parts[:-1]:
            place = place / part
            if place.is_symlink() or (place.exists() and not place.is_dir()):
                raise ForeignFiles(
                    f"{place} is not a plain directory (a file or a link), but the write needs a "
                    f"folder there for {rel}; it is left untouched: move it away or write elsewhere"
                )
        dest = target / rel
        if (dest.exists() or dest.is_symlink()) and (rel not in owned or dest.is_dir()):
            raise ForeignFiles(
                f"{dest} exists and was not written by the earlier write in {target}; it is "
                "left untouched: move it away or write to another directory"
            )


# ---------------------------------------------------------------------- the write
def new_staging(target: Path) -> Path:
    """A fresh, empty hidden directory for a write into ``target``: inside it where it exists,
    else beside it (its parents created), to be renamed into place by :func:`commit`."""
    if target.is_dir():
        staging = target / f"{_STAGING}{uuid.uuid4().hex[:12]}"
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.parent / f"{_STAGING}{uuid.uuid4().hex[:12]}-{target.name}"
    staging.mkdir()
    return staging


def _beside(target: Path) -> re.Pattern[str]:
    """The names of the stagings :func:`new_staging` makes beside ``target``."""
    return re.compile(_INSIDE.pattern + "-" + re.escape(target.name))


def commit(staging: Path, target: Path) -> None:
    """Move the finished write in ``staging`` (manifest included) into ``target``.

    Replaces the previous write of the same format and nothing else; refuses
    (:class:`ForeignFiles`, ``staging`` removed, ``target`` unchanged) where a name is taken
    by something that write did not own.  A staging beside ``target`` becomes ``target``.
    """
    try:
        new = read_manifest(staging)
        if staging.parent != target:
            if target.exists() or target.is_symlink():
                raise ForeignFiles(f"{target} appeared while the write was staged; it is left untouched: write again")
            os.rename(staging, target)  # the folder appears complete, manifest inside
            _fsync(target.parent)
            return
        owned = check_target(target, new.get("format"))
        added = sorted(new["files"])
        _check_names(target, [*added, MANIFEST], owned)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    journal = {"staging": staging.name, "add": added, "remove": sorted(owned - {*added, MANIFEST})}
    write_json(target / JOURNAL, journal)  # the commit point
    _roll_forward(target, journal)


def _roll_forward(target: Path, journal: Mapping[str, Any]) -> None:
    """Finish a committed write; every step tolerates having been done already (or concurrently)."""
    staging = target / journal["staging"]
    touched = {target}
    for rel in journal["add"]:
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        touched.add(dest.parent)
        with contextlib.suppress(FileNotFoundError):  # moved already
            os.replace(staging / rel, dest)
    for rel in journal["remove"]:
        (target / rel).unlink(missing_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.replace(staging / MANIFEST, target / MANIFEST)
    for folder in touched:
        _fsync(folder)
    (target / JOURNAL).unlink(missing_ok=True)
    _fsync(target)
    shutil.rmtree(staging, ignore_errors=True)
    _prune(target, journal["remove"])


def _prune(target: Path, removed: Iterable[str]) -> None:
    """Remove the folders that removing ``removed`` left empty (never ``target`` itself)."""
    folders = {target.joinpath(*PurePosixPath(rel).parts[:i]) for rel in removed for i in range(1, len(PurePosixPath(rel).parts))}
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):  # not empty: something else lives there
            folder.rmdir()


def recover(path: str | os.PathLike[str]) -> None:
    """Finish a write into ``path`` that was committed before a crash, and drop the stagings of
    writes that were not.  Only a writer about to write into ``path`` calls this (never a reader):
    a journal that is not one this writer could have left (:func:`_journal`) is refused with
    :class:`CorruptDirectory` and nothing is done.  Not safe while another process is *staging* a
    write to the same ``path`` (saves to one path are serialised by the collective that calls
    them); finishing one is."""
    target = Path(path)
    # glob, not a listing of the parent: a checkpoint root holds many step folders, and the cost
    # of a save must not grow with them
    for leftover in target.parent.glob(f"{_STAGING}*-{glob.escape(target.name)}"):
        if _beside(target).fullmatch(leftover.name) and leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
    if target.is_symlink() or not target.is_dir():
        return
    journal = _journal(target)
    if journal is not None:
        _roll_forward(target, journal)
    for leftover in target.iterdir():
        if _INSIDE.fullmatch(leftover.name) and leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
    partial = target / f"{JOURNAL}.partial"  # killed before the commit point
    if partial.is_file() and not partial.is_symlink():
        partial.unlink(missing_ok=True)


def _journal(target: Path) -> dict[str, Any] | None:
    """The journal in ``target`` (``None``: none), checked to be one that :func:`commit` wrote:
    a staging of ours inside ``target``, every path plain and inside with no link on the way, the
    files added those the new manifest lists and the files removed those the old one lists."""
    file = target / JOURNAL
    if not file.exists() and not file.is_symlink():
        return None
    try:
        if file.is_symlink() or not file.is_file():
            raise ValueError("it is not a regular file")
        journal = json.loads(file.read_text())
        if not isinstance(journal, dict) or sorted(journal) != ["add", "remove", "staging"]:
            raise ValueError("it is not {staging, add, remove}")
        staging, add, remove = journal["staging"], journal["add"], journal["remove"]
        if not isinstance(staging, str) or not _INSIDE.fullmatch(staging):
            raise ValueError(f"its staging {staging!r} is not a staging folder of this writer")
        if not isinstance(add, list) or not isinstance(remove, list):
            raise ValueError("its add and remove are not lists")
        folder = contained(target, staging)
        for rel in [*add, *remove]:
            contained(target, rel)
        for rel in add:
            contained(folder, rel)
        committed = not (folder / MANIFEST).exists()  # the new manifest moved in: adds and removes done
        new = _listed(target if committed else folder)
        old = set() if committed else _listed(target)
        if not set(add) <= new:
            raise ValueError(f"it adds {sorted(set(add) - new)[:3]}, which the new manifest does not list")
        stray = [rel for rel in remove if rel not in old and (target / rel).exists()]
        if stray:
            raise ValueError(f"it removes {stray[:3]}, which the old manifest does not list")
    except FileNotFoundError:  # another process finished it meanwhile
        return None
    except (*_JSON_ERRORS, TypeError, KeyError) as error:
        raise CorruptDirectory(
            f"{file} is damaged or not written by shardcompat ({_reason(error)}); nothing was done: "
            f"remove it by hand if no save into {target} is running"
        ) from None
    return journal


def _listed(folder: Path) -> set[str]:
    """The files the manifest in ``folder`` lists (none when it has no manifest)."""
    if not (folder / MANIFEST).exists():
        return set()
    return set(read_manifest(folder, journal_ok=True)["files"])


def _reason(error: BaseException) -> str:
    if isinstance(error, RecursionError):
        return "nested too deeply"
    return str(error) if type(error) in (ValueError, CorruptDirectory) else f"{type(error).__name__}: {error}"


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str], manifest: Mapping[str, Any]) -> Iterator[Path]:
    """Yield an empty staging directory; on success write its manifest and commit it at ``path``.

    ``manifest["format"]`` says which earlier writes this one may replace.  If the body
    raises, or the target refuses (:class:`ForeignFiles`), the staging directory is removed
    and ``path`` is as it was.
    """
    target = Path(path)
    recover(target)
    check_target(target, manifest.get("format"))
    staging = new_staging(target)
    try:
        yield staging
        write_manifest(staging, manifest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    commit(staging, target)


# ---------------------------------------------------------------------- reading
def read_manifest(path: Path, *, journal_ok: bool = False) -> dict[str, Any]:
    """The manifest of the write at ``path``, or :class:`CorruptDirectory` saying why not.

    A folder holding a journal is refused (``journal_ok``: only the writer finishing it reads
    one): a write into it stopped after its commit point, so it may hold two writes' files.
    """
    if not path.exists():
        raise CorruptDirectory(f"{path} does not exist")
    if not path.is_dir():
        raise CorruptDirectory(f"{path} is not a checkpoint directory (it is a file)")
    file = path / MANIFEST
    journal = path / JOURNAL
    if not journal_ok and (journal.exists() or journal.is_symlink()):
        raise CorruptDirectory(
            f"{journal}: a save into {path} stopped while moving its files into place, so it may hold "
            f"a mix of two saves and is not read; the next save into {path} finishes it: load another checkpoint"
        )
    if not file.exists() and not file.is_symlink():
        raise CorruptDirectory(f"{file} is missing: {path} holds no checkpoint, or its save did not finish")
    if file.is_symlink() or not file.is_file():
        raise CorruptDirectory(f"{file} is not a regular file (a folder or a link): the manifest is damaged")
    try:
        manifest: dict[str, Any] = json.loads(file.read_text())
    except _JSON_ERRORS as error:
        raise CorruptDirectory(f"{file} is not valid JSON ({_reason(error)}): the manifest is damaged") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CorruptDirectory(f"{file} lists no files: the manifest is damaged")
    for rel, entry in manifest["files"].items():
        try:
            _relative(rel)
        except CorruptDirectory as error:
            raise CorruptDirectory(f"{file}: {error}: the manifest is damaged") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or type(entry.get("size")) is not int:
            raise CorruptDirectory(f"{file}: the entry for {rel!r} is not {{sha256, size}}: the manifest is damaged")
    return manifest


def verify(path: str | os.PathLike[str], only: Collection[str] | None = None) -> dict[str, Any]:
    """Check every file the manifest lists (present, size, sha256); return the manifest.

    ``only``: check just those of the listed files.  One line names every damaged file and
    what differs.
    """
    root = Path(path)
    manifest = read_manifest(root)
    problems: list[str] = []
    for rel, want in sorted(manifest["files"].items()):
        if only is not None and rel not in only:
            continue
        try:
            file = contained(root, rel)
        except CorruptDirectory as error:
            problems.append(str(error))
            continue
        if not file.is_file():
            problems.append(f"{file}: missing")
            continue
        size = file.stat().st_size
        if size != want["size"]:
            problems.append(f"{file}: {size} bytes, the manifest says {want.get('size')} (truncated?)")
        elif sha256(file) != want["sha256"]:
            problems.append(f"{file}: sha256 differs from the manifest (corrupted)")
    if problems:
        raise CorruptDirectory("damaged checkpoint: " + "; ".join(problems))
    return manifest
