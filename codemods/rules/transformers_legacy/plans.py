"""What one legacy name becomes, decided from its row of :mod:`shardcompat.transformers.legacy_table`.

Every format asks :func:`plan_field` (a ``TrainingArguments`` keyword or ``--flag`` with its
value) or :func:`plan_name` (a keyword, an import, an attribute read), so Python, shell and docs
migrate alike.  The contract, by how the table serves a row:

- ``renamed``: today's name, the value unchanged;
- ``mapped``: today's setting for a literal value the row maps (``adafactor=True`` is
  ``optim="adafactor"``); the row's 4.x default is dropped (today's default means the same);
  any other value, or one that is not a literal, is reported, never guessed;
- ``no-op``: dropped when the row has nothing to move to (its replacement is empty: the
  setting has no effect today, so removing it is exact) and its value is not one the table
  refuses; a no-op the script itself still reads (``overwrite_output_dir``: its replacement
  names where to move it) is reported;
- ``refused``: reported with the table's reason and replacement.

A row whose serving this module does not know has no rule (:func:`has_rule` is False), and the
test over every row of the table fails, so a new row cannot be skipped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from shardcompat.transformers.legacy_table import (
    MEMBERS,
    ROWS,
    SURFACE,
    Home,
    Kind,
    LegacyName,
    Served,
)

__all__ = ["MEMBER_RENAMES", "NAMES", "NEEDLES", "NOT_LITERAL", "REMOVED_TOP_LEVEL", "Plan", "has_rule", "plan_field", "plan_name", "rows_named"]

#: Stands for a value that is not a literal (a variable, a call, an expression).
NOT_LITERAL: Any = object()
#: Every legacy name of the table (the prefilter's needles).
NAMES: tuple[str, ...] = tuple(dict.fromkeys(r.name for r in ROWS))
#: The removed top-level names :mod:`.homes` moves or reports (``from transformers import ...``;
#: a family row is a pattern, not a needle).
REMOVED_TOP_LEVEL: tuple[str, ...] = tuple(r.pattern.split(".", 1)[1] for r in SURFACE
                                           if not r.family and r.pattern.count(".") == 1
                                           and r.pattern.startswith("transformers."))
#: 3.x members that 4.0 renamed (``trainer.is_world_master()``, ``tokenizer.max_len``), from the table's
#: rows: old name -> (what the receiver is called, today's name).
MEMBER_RENAMES: dict[str, tuple[str, str]] = {
    r.pattern.split(".", 1)[1]: ("trainer" if r.pattern.startswith("Trainer.") else "tokenizer",
                                 r.replacement.split(".", 1)[1].removesuffix("()"))
    for r in MEMBERS if r.served is Served.RENAMED and r.home is Home.CLASS and r.removed == "4.0"
}
#: What else the rule acts on: Trainer subclasses and calls (:mod:`.overrides`), imports from
#: Transformers modules (:mod:`.homes`), the tokenizer's target mode (:mod:`.targets`), a model
#: folder passed as a checkpoint (:mod:`.resume`).
NEEDLES: tuple[str, ...] = (*NAMES, *REMOVED_TOP_LEVEL, *MEMBER_RENAMES, "Trainer", "transformers.", "AdamW", "ShardedDDPOption",
                             "as_target_tokenizer", "prepare_seq2seq_batch", "TF", "Flax", "_PRETRAINED_",
                             "resume_from_checkpoint")

Action = Literal["rename", "set", "drop", "report"]


@dataclass(frozen=True)
class Plan:
    """``rename`` to ``name`` (value kept), ``set`` ``name`` to ``value``, ``drop`` the use,
    or ``report`` it (``message`` says why, ``hint`` what to write)."""

    action: Action
    name: str = ""
    value: Any = None
    message: str = ""
    hint: str = ""
    note: str = ""


def _report(row: LegacyName, why: str = "") -> Plan:
    removed = f"removed in {row.removed_in}"
    reason = f"{why}; " if why else ""
    hint = f"write {row.replacement}" if row.replacement else "remove it"
    return Plan("report", message=f"{row.name}: {removed}; {reason}{row.reason}", hint=hint)


def _fsdp_config(row: LegacyName, value: Any) -> Plan:
    key = row.name[len("fsdp_"):]
    if row.name == "fsdp_transformer_layer_cls_to_wrap":
        if not isinstance(value, str):
            return _report(row, "not a literal class name")
        return Plan("set", "fsdp_config", {key: [value]}, note=row.reason)
    if isinstance(value, bool) or not isinstance(value, int):
        return _report(row, "not a literal number")
    return Plan("set", "fsdp_config", {key: value}, note=row.reason)


def _warmup(row: LegacyName, value: Any) -> Plan:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        return _report(row, f"{value!r} is no ratio below 1 that warmup_steps reads as one")
    return Plan("set", "warmup_steps", value, note=row.reason)


#: Mapped rows without a value table: how their literal value maps (None: always reported,
#: the mapping needs something the call does not hold, e.g. an environment variable).
_SPECIAL: dict[str, Any] = {
    "warmup_ratio": _warmup,
    "fsdp_min_num_params": _fsdp_config,
    "fsdp_transformer_layer_cls_to_wrap": _fsdp_config,
    "logging_dir": None,
    "push_to_hub_organization": None,
}


def has_rule(row: LegacyName) -> bool:
    """Whether this module knows how to migrate ``row`` (a new kind of row must be taught)."""
    if row.kind is Kind.FIELD:
        if row.served is Served.MAPPED:
            return bool(row.values) or row.name in _SPECIAL
        return row.served in (Served.RENAMED, Served.NO_OP, Served.REFUSED)
    if row.kind is Kind.DATASETS_FUNCTION:  # .homes imports it from its new home, or reports it (no drop-in)
        return row.new is None or ":" in row.new
    if row.kind is Kind.TRAINER and row.new is not None and row.new.startswith("args."):
        return True  # reported: the value moves to the arguments, which the call does not show
    if row.kind in (Kind.TRAINER, Kind.FROM_PRETRAINED, Kind.DATASETS):
        return row.served is Served.RENAMED and row.new is not None
    if row.kind in (Kind.TOP_LEVEL, Kind.UTILS):
        return (row.new is not None or row.replacement in ("True", "False")
                or (row.served is Served.NO_OP and not row.replacement))
    return False


def _equal(a: Any, b: Any) -> bool:
    return a == b and type(a) is type(b)


def plan_field(row: LegacyName, value: Any) -> Plan:
    """What ``row``'s ``TrainingArguments`` keyword or flag given ``value`` (a Python value as
    4.x parsed it, or :data:`NOT_LITERAL`) becomes."""
    assert row.kind is Kind.FIELD
    literal = value is not NOT_LITERAL
    if row.served is Served.REFUSED:
        return _report(row, "no release serves it")
    if row.served is Served.RENAMED:
        assert row.new is not None
        return Plan("rename", row.new, note=row.reason)
    if row.served is Served.NO_OP:
        if row.replacement:
            return _report(row, "the script still reads it")
        if not literal:
            return _report(row, "not a literal value, so whether the table refuses it cannot be told")
        if value in row.refuse:
            return _report(row, f"{value!r} has no equivalent today")
        return Plan("drop", note=f"no effect today: {row.reason}")
    # mapped
    if not literal:
        return _report(row, "not a literal value")
    if _equal(value, row.default) or (row.default is None and value is None):
        return Plan("drop", note=f"4.x default; {row.reason}")
    for old, new in row.values:
        if _equal(value, old):
            assert row.new is not None
            return Plan("set", row.new, new, note=row.reason)
    special = _SPECIAL.get(row.name)
    if special is None:
        return _report(row, "its mapping needs more than this value" if not row.values
                       else f"{value!r} has no mapping")
    plan: Plan = special(row, value)
    return plan


def plan_name(row: LegacyName) -> Plan:
    """What a keyword, an imported name or an attribute read of ``row`` becomes, without a value
    (``set``: a function whose answer today is the constant ``value``)."""
    if row.kind is Kind.FIELD:
        if row.served is Served.RENAMED and row.new is not None:
            return Plan("rename", row.new, note=row.reason)
        return _report(row, "today's TrainingArguments has no such attribute")
    if row.new is not None and row.new.startswith("args."):  # a keyword 3.x moved into the arguments
        return _report(row, f"today it is {row.new}, set on the TrainingArguments the Trainer is given")
    if row.new is not None and row.served in (Served.RENAMED, Served.MAPPED):
        return Plan("rename", row.new, note=row.reason)
    if row.replacement in ("True", "False"):
        return Plan("set", value=row.replacement == "True", note=row.reason)
    if row.served is Served.NO_OP and not row.replacement:
        return Plan("drop", note=f"no effect today: {row.reason}")
    return _report(row)


def rows_named(name: str, *kinds: Kind) -> LegacyName | None:
    """The row of ``name`` among ``kinds`` (the first kind that has one), else None."""
    for kind in kinds:
        for row in ROWS:
            if row.name == name and row.kind is kind:
                return row
    return None


