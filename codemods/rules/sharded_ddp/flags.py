"""The one place where the legacy ``--sharded_ddp`` rules live.

Every rewriter asks this module what a value means (:func:`meaning`), what it becomes
(:func:`translate`), what to do with a flag in an argv list (:func:`argv_action`) and, for text
that holds command lines (shell scripts, Markdown code, YAML ``run:`` steps, Makefiles,
Dockerfiles, notebook ``!`` lines, Python string literals), which span edits to make
(:func:`rewrite_commands`).

The contract, for a flag not already in the list syntax:

- a *bare* flag (followed by another option, the end of the line, a line continuation, ``;``,
  ``&&``, ``||``, ``|``, ``)`` or a closing quote) becomes ``--sharded_ddp simple``;
- ``true``/``1``/``yes`` (space or ``=`` form) becomes ``simple``;
- ``false``/``0``/``no`` is removed together with the flag;
- list values (``zero_dp_2``, ``"zero_dp_3 offload"``) are left alone;
- with ``to="fsdp"`` everything becomes Transformers' FSDP arguments: ``--fsdp`` with an
  ``--fsdp_config`` JSON (``ShardingOptions.to_hf_fsdp_config()``, the current form), or the
  4.x ``--fsdp`` words (``form="string"``, ``ShardingOptions.to_hf_fsdp()``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ...formats.commands import (
    HSPACE,
    PLACEHOLDER,
    command_segments,
    looks_like_command,
    quiet_command,
    quote_context,
    removal_span,
)
from ...formats.spans import Issue, Rewrite, SpanEdit
from ...run.context import FsdpForm, Target

if TYPE_CHECKING:
    from shardcompat.options import ShardingOptions

__all__ = [
    "FLAG",
    "HINTS",
    "ArgvAction",
    "ArgvStep",
    "Meaning",
    "argv_action",
    "meaning",
    "plan_argv",
    "rewrite_commands",
    "translate",
]

FLAG = "--sharded_ddp"
FSDP_FLAG = "--fsdp"

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})
#: The hint printed with each kind of warning.
HINTS = {
    "unknown-value": "write the value in the list syntax, e.g. 'simple' or 'zero_dp_2'",
    "non-literal": "make sure the value is a list-syntax string ('simple', 'zero_dp_2 offload') "
    "or '' (off), not a bool",
    "fsdp-manual": "translate by hand: --fsdp takes the words, --fsdp_config the settings",
    "comparison": "compare the parsed options instead: bool(shardcompat.parse_options(x.sharded_ddp))",
    "argv-layout": "edit this argv list by hand, as the argv rules say (e.g. add a 'simple' element)",
    "bare-flag": "where it goes on a command line write '--sharded_ddp simple'; where it names the option, "
    "mark the line '# shardcompat: skip'",
    "fsdp-config-exists": "merge the settings into the fsdp_config that is already there",
}
_FLAG_RE = re.compile(r"(?<![\w-])--sharded_ddp(?![\w-])")
_BLANK = re.compile(r"(?:[ \t]|\\\r?\n)*")
_WORD_END = re.compile(r"[\s;&|()`'\"<>]")


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Meaning:
    """What a ``--sharded_ddp`` value means: a legacy boolean, list syntax, or unknown
    (``problem`` then says why, in the grammar's words when the grammar refused it)."""

    kind: Literal["true", "false", "list", "unknown"]
    options: ShardingOptions | None = None
    problem: str = ""


_NOT_LITERAL = "not a literal value this tool understands"


def meaning(value: str | bool | None) -> Meaning:
    """Classify a value as written (``None`` is the bare flag, which means ``true``)."""
    if value is None or value is True:
        return Meaning("true")
    if value is False:
        return Meaning("false")
    word = value.strip()
    if word.lower() in _TRUE:
        return Meaning("true")
    if word.lower() in _FALSE:
        return Meaning("false")
    if PLACEHOLDER in word or word.startswith(("$", "{", "%", "`")):
        return Meaning("unknown", problem=_NOT_LITERAL)
    from shardcompat.options import ShardingOptionsError, parse_options

    try:
        return Meaning("list", parse_options(word))
    except ShardingOptionsError as error:  # "'offload' can't work on its own; it needs ..."
        return Meaning("unknown", problem=str(error).split(" Valid:", 1)[0].rstrip(";. "))


@dataclass(frozen=True)
class Translation:
    """The new value (``None``: leave as is), whether the flag goes away, and a report note.

    With ``--to fsdp`` in the current form, ``value`` is ``"true"`` and ``fsdp_config`` the
    dict Transformers reads its FSDP settings from; ``note`` then says what is not equivalent.
    """

    value: str | None
    drop: bool = False
    rule: str = ""
    note: str = ""
    problem: str = ""
    fsdp_config: dict[str, Any] | None = None


def translate(found: Meaning, to: Target, form: FsdpForm = "config") -> Translation:
    """What a value becomes under the list syntax or Transformers' FSDP arguments: ``fsdp=True``
    with an ``fsdp_config`` dict (``form="config"``, current releases) or the 4.x ``--fsdp``
    words (``form="string"``)."""
    if found.kind == "unknown":
        return Translation(None, rule="unknown-value", problem=found.problem or _NOT_LITERAL)
    if found.kind == "false":
        return Translation("", drop=True, rule="legacy-false")
    if to == "list":
        return Translation("simple", rule="legacy-true") if found.kind == "true" else Translation(None)
    from shardcompat.options import ShardingOptions, Stage

    options = found.options if found.kind == "list" else ShardingOptions(stage=Stage.SIMPLE)
    assert options is not None
    if not options:
        return Translation("", drop=True, rule="to-fsdp")
    if form == "config":
        hf = options.to_hf_fsdp_config()
        return Translation("true", rule="to-fsdp", note="; ".join(hf.caveats), fsdp_config=dict(hf.fsdp_config))
    hf = options.to_hf_fsdp()
    lost = [name for name in ("bucket_cap_mb", "mixed_precision") if getattr(options, name) is not None]
    if hf.fsdp_config or lost or options.backend != "auto":
        return Translation(None, rule="fsdp-manual", problem=(
            f"'{options}' needs settings that --fsdp cannot carry on the command line "
            f"({', '.join(sorted(hf.fsdp_config) + lost) or 'backend='}); move them to --fsdp_config"
        ))
    return Translation(str(hf.fsdp), rule="to-fsdp", note="; ".join(hf.caveats))


def fsdp_json(config: dict[str, Any]) -> str:
    """An ``fsdp_config`` dict as the JSON text Transformers reads from a command line."""
    return json.dumps(config, separators=(", ", ": "))


# --------------------------------------------------------------------------- argv lists


@dataclass(frozen=True)
class ArgvAction:
    """What to do with ``"--sharded_ddp"`` in an argv list.

    ``kind``: ``insert`` new value elements after the flag, ``replace`` the value element (by
    the first of ``values``, the others inserted after it), ``drop`` the flag and its value
    element(s), ``leave`` it, or ``warn`` (left as is).  ``flag`` is the new flag element.
    """

    kind: Literal["insert", "replace", "drop", "leave", "warn"]
    flag: str = FLAG
    values: tuple[str, ...] = ()
    rule: str = ""
    note: str = ""
    problem: str = ""


def _argv_values(plan: Translation) -> tuple[str, ...]:
    """The elements that carry a translated value: the value, or ``--fsdp_config`` and its JSON
    after a bare ``--fsdp``."""
    if plan.fsdp_config is not None:
        return ("--fsdp_config", fsdp_json(plan.fsdp_config))
    assert plan.value is not None
    return (plan.value,)


def argv_action(next_value: str | None, to: Target, *, opaque: bool = False,
                form: FsdpForm = "config") -> ArgvAction:
    """Decide for a flag element followed by ``next_value``.

    ``next_value`` is the next literal element (``None`` when the flag is last); ``opaque``
    means the next element is not a literal (a variable, a call).
    """
    new_flag = FSDP_FLAG if to == "fsdp" else FLAG
    if opaque:
        return ArgvAction("warn", rule="non-literal", problem="the value after the flag is not a literal")
    if next_value is None or next_value.startswith("-"):
        found, insert = Meaning("true"), True
    else:
        found, insert = meaning(next_value), False
    result = translate(found, to, form)
    if result.problem:
        return ArgvAction("warn", rule=result.rule, problem=result.problem)
    if result.drop:
        return ArgvAction("drop", rule="argv-false")
    if result.value is None:
        return ArgvAction("leave")
    kind: Literal["insert", "replace"] = "insert" if insert else "replace"
    rule = "to-fsdp" if to == "fsdp" else f"argv-{kind}"
    return ArgvAction(kind, new_flag, _argv_values(result), rule, result.note)


# --------------------------------------------------------------------------- command text


def rewrite_commands(
    text: str,
    start: int = 0,
    end: int | None = None,
    *,
    to: Target = "list",
    quote: str = '"',
    prose_guard: bool = False,
    local_scripts: frozenset[str] = frozenset(),
    form: FsdpForm = "config",
    split_words: bool = False,
) -> Rewrite:
    """Span edits for every legacy ``--sharded_ddp`` in the shell text ``text[start:end]``.

    ``quote`` is used when a new multi-word value needs quoting; ``prose_guard`` keeps only
    segments that look like command lines (for string literals and inline code);
    ``local_scripts`` are script names whose own ``--sharded_ddp`` is a local boolean: edits
    in commands that run them are held back for review; ``form`` is the FSDP form of
    ``to="fsdp"``; ``split_words``: the text is split on whitespace, not by a shell (a Python
    ``"...".split()``), so an ``fsdp_config`` JSON is written compact and unquoted.
    """
    stop = len(text) if end is None else end
    result = Rewrite()
    if FLAG not in text[start:stop]:
        return result
    for a, b in command_segments(text, start, stop):
        segment = text[a:b]
        if FLAG not in segment or quiet_command(segment) or (prose_guard and not looks_like_command(segment)):
            continue
        found = _rewrite_segment(text, a, b, to, quote, form, split_words)
        if local_scripts and any(name in segment for name in local_scripts):
            found.review, found.edits = found.edits, []
        result.extend(found)
    return result


def _value_at(text: str, pos: int, stop: int) -> tuple[int, int, int] | None:
    """A value starting at ``pos``: ``(inner_start, inner_end, outer_end)`` or None."""
    if pos >= stop:
        return None
    c = text[pos]
    if c in "'\"":
        close = pos + 1
        while close < stop and text[close] != c and text[close] != "\n":
            close += 2 if text[close] == "\\" and c == '"' else 1
        if close >= stop or text[close] != c:
            return None
        return pos + 1, close, close + 1
    match = _WORD_END.search(text, pos, stop)
    word_end = match.start() if match else stop
    return (pos, word_end, word_end) if word_end > pos else None


def _find_value(text: str, fe: int, b: int) -> tuple[int, int, int, int] | None:
    """The value after a flag ending at ``fe``: ``(pos, inner_start, inner_end, outer_end)``.

    ``None`` means the flag is bare: followed by an option, the end of the line, a
    continuation, a separator, a redirection or a closing quote.
    """
    if fe < b and text[fe] == "=":
        value = _value_at(text, fe + 1, b)
        return None if value is None else (fe + 1, *value)
    pos = _BLANK.match(text, fe, b).end()  # type: ignore[union-attr]
    if pos == fe or pos >= b or text[pos] == "-":
        return None
    value = _value_at(text, pos, b)
    if value is None:
        return None
    inner = text[value[0]:value[1]]
    if inner in ("$@", "$*"):
        return None  # "$@": the script's own arguments follow
    if text[pos] in "'\"" and "--" in inner:
        return None  # that quote closes the command; it does not open a value
    if value[2] < b and text[value[2]] in "<>":
        return None  # "2>log": a redirection
    return (pos, *value)


def _shell_json(config: dict[str, Any], context: str) -> str:
    """``fsdp_config`` JSON as one shell word, quoted to survive where it is written."""
    text = fsdp_json(config)
    if context == "'":  # inside '...': the inner shell reads a double-quoted word
        return '"' + text.replace('"', '\\"') + '"'
    if context == '"':  # inside "...": single quotes are literal, double quotes escaped
        return "'" + text.replace('"', '\\"') + "'"
    return "'" + text + "'"


def _rewrite_segment(text: str, a: int, b: int, to: Target, quote: str, form: FsdpForm,
                     split_words: bool) -> Rewrite:
    result = Rewrite()
    new_flag = FSDP_FLAG if to == "fsdp" else FLAG
    for match in _FLAG_RE.finditer(text, a, b):
        fs, fe = match.span()
        value = _find_value(text, fe, b)
        if value is None and fe < b and text[fe] == "=":
            continue  # "--sharded_ddp=" with nothing after it: leave it
        raw: str | None = None
        pos, vs, ve, vend = fe, fe, fe, fe
        quoted = False
        if value is not None:
            pos, vs, ve, vend = value
            quoted = vs > pos
            if to == "fsdp" and not quoted and text[pos - 1] != "=":
                vend = ve = _extend_words(text, ve, b)
            raw = text[vs:ve]
        plan = translate(meaning(raw), to, form)
        if plan.problem:
            result.issues.append(Issue(fs, plan.rule, f"--sharded_ddp {raw}: {plan.problem}",
                                       HINTS[plan.rule]))
        elif plan.drop:
            start, stop = removal_span(text, fs, vend, a, b)
            result.edits.append(SpanEdit(start, stop, "", "flag-false"))
        elif plan.fsdp_config is not None:
            config = (json.dumps(plan.fsdp_config, separators=(",", ":")) if split_words
                      else _shell_json(plan.fsdp_config, quote_context(text, a, fs)))
            result.edits.append(SpanEdit(fs, fe if value is None else vend,
                                         f"{new_flag} --fsdp_config {config}", "to-fsdp", plan.note))
        elif plan.value is not None:
            new_value = plan.value
            if " " in new_value and not quoted:
                new_value = f"{quote}{new_value}{quote}"
            if value is None:
                rule = "to-fsdp" if to == "fsdp" else "flag-bare"
                result.edits.append(SpanEdit(fs, fe, f"{new_flag} {new_value}", rule, plan.note))
            else:
                rule = "to-fsdp" if to == "fsdp" else "flag-true"
                new = new_flag + text[fe:vs] + new_value
                result.edits.append(SpanEdit(fs, ve, new, rule, plan.note))
    return result


def _extend_words(text: str, end: int, stop: int) -> int:
    """Take the following words too while they are list-syntax words (``zero_dp_2 offload``)."""
    while True:
        pos = HSPACE.match(text, end, stop).end()  # type: ignore[union-attr]
        value = _value_at(text, pos, stop) if pos > end else None
        if value is None or text[pos] in "'\"-" or not _is_list_word(text[value[0]:value[1]]):
            return end
        end = value[1]


def _is_list_word(word: str) -> bool:
    from shardcompat.options import TOKENS, TUNABLES

    key = word.split("=", 1)[0].lower().replace("-", "_")
    return key in (TUNABLES if "=" in word else TOKENS)


@dataclass(frozen=True)
class ArgvStep:
    """One change to an argv list, by element index.

    ``set`` maps indices to new element values, ``insert_after`` adds ``(index, values)``
    elements, ``drop`` removes indices; ``problem`` (with ``rule``) means: leave it, warn.
    """

    index: int
    rule: str
    set: dict[int, str] = field(default_factory=dict)
    insert_after: tuple[int, tuple[str, ...]] | None = None
    drop: tuple[int, ...] = ()
    note: str = ""
    problem: str = ""


def plan_argv(items: list[str | None], to: Target, form: FsdpForm = "config") -> list[ArgvStep]:
    """The steps for a list of argv elements (``None`` marks a non-literal element)."""
    steps: list[ArgvStep] = []
    for i, item in enumerate(items):
        if item == FLAG:
            nxt = items[i + 1] if i + 1 < len(items) else ""
            action = argv_action(nxt or None, to, opaque=nxt is None, form=form)
            if action.kind == "warn":
                steps.append(ArgvStep(i, action.rule, problem=action.problem))
            elif action.kind == "drop":
                steps.append(ArgvStep(i, action.rule, drop=(i, i + 1)))
            elif action.kind in ("insert", "replace"):
                changed = {i: action.flag} if action.flag != FLAG else {}
                first, *more = action.values
                if action.kind == "insert":
                    steps.append(ArgvStep(i, action.rule, changed, (i, action.values), note=action.note))
                else:
                    steps.append(ArgvStep(i, action.rule, {**changed, i + 1: first},
                                          (i + 1, tuple(more)) if more else None, note=action.note))
        elif item is not None and item.startswith(FLAG + "="):
            plan = translate(meaning(item[len(FLAG) + 1:]), to, form)
            new_flag = FSDP_FLAG if to == "fsdp" else FLAG
            if plan.problem:
                steps.append(ArgvStep(i, plan.rule, problem=plan.problem))
            elif plan.drop:
                steps.append(ArgvStep(i, "argv-false", drop=(i,)))
            elif plan.fsdp_config is not None:
                steps.append(ArgvStep(i, "to-fsdp", {i: new_flag}, (i, _argv_values(plan)), note=plan.note))
            elif plan.value is not None:
                rule = "to-fsdp" if to == "fsdp" else "argv-replace"
                steps.append(ArgvStep(i, rule, {i: f"{new_flag}={plan.value}"}, note=plan.note))
    return steps
