"""Where a script keeps a 4.x field it still reads: a field of its own arguments dataclass.

The table serves some fields as no-ops the *script* reads (``overwrite_output_dir``: 4.x
scripts decide themselves whether to resume from the last checkpoint; the Trainer never read
it).  Their replacement is "a field of the script's own arguments dataclass", and when the file
shows exactly where that is, the move is exact: the same flag parses into the same value, read
from the other object.  The file must have one ``HfArgumentParser((A, ..., TrainingArguments))``
with a ``@dataclass`` of its own among the classes, and every ``a, ..., t = parser.parse_*()``
must unpack into the same names; the field goes to the last own dataclass that does not declare
it, the reads ``t.name`` become ``d.name``.  Anything else is reported (see :mod:`.python`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from shardcompat.transformers.legacy_table import FIELDS, LegacyName, Served

__all__ = ["OWN_ROWS", "OwnField", "own_field"]

#: The rows the script itself reads, whose replacement is its own dataclass.
OWN_ROWS: dict[str, LegacyName] = {r.name: r for r in FIELDS if r.served is Served.NO_OP and r.replacement}


#: The Trainer's own argument classes, by the names scripts import them as.
_TRAINERS_ARGUMENTS = ("TrainingArguments", "Seq2SeqTrainingArguments")


@dataclass(frozen=True)
class OwnField:
    """Move reads of ``names`` on ``source`` (the TrainingArguments object) to ``target``, and
    declare them in class ``cls`` (``field_call``: ``dataclasses.field`` is imported as ``field``)."""

    source: str
    target: str
    cls: str
    names: tuple[str, ...]
    field_call: bool


def _dataclasses(tree: ast.Module) -> dict[str, set[str]]:
    """This file's ``@dataclass`` classes and the fields each declares."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(
                (d.id if isinstance(d, ast.Name) else getattr(d, "attr", "")) == "dataclass"
                or (isinstance(d, ast.Call) and getattr(d.func, "id", getattr(d.func, "attr", "")) == "dataclass")
                for d in node.decorator_list):
            found[node.name] = {s.target.id for s in node.body
                                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return found


def own_field(tree: ast.Module) -> OwnField | None:
    """The move for this file, or None when the file does not show where the field goes."""
    reads = {n.attr: n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in OWN_ROWS
             and isinstance(n.value, ast.Name)}
    if not reads:
        return None
    classes = _dataclasses(tree)
    parsers = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "HfArgumentParser"
               and n.args and isinstance(n.args[0], (ast.Tuple, ast.List))]
    if len(parsers) != 1:
        return None
    names = [e.id if isinstance(e, ast.Name) else "" for e in parsers[0].args[0].elts]  # type: ignore[attr-defined]
    training = [i for i, n in enumerate(names) if n.endswith("TrainingArguments") and n not in classes]
    if len(training) > 1:  # 3.x-4.0: ``GlueDataTrainingArguments as DataTrainingArguments`` beside the Trainer's
        training = [i for i in training if names[i] in _TRAINERS_ARGUMENTS]
    own = [i for i, n in enumerate(names) if n in classes]
    if len(training) != 1 or not own:
        return None
    unpacked = [n.targets[0] for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
                and isinstance(n.value, ast.Call) and getattr(n.value.func, "attr", "").startswith("parse_")]
    if not unpacked or not all(isinstance(t, ast.Tuple) and len(t.elts) == len(names)
                               and all(isinstance(e, ast.Name) for e in t.elts) for t in unpacked):
        return None
    for index in (training[0], *own):
        if len({t.elts[index].id for t in unpacked}) != 1:  # type: ignore[attr-defined]
            return None
    first = unpacked[0].elts  # type: ignore[attr-defined]
    source = first[training[0]].id
    moved = tuple(sorted(name for name, node in reads.items() if node.value.id == source))  # type: ignore[attr-defined]
    targets = [i for i in own if not set(moved) & classes[names[i]]]
    if not moved or not targets or any(not isinstance(OWN_ROWS[n].type, type) for n in moved):
        return None
    field_call = any(isinstance(n, ast.ImportFrom) and n.module == "dataclasses"
                     and any(a.name == "field" and a.asname is None for a in n.names) for n in tree.body)
    return OwnField(source, first[targets[-1]].id, names[targets[-1]], moved, field_call)
