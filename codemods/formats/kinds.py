"""File kind detection: by suffix, by name, then by shebang."""

from __future__ import annotations

import os
import re

__all__ = ["KINDS", "detect_kind"]

#: Every kind the migrator understands; ``None`` from :func:`detect_kind` means "not ours".
KINDS = ("python", "notebook", "shell", "makefile", "dockerfile", "yaml", "json", "toml", "ini",
         "markdown", "rst")

_SUFFIXES = {
    ".py": "python",
    ".ipynb": "notebook",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".mk": "makefile",
    ".dockerfile": "dockerfile",
    ".yml": "yaml",
    ".yaml": "yaml",
    ".json": "json",
    ".toml": "toml",
    ".ini": "ini",
    ".cfg": "ini",
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "rst",
}
_NAMES = {"makefile": "makefile", "gnumakefile": "makefile", "dockerfile": "dockerfile",
          "containerfile": "dockerfile"}
_SHEBANG = re.compile(rb"^#![^\n]*?\b(python[0-9.]*|bash|zsh|sh|dash|ksh)\b")


def detect_kind(path: str, head: bytes = b"") -> str | None:
    """The kind of ``path`` (``head`` is the start of its bytes, for shebang files)."""
    name = os.path.basename(path)
    lower = name.lower()
    suffix = os.path.splitext(lower)[1]
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if lower in _NAMES:
        return _NAMES[lower]
    if lower.startswith(("dockerfile.", "containerfile.")):
        return "dockerfile"
    if lower.startswith("makefile."):
        return "makefile"
    found = _SHEBANG.match(head.lstrip(b"\xef\xbb\xbf"))
    if found and not suffix:
        return "python" if found.group(1).startswith(b"python") else "shell"
    return None
