"""Atomic writes: a temporary file in the same folder, the old permissions, then a rename."""

from __future__ import annotations

import os
import stat
import tempfile

__all__ = ["atomic_write"]


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
