"""Applying a rewrite: only to a file the user lets us write, never through a link out of the
tree, atomically (a temporary file in the same folder, the old permissions, then a rename).

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

import os
import stat
import tempfile
from collections.abc import Collection

__all__ = ["atomic_write", "unwritable", "where_to_write"]

_ANY_WRITE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def unwritable(path: str) -> str | None:
    """Why ``path`` may not be rewritten in place, or ``None`` when it may."""
    mode = os.stat(path).st_mode
    if not mode & _ANY_WRITE or not os.access(path, os.W_OK):
        return (f"read-only file (mode {stat.S_IMODE(mode):04o}): not changed; make it writable "
                "(chmod u+w) to migrate it")
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


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never half of one."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".shardcompat-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
