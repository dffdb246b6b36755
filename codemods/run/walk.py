"""Git-aware file discovery with the always-skipped folders and ``--exclude`` globs.

Nothing unreadable is passed over in silence: a folder that cannot be listed, a file whose
folder cannot be searched and a path given that cannot be looked up are handed to the
``unreadable`` callback of :func:`iter_files` by name with the reason, so that a ``--check``
gate cannot pass on a tree it did not see (the run reports them as errors, exit 2).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence

__all__ = ["ALWAYS_SKIP", "Unreadable", "git_toplevel", "is_skipped_dir", "iter_files", "project_root",
           "why_unreadable"]

#: ``unreadable(path, reason)``: told about each file or folder under the paths given that
#: could not be read or listed (the reason says why and what to do).
Unreadable = Callable[[str, str], None]

#: Folder names never walked into, whatever git says.
ALWAYS_SKIP = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "node_modules", "__pycache__",
    "site-packages", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints",
    ".eggs", ".hypothesis",
})


def is_skipped_dir(path: str) -> bool:
    """True for the always-skipped names and for any virtualenv (a folder with ``pyvenv.cfg``)."""
    return os.path.basename(path) in ALWAYS_SKIP or os.path.isfile(os.path.join(path, "pyvenv.cfg"))


def git_toplevel(path: str) -> str | None:
    """The work tree holding ``path``, or ``None`` outside git (or without git installed)."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        done = subprocess.run(
            ["git", "-C", folder, "rev-parse", "--show-toplevel"],
            capture_output=True, text=True, check=False,
        )
    except OSError:
        return None
    top = done.stdout.strip()
    return os.path.realpath(top) if done.returncode == 0 and top else None


_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", ".git")


def project_root(path: str, levels: int = 8) -> str | None:
    """Outside git: the nearest folder at or above ``path`` that looks like a project root."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    for _ in range(levels):
        if any(os.path.exists(os.path.join(folder, m)) for m in _PROJECT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None


def why_unreadable(error: OSError, what: str = "file") -> str:
    """The reason a file or folder (``what``) could not be read, and what to do about it."""
    if error.errno in (errno.EACCES, errno.EPERM):
        if what == "path":
            denied = "this user may not look it up (a folder above it is not searchable)"
        else:
            denied = f"this user may not read the {what}"
        lost = "the files in it were not scanned" if what == "folder" else "it was not scanned"
        return f"permission denied: {denied}; {lost} (run as a user who may read it, or --exclude it)"
    return f"cannot read the {what}: {error.strerror or error}"


#: git's warning for a folder it could not list (messages in the C locale, see ``_git_files``).
_GIT_UNOPENED = re.compile(r"^warning: could not open directory '(.*)': (.*)$", re.MULTILINE)


def _git_files(top: str, folder: str) -> tuple[list[str], list[tuple[str, str]]] | None:
    """The files git lists under ``folder`` (tracked and untracked, not ignored) and the folders
    it could not open ``(path, strerror)``; ``None`` when git cannot list them."""
    try:
        done = subprocess.run(
            ["git", "-C", top, "ls-files", "-z", "--cached", "--others", "--exclude-standard",
             "--", os.path.relpath(folder, top)],
            capture_output=True, check=False, env={**os.environ, "LC_ALL": "C"},
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    names = [n for n in done.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
    warned = done.stderr.decode("utf-8", "surrogateescape")
    unopened = [(os.path.join(top, m[1].rstrip("/")), m[2]) for m in _GIT_UNOPENED.finditer(warned)]
    return [os.path.join(top, n) for n in dict.fromkeys(names)], unopened


def _excluded(rel: str, excludes: Sequence[str]) -> bool:
    parts = rel.split("/")
    return any(
        fnmatch.fnmatch(rel, glob) or any(fnmatch.fnmatch(p, glob) for p in parts)
        for glob in excludes
    )


def _has_skipped_part(rel: str, root: str, cache: dict[str, bool]) -> bool:
    current = root
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        if current not in cache:
            cache[current] = is_skipped_dir(current)
        if cache[current]:
            return True
    return False


def _os_walk(folder: str, unopened: Callable[[OSError], None]) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(folder, onerror=unopened):
        dirnames[:] = sorted(d for d in dirnames if not is_skipped_dir(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            yield os.path.join(dirpath, name)


def _ignore(path: str, reason: str) -> None:
    pass


def iter_files(paths: Iterable[str], excludes: Sequence[str] = (),
               unreadable: Unreadable = _ignore) -> Iterator[tuple[str, str]]:
    """Yield ``(root, file)`` for every file under ``paths``.

    ``root`` is the git top level when the path is inside a work tree, else the path itself
    (its folder for a single file); it is where scope evidence is gathered.  A file given
    explicitly is yielded even if git ignores it, unless an exclude glob matches it.

    ``unreadable(path, reason)`` hears of each path given that cannot be looked up, each folder
    under them that cannot be listed (by os.walk or git) and each file git lists that cannot be
    looked up (its folder may not be searched), unless excluded or in an always-skipped folder.
    A file that is yielded but cannot be opened is the caller's to report.
    """
    seen: set[str] = set()
    cache: dict[str, bool] = {}
    for given in paths:
        try:
            os.stat(given)
        except (FileNotFoundError, NotADirectoryError):
            pass  # an empty walk, as before (the CLI refuses a missing path up front)
        except OSError as error:
            unreadable(given, why_unreadable(error, "path"))
            continue
        yield from _files(os.path.realpath(given), excludes, unreadable, seen, cache)


def _files(path: str, excludes: Sequence[str], unreadable: Unreadable, seen: set[str],
           cache: dict[str, bool]) -> Iterator[tuple[str, str]]:
    top = git_toplevel(path)
    listed = False
    reported: list[str] = []
    if os.path.isfile(path):
        root = top or project_root(path) or os.path.dirname(path)
    else:
        root = top or project_root(path) or path

    def report(name: str, reason: str, folder: bool) -> None:
        rel = os.path.relpath(name, root).replace(os.sep, "/")
        if excludes and (_excluded(rel, excludes) or (folder and _excluded(rel + "/", excludes))):
            return
        if (folder and is_skipped_dir(name)) or _has_skipped_part(rel, root, cache):
            return
        if any(name == r or name.startswith(r + os.sep) for r in reported):
            return  # the folder it is in was reported already
        reported.append(name)
        unreadable(name, reason)

    def unopened(error: OSError) -> None:
        report(error.filename or path, why_unreadable(error, "folder"), True)

    candidates: Iterable[str]
    if os.path.isfile(path):
        candidates = [path]
    else:
        found = _git_files(top, path) if top else None
        if found is None:
            candidates = _os_walk(path, unopened)
        else:
            listed = True
            names, folders = found
            for name, strerror in folders:
                code = errno.EACCES if "denied" in strerror.lower() else errno.EIO
                unopened(OSError(code, strerror, name))
            candidates = sorted(names)
    for file in candidates:
        rel = os.path.relpath(file, root).replace(os.sep, "/")
        if file in seen or (excludes and _excluded(rel, excludes)):
            continue
        # git lists deleted files and does not know about virtualenvs it was not told of
        if listed:
            if _has_skipped_part(rel, root, cache):
                continue
            try:
                mode = os.stat(file).st_mode
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as error:  # a tracked file in a folder this user may not search
                report(file, why_unreadable(error), False)
                continue
            if not stat.S_ISREG(mode):
                continue
        seen.add(file)
        yield root, file
