"""Markdown and reStructuredText: code blocks by their language, inline code by the one rule
for inline code; prose is never edited."""

from __future__ import annotations

import re
import textwrap

from ..rules.sharded_ddp.flags import FLAG, FSDP_FLAG
from ..run.context import Settings, legacy_names_in
from .python import PythonHook
from .shell import commands
from .spans import Rewrite, SpanEdit, block_end, gaps

__all__ = ["rewrite_markdown", "rewrite_rst"]

KEY = "sharded_ddp"
_SHELL_LANGS = frozenset({"", "bash", "sh", "shell", "console", "zsh", "shell-session",
                          "sh-session", "terminal", "shellsession", "ksh", "bat", "cmd", "none"})
_PYTHON_LANGS = frozenset({"python", "py", "python3", "ipython", "ipython3"})
_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*([^\s`{]*)[^\n]*\n", re.M)


def _code_block(text: str, start: int, end: int, lang: str, settings: Settings,
                python: PythonHook | None, first_line: int) -> Rewrite:
    lang = lang.lower().strip("{}.")
    if lang in _SHELL_LANGS:
        return commands(text, start, end, settings)
    if lang in _PYTHON_LANGS and python is not None:
        block = text[start:end]
        code = textwrap.dedent(block)  # an reST block is indented under its directive
        indent = "" if code == block else _indent_of(block)
        found = python(code, first_line)
        found.edits = [SpanEdit(start + e.start, start + e.end if e.end < len(code) else end,
                                textwrap.indent(e.new, indent) if indent else e.new, e.rule, e.note, e.records)
                       for e in found.edits]
        return found
    return Rewrite()


def _indent_of(block: str) -> str:
    """The indentation every non-blank line of ``block`` shares."""
    lines = [line for line in block.splitlines() if line.strip()]
    first = lines[0][:len(lines[0]) - len(lines[0].lstrip())] if lines else ""
    while first and not all(line.startswith(first) for line in lines):
        first = first[:-1]
    return first


# --------------------------------------------------------------------------- inline code
#
# One rule for inline code in prose (Markdown `code`, RST ``code`` and :obj:`code`), after what
# Transformers' own docs did in PR #10354: inline code is rewritten when it is a command-line
# fragment the reader is told to type, and left when it only names the option.
#
# - a fragment with more than the flag (`python train.py --sharded_ddp`, `--sharded_ddp --fp16`)
#   is typed: rewritten;
# - the bare flag is typed when the words just before it tell the reader to (add, pass, use,
#   run, specify, enable, ... `--sharded_ddp`; "add ``--sharded_ddp`` to the command line");
# - either one only names the option after a negation or a look back (not, without, instead
#   of, replaced, deprecated, legacy, was ...) and in table rows (results tables);
# - the items of one list are decided together: if any item is a fragment or an instruction, or
#   the paragraph that introduces the list tells the reader to use one of them ("re-run adding
#   one of the following:"), every flag in the list is rewritten.

_VERB = re.compile(r"(?i)\b(?:add|adding|pass|passing|use|using|run|running|specify|specifying|enable|"
                   r"enabling|append|appending|activate|activating|launch|launching|try|trying|include|"
                   r"including|supply|set|setting|type|typing)\b")
_NOT = re.compile(r"(?i)\b(?:not|never|without|instead|rather|replaced?|replaces|replacing|deprecated|"
                  r"legacy|old|formerly|previously|was|were|longer)\b|n't\b")
_COMMAND_LINE = re.compile(r"(?i)[ \t]*(?:to|on|in)[ \t\n]+(?:the|your)[ \t\n]+command[- \n]line")
_BOUNDARY = re.compile(r"[.!?;:](?=\s)|\n[ \t]*\n|^[ \t]*(?:[-*+]|\d+[.)])[ \t]+", re.M)
_ITEM = re.compile(r"([ \t]*)([-*+]|\d+[.)])[ \t]+")
_WINDOW = 8  # words before the code that may hold the verb


def _masked(text: str, patterns: tuple[re.Pattern[str], ...]) -> str:
    for pattern in patterns:
        text = pattern.sub(" code ", text)
    return text


def _told(text: str, floor: int, start: int, end: int, patterns: tuple[re.Pattern[str], ...]) -> str:
    """``instruction``, ``mention`` or ``none`` for the words around ``text[start:end]``."""
    before = _masked(text[floor:start], patterns)
    cut = [m.end() for m in _BOUNDARY.finditer(before)]
    before = before[cut[-1]:] if cut else before
    if _NOT.search(before):
        return "mention"
    words = re.findall(r"[\w'-]+", before)[-_WINDOW:]
    if _VERB.search(" ".join(words)) or _COMMAND_LINE.match(text, end):
        return "instruction"
    return "none"


def _row(text: str, pos: int) -> bool:
    line = text[text.rfind("\n", 0, pos) + 1:pos]
    return line.lstrip().startswith(("|", "+"))


def _lines(text: str, a: int, b: int) -> list[tuple[int, int]]:
    out, pos = [], a
    while pos < b:
        newline = text.find("\n", pos, b)
        end = b if newline < 0 else newline + 1
        out.append((pos, end))
        pos = end
    return out


def _lists(text: str, a: int, b: int) -> list[tuple[tuple[int, int], list[tuple[int, int]]]]:
    """The lists in ``text[a:b]``: each as (its lead-in paragraph, its items' spans)."""
    lines = _lines(text, a, b)
    blank = [not text[s:e].strip() for s, e in lines]
    found = []
    i = 0
    while i < len(lines):
        first = _ITEM.match(text, lines[i][0], lines[i][1])
        if not first:
            i += 1
            continue
        indent, ordered = len(first.group(1)), first.group(2)[0].isdigit()
        items: list[tuple[int, int]] = []
        j = i
        while j < len(lines):
            item = _ITEM.match(text, lines[j][0], lines[j][1])
            if not item or len(item.group(1)) != indent or item.group(2)[0].isdigit() != ordered:
                break
            k = j + 1
            while k < len(lines) and not blank[k]:  # the item's lines, lazy continuation included
                deeper = _ITEM.match(text, lines[k][0], lines[k][1])
                if deeper and len(deeper.group(1)) <= indent:
                    break
                k += 1
            n = k
            while n < len(lines) and blank[n]:
                n += 1
            if n < len(lines) and n > k and len(text[lines[n][0]:lines[n][1]]) - len(
                    text[lines[n][0]:lines[n][1]].lstrip(" \t")) > indent \
                    and not _ITEM.match(text, lines[n][0], lines[n][1]):
                k = n  # an indented paragraph after a blank line still belongs to the item
                while k < len(lines) and not blank[k]:
                    k += 1
            items.append((lines[j][0], lines[k - 1][1]))
            j = k
            while j < len(lines) and blank[j]:
                j += 1
        lead = i - 1
        while lead >= 0 and blank[lead]:
            lead -= 1
        top = lead
        while top > 0 and not blank[top - 1] and not _ITEM.match(text, lines[top - 1][0], lines[top - 1][1]):
            top -= 1
        intro = (lines[top][0], lines[lead][1]) if lead >= 0 else (lines[i][0], lines[i][0])
        found.append((intro, items))
        i = max(j, i + 1)
    return found


def _flag_spans(text: str, a: int, b: int, patterns: tuple[re.Pattern[str], ...]) -> list[tuple[int, int]]:
    spans = []
    for pattern in patterns:
        for match in pattern.finditer(text, a, b):
            start, end = match.span("code")
            code = text[start:end].strip()
            if FLAG in code and code != FSDP_FLAG:
                spans.append((start, end))
    return sorted(spans)


def _inline_code(text: str, a: int, b: int, patterns: tuple[re.Pattern[str], ...], settings: Settings) -> Rewrite:
    """The inline code in the prose ``text[a:b]``, by the one rule above."""
    result = Rewrite()
    spans = _flag_spans(text, a, b, patterns)
    if not spans:
        return result
    decided: dict[tuple[int, int], bool] = {}

    def own(span: tuple[int, int]) -> str:
        start, end = span
        told = _told(text, a, start, end, patterns)
        if told == "none" and text[start:end].strip() != FLAG:
            return "instruction"  # a fragment to type, unless words around say otherwise
        return told

    for (intro_start, intro_end), items in _lists(text, a, b):
        inside = [s for s in spans if any(i <= s[0] < e for i, e in items)]
        if not inside:
            continue
        intro = _masked(text[intro_start:intro_end], patterns)
        last = re.split(r"[.!?](?=\s)", intro.rstrip())[-1]
        listed = last.rstrip().endswith(":") and bool(_VERB.search(last)) and not _NOT.search(last)
        typed = listed or any(own(s) == "instruction" for s in inside)
        decided.update(dict.fromkeys(inside, typed))
    for span in spans:
        typed = decided[span] if span in decided else own(span) == "instruction"
        if typed and not _row(text, span[0]):
            result.extend(_rewrite_span(text, span, settings))
    return result


def _rewrite_span(text: str, span: tuple[int, int], settings: Settings) -> Rewrite:
    """The flag rules on one inline code span, read as one line (RST literals may wrap)."""
    start, end = span
    if "\n" not in text[start:end]:
        return commands(text, start, end, settings, prose_guard=True)
    view = text[:start] + re.sub(r"\r?\n", lambda m: " " * len(m.group()), text[start:end]) + text[end:]
    return commands(view, start, end, settings, prose_guard=True)


_MD_INLINE = re.compile(r"(?<!`)(?P<ticks>`+)(?!`)(?P<code>.+?)(?<!`)(?P=ticks)(?!`)")
_RST_INLINE = re.compile(r"``(?P<code>[^`]+?)``")
_RST_ROLE = re.compile(r":(?:obj|code|samp|option|kbd|literal):`(?P<code>[^`]+?)`")


def _line_no(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def rewrite_markdown(text: str, settings: Settings, python: PythonHook | None = None) -> Rewrite:
    """Fenced code blocks (shell and Python) and inline code by the one rule for inline code;
    prose is never edited."""
    result = Rewrite()
    pos = 0
    prose: list[tuple[int, int]] = []
    while True:
        match = _FENCE.search(text, pos)
        if not match:
            break
        fence = match.group(2)
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M).search(text, match.end())
        end = close.start() if close else len(text)
        prose.append((pos, match.start()))
        if KEY in text[match.end():end] or legacy_names_in(text[match.end():end], settings):
            result.extend(_code_block(text, match.end(), end, match.group(3), settings, python,
                                      _line_no(text, match.end())))
        pos = close.end() if close else len(text)
    prose.append((pos, len(text)))
    for a, b in prose:
        result.extend(_inline_code(text, a, b, (_MD_INLINE,), settings))
    return result


_RST_DIRECTIVE = re.compile(r"^([ \t]*)\.\. (?:code-block|code|sourcecode)::[ \t]*(\S*)[^\n]*\n", re.M)
_RST_LITERAL = re.compile(r"^([ \t]*)(?!\.\.)[^\n]*::[ \t]*\n", re.M)


def rewrite_rst(text: str, settings: Settings, python: PythonHook | None = None) -> Rewrite:
    """``code-block`` directives, ``::`` literal blocks, and ``inline literals`` and
    ``:obj:`` roles by the one rule for inline code."""
    result = Rewrite()
    blocks: list[tuple[int, int, str]] = []
    for match in _RST_DIRECTIVE.finditer(text):
        end = block_end(text, match.end(), len(match.group(1)))
        blocks.append((match.end(), end, match.group(2)))
    for match in _RST_LITERAL.finditer(text):
        if any(a <= match.start() < b or a - 1 <= match.end() <= a for a, b, _ in blocks):
            continue
        end = block_end(text, match.end(), len(match.group(1)))
        blocks.append((match.end(), end, ""))
    blocks.sort()
    for a, b, lang in blocks:
        if KEY in text[a:b] or legacy_names_in(text[a:b], settings):
            result.extend(_code_block(text, a, b, lang, settings, python, _line_no(text, a)))
    for a, b in gaps(text, [(a, b) for a, b, _ in blocks]):
        result.extend(_inline_code(text, a, b, (_RST_INLINE, _RST_ROLE), settings))
    return result
