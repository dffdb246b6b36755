"""Markdown and reStructuredText: code blocks by their language, inline code by the one rule
for inline code; prose is never edited."""

from __future__ import annotations

import re

from ..context import Settings
from ..flags import FLAG, FSDP_FLAG, Rewrite
from ..spans import SpanEdit, block_end, gaps
from .python import PythonHook
from .shell import commands

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
        found = python(text[start:end], first_line)
        found.edits = [SpanEdit(start + e.start, start + e.end, e.new, e.rule, e.note, e.records)
                       for e in found.edits]
        return found
    return Rewrite()


def _inline_code(text: str, start: int, end: int, pattern: re.Pattern[str], settings: Settings) -> Rewrite:
    result = Rewrite()
    for match in pattern.finditer(text, start, end):
        a, b = match.span("code")
        if FLAG in text[a:b] and text[a:b].strip() not in (FLAG, FSDP_FLAG):
            result.extend(commands(text, a, b, settings, prose_guard=True))
    return result


_MD_INLINE = re.compile(r"(?<!`)(?P<ticks>`+)(?!`)(?P<code>.+?)(?<!`)(?P=ticks)(?!`)")
_RST_INLINE = re.compile(r"``(?P<code>[^`]+?)``")


def _line_no(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def rewrite_markdown(text: str, settings: Settings, python: PythonHook | None = None) -> Rewrite:
    """Fenced code blocks (shell and Python) and inline code; prose is never edited."""
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
        if KEY in text[match.end():end]:
            result.extend(_code_block(text, match.end(), end, match.group(3), settings, python,
                                      _line_no(text, match.end())))
        pos = close.end() if close else len(text)
    prose.append((pos, len(text)))
    for a, b in prose:
        result.extend(_inline_code(text, a, b, _MD_INLINE, settings))
    return result


_RST_DIRECTIVE = re.compile(r"^([ \t]*)\.\. (?:code-block|code|sourcecode)::[ \t]*(\S*)[^\n]*\n", re.M)
_RST_LITERAL = re.compile(r"^([ \t]*)(?!\.\.)[^\n]*::[ \t]*\n", re.M)


def rewrite_rst(text: str, settings: Settings, python: PythonHook | None = None) -> Rewrite:
    """``code-block`` directives, ``::`` literal blocks and ``inline literals``."""
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
        if KEY in text[a:b]:
            result.extend(_code_block(text, a, b, lang, settings, python, _line_no(text, a)))
    for a, b in gaps(text, [(a, b) for a, b, _ in blocks]):
        result.extend(_inline_code(text, a, b, _RST_INLINE, settings))
    return result
