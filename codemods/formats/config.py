"""Configs: JSON, YAML, TOML and INI, edited by span.

Config keys ``sharded_ddp: true/false``: ``true`` becomes ``"simple"`` (YAML: ``simple``; INI:
``simple``), ``false`` becomes the empty string, list values are left alone; with ``--to fsdp``
the key becomes ``fsdp`` and the value the ``--fsdp`` words.  JSON arrays and YAML sequences
that are argv lists follow the argv rules; YAML CI steps (``run:``, ``script:``) the shell rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from .. import jsonspan
from ..argv import ArgvItem, argv_edits, argv_rewrite
from ..context import Settings
from ..flags import FLAG, HINTS, Issue, Rewrite, meaning, translate
from ..spans import SpanEdit, block_end, gaps
from .shell import commands

__all__ = ["rewrite_json", "rewrite_keys", "rewrite_yaml", "rewrite_yaml_argv", "rewrite_yaml_steps", "validate"]

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


_STEP_KEY = re.compile(
    r"^(?P<indent>[ \t]*)(?:-[ \t]+)?(?P<key>run|script|before_script|after_script|command|cmd|"
    r"entrypoint|args)[ \t]*:[ \t]*(?P<value>[^\n]*?)[ \t]*(?:\r?\n|\Z)",
    re.M,
)
_BLOCK_SCALAR = re.compile(r"^[|>][+-]?\d*[ \t]*(#.*)?$")


_DASH = re.compile(r" *-[ \t]+")
_LINE_REST = re.compile(r"[ \t]*(?:#.*)?\r?\n?")


def _yaml_item(text: str, node: Any, floor: int, block: bool) -> ArgvItem:
    """An element of a YAML sequence.  A scalar is editable in place only when it is a one-line
    plain or quoted scalar written right there (not an alias, anchor, tag or block scalar) and,
    in a block sequence, alone on its ``- `` line, so that lines can be added and removed."""
    import yaml

    start, end = node.start_mark.index, node.end_mark.index
    if not isinstance(node, yaml.ScalarNode) or not node.value or start < floor:
        return ArgvItem(start, end, None)  # start < floor: an alias to a node written earlier
    fixed = ArgvItem(start, end, node.value, fixed=True)
    raw = text[start:end]
    if "\n" in raw:
        return fixed
    if node.style is None and raw == node.value:
        quote = ""
    elif node.style in ("'", '"') and len(raw) > 1 and raw[0] == raw[-1] == node.style:
        quote = node.style
    else:
        return fixed
    if not block:
        return ArgvItem(start, end, node.value, quote)
    line_start = text.rfind("\n", 0, start) + 1
    newline = text.find("\n", end)
    line_end = len(text) if newline < 0 else newline + 1
    prefix = text[line_start:start]
    if not (_DASH.fullmatch(prefix) and _LINE_REST.fullmatch(text, end, line_end)):
        return fixed
    return ArgvItem(start, end, node.value, quote, (line_start, line_end), prefix)


def _is_flag(value: str | None) -> bool:
    return value is not None and (value == FLAG or value.startswith(FLAG + "="))


def rewrite_yaml_argv(text: str, settings: Settings) -> tuple[Rewrite, list[tuple[int, int]]]:
    """Every YAML sequence with a ``--sharded_ddp`` element is an argv list (Kubernetes
    ``command:``/``args:``, Argo, Kubeflow, compose): block (``- --sharded_ddp``) or flow
    (``[--sharded_ddp]``), by the argv rules.  Returns the edits and the flag elements' spans,
    which the shell rules must not see (``- --sharded_ddp`` is not a command line)."""
    import yaml

    result = Rewrite()
    taken: list[tuple[int, int]] = []
    stack: list[Any] = [doc for doc in yaml.compose_all(text) if doc is not None]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += reversed([part for pair in node.value for part in pair])  # document order
        elif isinstance(node, yaml.SequenceNode):
            stack += reversed(node.value)
            block = node.flow_style is not True
            items: list[ArgvItem] = []
            floor = node.start_mark.index
            for child in node.value:
                items.append(_yaml_item(text, child, floor, block))
                floor = max(floor, items[-1].end)
            if any(_is_flag(i.value) for i in items):
                result.extend(argv_edits(text, items, settings.to))
                taken += [(i.start, i.end) for i in items if _is_flag(i.value)]
    return result, taken


def rewrite_yaml_steps(text: str, settings: Settings) -> Rewrite:
    """Argv lists (:func:`rewrite_yaml_argv`), then CI ``run:``/``script:`` steps (inline, block
    scalars, lists of lines) and ``sh -c`` scripts by the shell rules, around the argv flags."""
    result, taken = rewrite_yaml_argv(text, settings)
    for match in _STEP_KEY.finditer(text):
        value, v0 = match.group("value"), match.start("value")
        indent = len(match.group("indent"))
        if value.startswith("["):
            continue  # a flow list: an argv list above, or none
        if value and not _BLOCK_SCALAR.match(value):
            result.extend(commands(text, v0, match.end("value"), settings))
            continue
        end = block_end(text, match.end(), indent)
        for a, b in gaps(text, taken):
            a, b = max(a, match.end()), min(b, end)
            if a < b and FLAG in text[a:b]:
                result.extend(commands(text, a, b, settings))
    return result


def rewrite_yaml(text: str, settings: Settings) -> Rewrite:
    """Keys, argv lists and CI steps of a YAML file."""
    found = rewrite_keys(text, "yaml", settings)
    found.extend(rewrite_yaml_steps(text, settings))
    return found


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
