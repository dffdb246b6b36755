"""A JSON reader that keeps the span of every value, so edits can go straight to the bytes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = ["JArray", "JObject", "JSONSpanError", "JScalar", "parse"]

_WS = re.compile(r"[ \t\r\n]*")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\.)*"')
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None}


class JSONSpanError(ValueError):
    """Invalid JSON, with the offset where reading stopped."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} at offset {offset}")
        self.offset = offset


@dataclass
class JScalar:
    start: int
    end: int
    value: Any


@dataclass
class JArray:
    start: int
    end: int
    items: list[JNode] = field(default_factory=list)


@dataclass
class JObject:
    start: int
    end: int
    members: list[tuple[JScalar, JNode]] = field(default_factory=list)

    def get(self, key: str) -> JNode | None:
        for name, value in self.members:
            if name.value == key:
                return value
        return None


JNode = Union[JScalar, JArray, JObject]


def parse(text: str) -> JNode:
    """Parse a whole document; raises :class:`JSONSpanError` on anything invalid."""
    node, pos = _value(text, _skip(text, 0))
    if _skip(text, pos) != len(text):
        raise JSONSpanError("extra data", pos)
    return node


def parse_at(text: str, pos: int) -> tuple[JNode, int]:
    """The JSON value starting at ``pos`` inside a larger text, and where it ends."""
    return _value(text, pos)


def _skip(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]


def _value(text: str, pos: int) -> tuple[JNode, int]:
    if pos >= len(text):
        raise JSONSpanError("unexpected end", pos)
    c = text[pos]
    if c == "{":
        return _object(text, pos)
    if c == "[":
        return _array(text, pos)
    if c == '"':
        return _string(text, pos)
    for word, value in _LITERALS.items():
        if text.startswith(word, pos):
            return JScalar(pos, pos + len(word), value), pos + len(word)
    match = _NUMBER.match(text, pos)
    if match:
        return JScalar(pos, match.end(), json.loads(match.group())), match.end()
    raise JSONSpanError(f"unexpected {c!r}", pos)


def _string(text: str, pos: int) -> tuple[JScalar, int]:
    match = _STRING.match(text, pos)
    if not match:
        raise JSONSpanError("bad string", pos)
    return JScalar(pos, match.end(), json.loads(match.group())), match.end()


def _object(text: str, pos: int) -> tuple[JObject, int]:
    node = JObject(pos, pos)
    pos = _skip(text, pos + 1)
    if text.startswith("}", pos):
        node.end = pos + 1
        return node, node.end
    while True:
        key, pos = _string(text, pos)
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise JSONSpanError("expected ':'", pos)
        value, pos = _value(text, _skip(text, pos + 1))
        node.members.append((key, value))
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
            continue
        if text.startswith("}", pos):
            node.end = pos + 1
            return node, node.end
        raise JSONSpanError("expected ',' or '}'", pos)


def _array(text: str, pos: int) -> tuple[JArray, int]:
    node = JArray(pos, pos)
    pos = _skip(text, pos + 1)
    if text.startswith("]", pos):
        node.end = pos + 1
        return node, node.end
    while True:
        value, pos = _value(text, pos)
        node.items.append(value)
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
            continue
        if text.startswith("]", pos):
            node.end = pos + 1
            return node, node.end
        raise JSONSpanError("expected ',' or ']'", pos)
