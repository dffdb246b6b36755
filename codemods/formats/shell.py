"""Shell scripts, Makefiles and Dockerfiles: every command line by the flag rules.

Each rewriter takes the decoded text and returns a :class:`~codemods.formats.spans.Rewrite` of span
edits; nothing is re-serialised.
"""

from __future__ import annotations

import re

from ..rules.sharded_ddp.flags import FLAG, rewrite_commands
from ..run.context import Settings
from . import jsonspan
from .argv import argv_rewrite
from .spans import Rewrite, gaps

__all__ = ["commands", "rewrite_dockerfile", "rewrite_shell"]


def commands(text: str, start: int, end: int, settings: Settings, prose_guard: bool = False) -> Rewrite:
    """The flag rules over the command lines in ``text[start:end]``, with the run's settings
    (the ``--sharded_ddp`` table, and the Transformers-legacy one when asked for)."""
    result = Rewrite()
    if settings.legacy:
        result = rewrite_commands(text, start, end, to=settings.to, local_scripts=settings.local_scripts,
                                  prose_guard=prose_guard, form=settings.fsdp_form)
    if settings.transformers_legacy:
        from ..rules.transformers_legacy.flags import rewrite_flags

        result.extend(rewrite_flags(text, start, end, prose_guard=prose_guard))
    return result


def rewrite_shell(text: str, settings: Settings) -> Rewrite:
    """Shell scripts and Makefiles: every command line in the file."""
    return commands(text, 0, len(text), settings)


_EXEC_FORM = re.compile(r"^[ \t]*(?:RUN|CMD|ENTRYPOINT)[ \t]+(?=\[)", re.M | re.I)


def _array_at(text: str, start: int) -> jsonspan.JArray | None:
    """A JSON-style array starting at ``start`` (an exec-form instruction)."""
    try:
        node, _ = jsonspan.parse_at(text, start)
    except jsonspan.JSONSpanError:
        return None
    return node if isinstance(node, jsonspan.JArray) else None


def rewrite_dockerfile(text: str, settings: Settings) -> Rewrite:
    """Shell-form instructions by the shell rules, exec-form ``["..."]`` by the argv rules."""
    result = Rewrite()
    taken: list[tuple[int, int]] = []
    for match in _EXEC_FORM.finditer(text):
        array = _array_at(text, match.end())
        if array is not None and FLAG in text[array.start:array.end]:
            result.extend(argv_rewrite(text, array, settings))
            taken.append((array.start, array.end))
    for a, b in gaps(text, taken):
        result.extend(commands(text, a, b, settings))
    return result
