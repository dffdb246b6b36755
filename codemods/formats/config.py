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
from dataclasses import dataclass
from typing import Any

from ..rules.sharded_ddp.flags import FLAG, HINTS, meaning, translate
from ..run.context import Settings
from . import jsonspan
from .argv import ArgvItem, argv_edits, argv_rewrite
from .shell import commands
from .spans import Issue, Rewrite, SpanEdit, block_end, gaps

__all__ = ["rewrite_json", "rewrite_keys", "rewrite_yaml", "rewrite_yaml_argv", "rewrite_yaml_steps", "validate"]

KEY = "sharded_ddp"


@dataclass(frozen=True)
class _Change:
    """A config value's new value (``None``: leave it), and with ``--to fsdp`` in the current
    form the ``fsdp_config`` mapping to write next to it."""

    value: str | bool | None
    rule: str = ""
    note: str = ""
    problem: str = ""
    fsdp_config: dict[str, Any] | None = None


def _change(value: Any, settings: Settings) -> _Change:
    if not isinstance(value, (bool, str)):
        return _Change(None)
    plan = translate(meaning(value), settings.to, settings.fsdp_form)
    listing = settings.to == "list"
    if plan.problem:
        return _Change(None, plan.rule, problem=plan.problem)
    if plan.drop:  # off: "" in the list syntax, fsdp false in the current FSDP form
        off: str | bool = False if not listing and settings.fsdp_form == "config" else ""
        return _Change(off, "config-false" if listing else "to-fsdp", plan.note)
    if plan.fsdp_config is not None:
        return _Change(True, "to-fsdp", plan.note, fsdp_config=plan.fsdp_config)
    if plan.value is None:
        return _Change(None)
    return _Change(plan.value, "config-true" if listing else "to-fsdp", plan.note)


def _exists(config: dict[str, Any]) -> str:
    return (f"an fsdp_config is already set here; merge {json.dumps(config)} into it by hand "
            "(left as is)")


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
            result.extend(argv_rewrite(text, node, settings))
        if not isinstance(node, jsonspan.JObject):
            continue
        for key, value in node.members:
            if key.value != KEY or not isinstance(value, jsonspan.JScalar):
                continue
            change = _change(value.value, settings)
            if change.fsdp_config is not None and node.get("fsdp_config") is not None:
                change = _Change(None, "fsdp-config-exists", problem=_exists(change.fsdp_config))
            if change.problem:
                result.issues.append(Issue(value.start, change.rule, change.problem, HINTS[change.rule]))
            elif change.value is not None:
                if settings.to == "fsdp":
                    result.edits.append(SpanEdit(key.start, key.end, '"fsdp"', change.rule, change.note))
                new = json.dumps(change.value)
                if change.fsdp_config is not None:
                    new += f', "fsdp_config": {json.dumps(change.fsdp_config)}'
                result.edits.append(SpanEdit(value.start, value.end, new, change.rule, change.note))
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


def _toml_text(value: Any) -> str:
    """A TOML value: booleans, numbers, strings, lists and inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_text(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _text(value: str | bool, kind: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    write: dict[str, Callable[[str], str]] = {"yaml": _yaml_text, "toml": _toml_text, "ini": str}
    return write[kind](value)


#: How each format writes the ``fsdp_config`` line (YAML and INI take it as JSON).
_CONFIG_LINE: dict[str, Callable[[dict[str, Any]], str]] = {
    "yaml": lambda c: f"fsdp_config: {json.dumps(c)}",
    "toml": lambda c: f"fsdp_config = {_toml_text(c)}",
    "ini": lambda c: f"fsdp_config = {json.dumps(c)}",
}
_HAS_CONFIG = re.compile(r"^[ \t]*(?:-[ \t]+)?[\"']?fsdp_config[\"']?[ \t]*[:=]", re.M)


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
        change = _change(_scalar(raw, kind), settings)
        if change.fsdp_config is not None and _HAS_CONFIG.search(text):
            change = _Change(None, "fsdp-config-exists", problem=_exists(change.fsdp_config))
        if change.problem:
            result.issues.append(Issue(match.start("value"), change.rule, change.problem, HINTS[change.rule]))
        elif change.value is not None:
            if settings.to == "fsdp":
                key = match.group("key")
                result.edits.append(SpanEdit(match.start("key"), match.end("key"),
                                             key.replace(KEY, "fsdp"), change.rule, change.note))
            result.edits.append(SpanEdit(match.start("value"), match.end("value"),
                                         _text(change.value, kind), change.rule, change.note))
            if change.fsdp_config is not None:  # a line of its own, aligned with the key
                newline = "\r\n" if text[match.end():match.end() + 2] == "\r\n" else "\n"
                pre = re.sub(r"-", " ", match.group("pre"))
                result.edits.append(SpanEdit(match.end(), match.end(), newline + pre + _CONFIG_LINE[kind](
                    change.fsdp_config), change.rule, change.note))
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
                result.extend(argv_edits(text, items, settings))
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
