"""Command lines inside text: where each simple command is, whether it is one, and its spans.

Shell scripts, Markdown code, YAML ``run:`` steps, Makefiles, Dockerfiles, notebook ``!``
lines and Python strings all hold command lines.  Every table's command-line rule (``--sharded_ddp``,
the Transformers legacy flags) finds them the same way here: :func:`command_segments` splits
shell text into simple commands, :func:`looks_like_command` tells a command from prose,
:func:`quiet_command` one that only prints, :func:`quote_context` the quote a spot sits in,
and :func:`removal_span` what to delete for a dropped flag so no blank or dangling ``\\`` stays.
"""

from __future__ import annotations

import re

__all__ = [
    "HSPACE",
    "PLACEHOLDER",
    "command_segments",
    "looks_like_command",
    "quiet_command",
    "quote_context",
    "removal_span",
]

#: Stands for an f-string expression or other opaque text inside a span; never a value.
PLACEHOLDER = "\ue000"
HSPACE = re.compile(r"[ \t]*")

_QUIET_COMMANDS = frozenset({"echo", "printf", "print", "log", "logger", "cat", "grep", "sed",
                             "awk", ":", "#"})
_LAUNCHERS = frozenset({"python", "python3", "torchrun", "accelerate", "deepspeed", "bash", "sh",
                        "zsh", "srun", "mpirun", "horovodrun", "env", "nohup", "time", "exec",
                        "sudo", "uv", "poetry", "conda", "pipenv", "$", "%run", "run",
                        "launch", "trainer", "mpiexec", "sbatch"})


def command_segments(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Split shell text into simple commands, dropping comments.

    Quotes and backslash escapes are respected; ``\\`` + newline continues a command; ``;``,
    ``&``, ``|``, ``(``, ``)``, backticks and newlines separate commands.
    """
    stop = len(text) if end is None else end
    segments: list[tuple[int, int]] = []
    seg = i = start
    quote = ""
    while i < stop:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == seg or text[i - 1] in " \t"):
            segments.append((seg, i))
            newline = text.find("\n", i, stop)
            i = seg = stop if newline < 0 else newline + 1
            continue
        elif c in "\n;&|()`":
            segments.append((seg, i))
            seg = i + 1
        i += 1
    segments.append((seg, stop))
    return [(a, b) for a, b in segments if text[a:b].strip()]


def _words(segment: str) -> list[str]:
    return segment.replace("\\\n", " ").split()


def _first_word(segment: str) -> str:
    for word in _words(segment):
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word):  # skip VAR=value prefixes
            return word.lstrip("!@")
    return ""


def looks_like_command(segment: str) -> bool:
    """A command line rather than prose: starts with an option, a launcher or a script path."""
    word = _first_word(segment)
    if not word:
        return False
    name = word.rsplit("/", 1)[-1]
    return (
        word.startswith(("-", "$", PLACEHOLDER))  # an option, or "$PYTHON"/"{python}" running something
        or name in _LAUNCHERS
        or re.match(r"^python[0-9.]*$", name) is not None
        or name.endswith((".py", ".sh"))
        or "/" in word
    )


def quiet_command(segment: str) -> bool:
    """A command that only prints or searches text (``echo``, ``grep``...): its flags are not options."""
    return _first_word(segment) in _QUIET_COMMANDS


def quote_context(text: str, a: int, pos: int) -> str:
    """The shell quote ``text[pos]`` sits inside (``'``, ``"`` or ``""``), from ``a`` on."""
    quote = ""
    i = a
    while i < pos:
        c = text[i]
        if c == "\\" and quote != "'":
            i += 1
        elif quote and c == quote:
            quote = ""
        elif not quote and c in "'\"":
            quote = c
        i += 1
    return quote


_CONTINUATION = re.compile(r"\\\r?\n")
_CONTINUED_BEFORE = re.compile(r"[ \t]*\\\r?\n\Z")


def removal_span(text: str, fs: int, vend: int, a: int, b: int) -> tuple[int, int]:
    """The span to delete for a false flag: the flag, its value and the blank joining them."""
    line_start = max(text.rfind("\n", 0, fs) + 1, a)
    alone = not text[line_start:fs].strip()
    after = HSPACE.match(text, vend, b).end()  # type: ignore[union-attr]
    continued = _CONTINUATION.match(text, after)
    if alone and continued:
        return line_start, continued.end()  # a whole "    --sharded_ddp false \" line
    back = len(text[:fs].rstrip(" \t"))
    back = max(back, a)
    if alone and back == line_start:
        before = _CONTINUED_BEFORE.search(text, a, back)
        if before:
            back = before.start()  # the last line of a continued command
    if back < fs:
        return back, vend
    return fs, after
