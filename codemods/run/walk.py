"""Git-aware file discovery with the always-skipped folders and ``--exclude`` globs."""

from __future__ import annotations

import fnmatch
import os
import subprocess
from collections.abc import Iterable, Iterator, Sequence

__all__ = ["ALWAYS_SKIP", "git_toplevel", "is_skipped_dir", "iter_files", "project_root"]

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


def _git_files(top: str, folder: str) -> list[str] | None:
    try:
        done = subprocess.run(
            ["git", "-C", top, "ls-files", "-z", "--cached", "--others", "--exclude-standard",
             "--", os.path.relpath(folder, top)],
            capture_output=True, check=False,
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    names = [n for n in done.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
    return [os.path.join(top, n) for n in dict.fromkeys(names)]


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


def _os_walk(folder: str) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not is_skipped_dir(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            yield os.path.join(dirpath, name)


def iter_files(paths: Iterable[str], excludes: Sequence[str] = ()) -> Iterator[tuple[str, str]]:
    """Yield ``(root, file)`` for every file under ``paths``.

    ``root`` is the git top level when the path is inside a work tree, else the path itself
    (its folder for a single file); it is where scope evidence is gathered.  A file given
    explicitly is yielded even if git ignores it, unless an exclude glob matches it.
    """
    seen: set[str] = set()
    cache: dict[str, bool] = {}
    for given in paths:
        path = os.path.realpath(given)
        top = git_toplevel(path)
        listed: list[str] | None = None
        if os.path.isfile(path):
            root = top or project_root(path) or os.path.dirname(path)
            candidates: Iterable[str] = [path]
        else:
            root = top or project_root(path) or path
            listed = _git_files(top, path) if top else None
            candidates = sorted(listed) if listed is not None else _os_walk(path)
        for file in candidates:
            rel = os.path.relpath(file, root).replace(os.sep, "/")
            if file in seen or (excludes and _excluded(rel, excludes)):
                continue
            # git lists deleted files and does not know about virtualenvs it was not told of
            if listed is not None and (
                not os.path.isfile(file) or _has_skipped_part(rel, root, cache)
            ):
                continue
            seen.add(file)
            yield root, file
