"""Applying a rewrite: only to a file the user lets us write, never through a link out of the
tree, keeping the file's owner, group, mode and extended attributes: atomically (a temporary
file in the same folder given the old metadata, then a rename), or in place for a hard-linked
file and a file whose owner this user cannot give to a new one (see :func:`atomic_write`).

What ``--write`` refuses, naming the file and why (the run then exits 2, as for a file it
cannot parse):

* a read-only file (no write permission bit, or one this user may not write) or a file in a
  folder this user may not write: permission bits are honoured even for root, who could
  write anyway, because a user who made a file read-only meant it;
* a symbolic link whose target is not among the files migrated (outside the paths given, or
  excluded): the target is not modified unless ``--follow-links`` is given.  A link stays a
  link either way: with ``--follow-links`` the file it points to is rewritten in place, and a
  link whose target is migrated as itself is left alone (the target's rewrite shows through).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Collection

__all__ = ["atomic_write", "unwritable", "where_to_write"]

_ANY_WRITE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def unwritable(path: str) -> str | None:
    """Why ``path`` may not be rewritten in place, or ``None`` when it may."""
    info = os.stat(path)
    mode = info.st_mode
    if not mode & _ANY_WRITE:
        return (f"read-only file (mode {stat.S_IMODE(mode):04o}): not changed; make it writable "
                "(chmod u+w) to migrate it")
    if not os.access(path, os.W_OK):
        return (f"this user may not write the file (owner uid {info.st_uid}, gid {info.st_gid}, mode "
                f"{stat.S_IMODE(mode):04o}): not changed; run as a user who may write it to migrate it")
    folder = os.path.dirname(os.path.abspath(path))
    folder_mode = os.stat(folder).st_mode
    if not folder_mode & _ANY_WRITE or not os.access(folder, os.W_OK | os.X_OK):
        return (f"its folder {folder} is read-only (mode {stat.S_IMODE(folder_mode):04o}): not changed "
                "(the rewrite is written beside the file and renamed over it); make the folder writable")
    return None


def where_to_write(path: str, migrated: Collection[str], follow_links: bool) -> tuple[str | None, str | None]:
    """``(file to write, None)``, ``(None, why not)``, or ``(None, None)`` for a link whose target
    is migrated as itself.  ``migrated``: the real paths of the files (not links) this run rewrites."""
    if os.path.islink(path):
        target = os.path.realpath(path)
        if target in migrated:
            return None, None
        if not follow_links:
            return None, (f"a symbolic link to {target}, which is not among the files migrated: not "
                          "changed (--follow-links rewrites the file it points to; the link stays a link)")
        path = target
    why = unwritable(path)
    return (None, why) if why else (path, None)


def atomic_write(path: str, data: bytes) -> str:
    """Replace the text of ``path`` with ``data``, keeping the file's owner, group, mode and
    extended attributes (ACLs included); returns ``""`` for an atomic write, else why the file
    was written in place.

    An ordinary file is written beside itself (a temporary file in the same folder, given the
    old owner, group, mode and attributes) and renamed over the old one, so readers see the old
    or the new text, never half of it.  A file with more than one name (a hard link) is written
    in place, so that every name sees the new text, as editors do; and so is a file whose owner,
    group or attributes this user cannot give to a new file (a file of another user in a shared,
    group-writable tree), which a rename would give to this user.  An in-place write is not
    atomic: should it fail half way, the old text is put back; only a crash during it can leave
    a partial file.  Nothing is removed but the temporary file this call made.
    """
    info = os.stat(path)
    if info.st_nlink > 1:
        _write_in_place(path, data)
        return (f"a file with {info.st_nlink} names (hard links): written in place, so that every "
                "name sees the new text")
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".shardcompat-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            kept = _keep_metadata(handle.fileno(), path, info)
            os.fsync(handle.fileno())
        if kept:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if not kept:
        os.unlink(tmp)
        _write_in_place(path, data)
        return (f"owned by uid {info.st_uid} gid {info.st_gid}, which this user cannot give to a "
                "new file: written in place, so that owner and group stay")
    return ""


def _keep_metadata(fd: int, path: str, info: os.stat_result) -> bool:
    """Give the open temporary file ``fd`` the owner, group, mode and extended attributes of
    ``path``; ``False`` when this user may not (the caller then writes ``path`` in place)."""
    try:
        mine = os.fstat(fd)
        if (mine.st_uid, mine.st_gid) != (info.st_uid, info.st_gid):
            os.fchown(fd, info.st_uid, info.st_gid)  # before the mode: chown clears set-id bits
        os.fchmod(fd, stat.S_IMODE(info.st_mode))
        _copy_xattrs(path, fd)
    except PermissionError:
        return False
    except OSError as error:
        if error.errno == errno.EINVAL:  # an owner this user namespace cannot map
            return False
        raise
    return True


def _copy_xattrs(path: str, fd: int) -> None:
    """The extended attributes of ``path`` (POSIX ACLs, SELinux labels, user attributes) onto
    ``fd``; nothing where the platform or file system has none."""
    if not hasattr(os, "listxattr"):
        return
    try:
        names = os.listxattr(path)
    except OSError as error:
        if error.errno in (errno.ENOTSUP, errno.ENODATA, errno.ENOSYS):
            return
        raise
    for name in names:
        try:
            value = os.getxattr(path, name)
            try:
                if os.getxattr(fd, name) == value:
                    continue  # a label the new file got already
            except OSError:
                pass
            os.setxattr(fd, name, value)
        except OSError as error:
            if error.errno in (errno.EPERM, errno.EACCES):
                raise PermissionError(error.errno, error.strerror, path) from error
            if error.errno not in (errno.ENOTSUP, errno.ENODATA):
                raise


def _write_in_place(path: str, data: bytes) -> None:
    """Overwrite ``path``'s own bytes (same inode: every hard link, the owner and the mode
    stay); put the old text back if the write fails (unbuffered, so that nothing of the new
    text is left in a buffer to be flushed over the old)."""
    fd = os.open(path, os.O_RDWR)
    try:
        with open(fd, "rb", buffering=0, closefd=False) as reader:
            old = reader.read()
        try:
            _write_all(fd, data)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        except BaseException:
            _write_all(fd, old)
            os.ftruncate(fd, len(old))
            raise
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """``data`` from the start of ``fd``, short writes continued."""
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
