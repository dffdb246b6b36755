"""The legacy ``TrainingArguments`` flags on command lines (shell scripts, Makefiles, Markdown and
RST code blocks, notebook ``!`` lines), by the plans of :mod:`.plans`.

Command lines are found by the reader every table's command-line rule shares
(:mod:`codemods.formats.commands`), so quoting, continuations and comments are read as for
``--sharded_ddp``.  A flag is read as 4.x's ``HfArgumentParser`` read it: a boolean
field takes an optional ``true``/``false`` word (bare means true), any other field the next word.
``--evaluation_strategy steps`` becomes ``--eval_strategy steps``; ``--adafactor`` becomes
``--optim adafactor``; a no-op (``--fp16_backend auto``) goes with its value; a value that is a
shell variable, or a row the table refuses, is reported.
"""

from __future__ import annotations

import re
from typing import Any

from shardcompat.transformers.legacy_table import FIELDS, Kind, LegacyName

from ...formats.commands import (
    command_segments,
    looks_like_command,
    quiet_command,
    quote_context,
    removal_span,
)
from ...formats.spans import Issue, Rewrite, SpanEdit
from . import UNMIGRATED
from .plans import NOT_LITERAL, Plan, plan_field, rows_named

__all__ = ["rewrite_flags"]

_FIELDS = sorted({r.name for r in FIELDS}, key=len, reverse=True)
_FLAG = re.compile(r"(?<![\w-])--(" + "|".join(_FIELDS) + r")(?![\w-])")
_BOOLS = {"true": True, "yes": True, "1": True, "t": True, "y": True,
          "false": False, "no": False, "0": False, "f": False, "n": False}
_WORD = re.compile(r"""[ \t]+(?:\\\r?\n[ \t]*)*("[^"\n]*"|'[^'\n]*'|[^\s;&|()`'"<>]+)""")


def _value(row: LegacyName, word: str) -> Any:
    """The value 4.x parsed from ``word`` (:data:`NOT_LITERAL` for a variable or an unreadable word)."""
    if "$" in word or "`" in word:
        return NOT_LITERAL
    text = word[1:-1] if word[:1] in "'\"" and word[-1:] == word[:1] and len(word) > 1 else word
    if row.type is bool:
        return _BOOLS.get(text.lower(), NOT_LITERAL)
    try:
        if row.type is int or "int" in str(row.type):
            return int(text)
        if row.type is float:
            return float(text)
    except ValueError:
        return NOT_LITERAL
    return text


def _written(value: Any, context: str) -> str | None:
    """``value`` as command-line words, or None when it cannot be written here safely."""
    if isinstance(value, list) and all(isinstance(v, str) and v.isidentifier() for v in value):
        return " ".join(value)
    if isinstance(value, dict):
        import json

        if context:
            return None  # JSON inside a quoted command: write it by hand
        return "'" + json.dumps(value) + "'"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    if isinstance(value, str) and re.fullmatch(r"[\w./:-]+", value):
        return value
    return None


def rewrite_flags(text: str, start: int = 0, end: int | None = None, *, prose_guard: bool = False) -> Rewrite:
    """Span edits for every legacy ``TrainingArguments`` flag in the shell text ``text[start:end]``."""
    stop = len(text) if end is None else end
    result = Rewrite()
    if not _FLAG.search(text, start, stop):
        return result
    for a, b in command_segments(text, start, stop):
        segment = text[a:b]
        if not _FLAG.search(segment) or quiet_command(segment) or (prose_guard and not looks_like_command(segment)):
            continue
        for match in _FLAG.finditer(text, a, b):
            result.extend(_one(text, match, a, b))
    return result


def _one(text: str, match: re.Match[str], a: int, b: int) -> Rewrite:
    row = rows_named(match.group(1), Kind.FIELD)
    assert row is not None
    fs, fe = match.span()
    vend, word = fe, None
    if fe < b and text[fe] == "=":
        found = re.match(r"=(\"[^\"\n]*\"|'[^'\n]*'|[^\s;&|()`'\"<>]*)", text[fe:b])
        assert found is not None
        vend, word = fe + found.end(), found.group(1)
    else:
        found = _WORD.match(text, fe, b)
        if found and not found.group(1).startswith("-"):
            candidate = found.group(1)
            # a boolean takes the word only when it is a boolean (or a variable that may hold one)
            if row.type is not bool or candidate.strip("'\"").lower() in _BOOLS or "$" in candidate:
                vend, word = found.end(), candidate
    value: Any = True if word is None and row.type is bool else (NOT_LITERAL if word is None else _value(row, word))
    plan = plan_field(row, value)
    if plan.action == "set":
        new_value = _written(plan.value, quote_context(text, a, fs))
        if new_value is None:
            plan = Plan("report", message=f"{row.name}: becomes {plan.name}={plan.value!r}, which this command "
                        "line cannot carry as written", hint=f"write {row.replacement}")
    out = Rewrite()
    if plan.action == "report":
        out.issues.append(Issue(fs, UNMIGRATED, f"{text[fs:vend]}: {plan.message}; left as is", plan.hint))
    elif plan.action == "rename":
        out.edits.append(SpanEdit(fs, fe, f"--{plan.name}", "transformers-legacy-flag", plan.note))
    elif plan.action == "drop":
        begin, finish = _span_to_drop(text, fs, vend, a, b)
        out.edits.append(SpanEdit(begin, finish, "", "transformers-legacy-flag", plan.note))
    else:
        out.edits.append(SpanEdit(fs, vend, f"--{plan.name} {new_value}", "transformers-legacy-flag", plan.note))
    return out


def _span_to_drop(text: str, fs: int, vend: int, a: int, b: int) -> tuple[int, int]:
    """The flag, its value and the blank after it; a flag that starts a continued line with more
    options after it keeps the line (the ``--sharded_ddp`` removal joins it to the line above,
    which is right only for the last line of a command)."""
    line_start = max(text.rfind("\n", 0, fs) + 1, a)
    after = vend
    while after < b and text[after] in " \t":
        after += 1
    if not text[line_start:fs].strip() and after < b and text[after] not in "\\\r\n":
        return fs, after
    return removal_span(text, fs, vend, a, b)
