"""Running ``shardcompat-migrate`` as a user who is not root, as CI gates and developers do.

The machines that run this suite run as root, who reads every file whatever its mode, so a
``chmod 000`` proves nothing there: the CLI is run in a subprocess under an unprivileged uid
and gid (65534, ``nobody``), through ``setpriv`` when it is installed or a ``preexec_fn`` that
calls ``os.setgid``/``os.setuid`` otherwise.  Run as another user already, the CLI runs as it
is.  Trees are made under a world-searchable folder of ``/tmp`` (pytest's own ``tmp_path`` is
mode 0700 and so closed to that user).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _dropper() -> tuple[list[str], Callable[[], None] | None] | None:
    """``(command prefix, preexec_fn)`` that runs a command as uid/gid 65534, or ``None``."""
    if os.geteuid() != 0:
        return [], None
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"], None
    if hasattr(os, "setuid"):
        def drop() -> None:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)

        return [], drop
    return None


@functools.cache
def _check_dropper() -> tuple[list[str], Callable[[], None] | None]:
    found = _dropper()
    if found is None:
        pytest.skip("running as root with no way to drop privileges (no setpriv, no os.setuid): "
                    "root reads every file, so unreadable files cannot be made here")
    prefix, preexec = found
    done = subprocess.run([*prefix, sys.executable, "-c", "import os; print(os.geteuid())"],
                          capture_output=True, text=True, preexec_fn=preexec, check=False)
    if done.returncode != 0 or (os.geteuid() == 0 and done.stdout.strip() != str(NOBODY)):
        pytest.skip(f"could not run a process as uid {NOBODY} ({done.stderr.strip() or done.stdout.strip()}): "
                    "root reads every file, so unreadable files cannot be made here")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([*prefix, sys.executable, "-c", "import codemods.cli"], capture_output=True, text=True,
                          env=env, cwd="/", preexec_fn=preexec, check=False)
    if done.returncode != 0:
        pytest.skip(f"uid {NOBODY} cannot import codemods from {REPO} with {sys.executable} "
                    f"({done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}): a folder "
                    "above the checkout or its environment is closed to that user (e.g. a `mktemp -d` clone); "
                    "clone into a world-readable folder to run these tests")
    return prefix, preexec


def as_user() -> bool:
    """Whether the CLI runs as another user than this process (root here)."""
    return os.geteuid() == 0


def migrate(args: Sequence[str], cwd: Path, extra_env: dict[str, str] | None = None,
            preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m codemods ARGS`` as the unprivileged user, from ``cwd``."""
    prefix, drop = _check_dropper()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(cwd), "PYTHONDONTWRITEBYTECODE": "1",
           "GIT_CONFIG_NOSYSTEM": "1", **(extra_env or {})}

    def before() -> None:
        if preexec is not None:
            preexec()
        if drop is not None:
            drop()

    return subprocess.run([*prefix, sys.executable, "-m", "codemods", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False,
                          preexec_fn=before if (drop or preexec) else None)


def give(path: Path) -> None:
    """Give ``path`` and everything in it to the unprivileged user (when running as root)."""
    if not as_user():
        return
    os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    for item in path.rglob("*"):
        os.chown(item, NOBODY, NOBODY, follow_symlinks=False)


@contextlib.contextmanager
def world_folder() -> Iterator[Path]:
    """A fresh folder under /tmp that the unprivileged user may search; removed afterwards,
    whatever modes the test left in it."""
    base = Path(tempfile.mkdtemp(prefix="shardcompat-migrate-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        base.chmod(0o755)
        for folder, dirs, _ in os.walk(base):  # top-down: open each folder before it is listed
            for name in dirs:
                inner = os.path.join(folder, name)
                if not os.path.islink(inner):
                    os.chmod(inner, 0o755)
        shutil.rmtree(base)
