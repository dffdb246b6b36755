"""Config keys ``sharded_ddp: true/false`` in JSON, YAML, TOML and INI, edited by span.

``true`` becomes ``"simple"`` (YAML: ``simple``; INI: ``simple``), ``false`` becomes the
empty string, list values are left alone; with ``--to fsdp`` the key becomes ``fsdp`` and the
value the ``--fsdp`` words.  JSON arrays that are argv lists follow the argv rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from . import jsonspan
from .context import Settings
from .flags import FLAG, HINTS, Issue, Rewrite, meaning, translate
from .spans import SpanEdit
from .text import argv_rewrite

__all__ = ["rewrite_json", "rewrite_keys", "validate"]

KEY = "sharded_ddp"


def _new_value(value: Any, settings: Settings) -> tuple[str | None, str, str, str]:
    """``(new value or None, rule, note, problem)`` for a config value; false is ``""`` here."""
    if not isinstance(value, (bool, str)):
        return None, "", "", ""
    plan = translate(meaning(value), settings.to)
    if plan.problem:
        return None, plan.rule, "", plan.problem
    if plan.drop:
        return "", "config-false" if settings.to == "list" else "to-fsdp", plan.note, ""
    if plan.value is None:
        return None, "", "", ""
    return plan.value, "config-true" if settings.to == "list" else "to-fsdp", plan.note, ""


def _walk(node: jsonspan.JNode) -> Iterator[jsonspan.JNode]:
    yield node
    if isinstance(node, jsonspan.JObject):
        for _, value in node.members:
            yield from _walk(value)
    elif isinstance(node, jsonspan.JArray):
        for item in node.items:
            yield from _walk(item)


def rewrite_json(text: str, settings: Settings) -> Rewrite:
    """``"sharded_ddp": true/false`` members and argv arrays; raises on invalid JSON."""
    result = Rewrite()
    for node in _walk(jsonspan.parse(text)):
        if isinstance(node, jsonspan.JArray) and any(
            isinstance(i, jsonspan.JScalar) and isinstance(i.value, str) and i.value.startswith(FLAG)
            for i in node.items
        ):
            result.extend(argv_rewrite(text, node, settings.to))
        if not isinstance(node, jsonspan.JObject):
            continue
        for key, value in node.members:
            if key.value != KEY or not isinstance(value, jsonspan.JScalar):
                continue
            new, rule, note, problem = _new_value(value.value, settings)
            if problem:
                result.issues.append(Issue(value.start, rule, problem, HINTS[rule]))
            elif new is not None:
                if settings.to == "fsdp":
                    result.edits.append(SpanEdit(key.start, key.end, '"fsdp"', rule, note))
                result.edits.append(SpanEdit(value.start, value.end, json.dumps(new), rule, note))
    return result


_END = r"(?=\r?\n|\Z)"
_PATTERNS = {
    "yaml": re.compile(
        r"^(?P<pre>[ \t]*(?:-[ \t]+)?)(?P<key>[\"']?sharded_ddp[\"']?)[ \t]*:[ \t]*"
        r"(?P<value>[^#\r\n]*?)[ \t]*(?:#[^\r\n]*)?" + _END, re.M),
    "toml": re.compile(
        r"^(?P<pre>[ \t]*)(?P<key>sharded_ddp)[ \t]*=[ \t]*"
        r"(?P<value>true|false|\"[^\"\r\n]*\"|'[^'\r\n]*')[ \t]*(?:#[^\r\n]*)?" + _END, re.M),
    "ini": re.compile(
        r"^(?P<pre>[ \t]*)(?P<key>sharded_ddp)[ \t]*[=:][ \t]*"
        r"(?P<value>[^;#\r\n]*?)[ \t]*(?:[;#][^\r\n]*)?" + _END, re.M),
}


def _yaml_text(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z_][\w]*", value) else json.dumps(value)


_FORMAT: dict[str, Callable[[str], str]] = {"yaml": _yaml_text, "toml": json.dumps, "ini": str}


def _scalar(raw: str, kind: str) -> Any:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    if kind == "toml" and raw in ("true", "false"):
        return raw == "true"
    return raw


def rewrite_keys(text: str, kind: str, settings: Settings) -> Rewrite:
    """``sharded_ddp`` keys in YAML, TOML or INI text."""
    result = Rewrite()
    for match in _PATTERNS[kind].finditer(text):
        raw = match.group("value")
        if not raw:
            continue
        new, rule, note, problem = _new_value(_scalar(raw, kind), settings)
        if problem:
            result.issues.append(Issue(match.start("value"), rule, problem, HINTS[rule]))
        elif new is not None:
            if settings.to == "fsdp":
                key = match.group("key")
                result.edits.append(SpanEdit(match.start("key"), match.end("key"),
                                             key.replace(KEY, "fsdp"), rule, note))
            result.edits.append(SpanEdit(match.start("value"), match.end("value"),
                                         _FORMAT[kind](new), rule, note))
    return result


def validate(kind: str, text: str) -> None:
    """Raise if ``text`` does not parse as ``kind`` (kinds without a parser always pass)."""
    if kind in ("json", "notebook"):
        json.loads(text)
    elif kind == "yaml":
        import yaml

        list(yaml.safe_load_all(text))
    elif kind == "toml":
        try:
            import tomllib
        except ImportError:  # Python < 3.11: nothing to check with
            return
        tomllib.loads(text)
    elif kind == "ini":
        import configparser

        configparser.ConfigParser(interpolation=None, strict=False).read_string(text)
