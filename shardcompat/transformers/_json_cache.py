"""The JSON caches the kept 4.x datasets write beside their data (4.x pickled them, and a pickle
from elsewhere is code): read only when built for the same inputs, written atomically."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any


def key(tokenizer: Any, data_file: str | None, **settings: Any) -> dict[str, Any]:
    """What cached features depend on: the tokenizer (class, name, vocabulary), the data file
    (size and modification time, when it exists) and the builder's ``settings``."""
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    try:
        stat = os.stat(data_file) if data_file else None
    except OSError:
        stat = None
    return {"tokenizer": type(tokenizer).__name__, "name": str(getattr(tokenizer, "name_or_path", "")),
            "vocab": hashlib.sha256(vocab.encode()).hexdigest(),
            "data": None if stat is None else [stat.st_size, stat.st_mtime_ns], **settings}


def read(path: str, built_for: dict[str, Any]) -> Any:
    """The cached value built for ``built_for`` (a :func:`key`), or None (missing, torn, foreign
    or built for other inputs)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data.get("value") if isinstance(data, dict) and data.get("key") == built_for else None


def write(path: str, built_for: dict[str, Any], value: Any) -> None:
    """Atomically (each rank may write it; the last complete one stays); a read-only data folder
    just goes without a cache."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".cached-", dir=os.path.dirname(path) or ".")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": built_for, "value": value}, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """Holds the lock beside ``path`` (4.x's ``FileLock``); without one where the folder is read-only."""
    import filelock

    folder = os.path.dirname(path) or "."
    if os.path.isdir(folder) and not os.access(folder, os.W_OK):  # no lock file, as no cache, can go there
        yield
        return
    lock = filelock.FileLock(path + ".lock")
    try:
        lock.acquire()
    except OSError:
        yield
        return
    try:
        yield
    finally:
        lock.release()


def once(path: str, built_for: dict[str, Any], build: Callable[[], Any], valid: Callable[[Any], bool],
         overwrite: bool = False) -> Any:
    """The ``valid`` value cached at ``path`` for ``built_for``, else ``build()``'s, cached there
    (a ``build()`` of None is not cached).  Under a lock, as 4.x did: with several ranks the first
    builds and the others read what it wrote, so a builder that draws random numbers gives every
    rank the same value."""
    with _locked(path):
        value = None if overwrite else read(path, built_for)
        if value is None or not valid(value):
            value = build()
            if value is not None:
                write(path, built_for, value)
        return value
