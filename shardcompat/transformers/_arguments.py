"""``TrainingArguments`` and ``Seq2SeqTrainingArguments`` with ``sharded_ddp`` in the project's grammar.

The installed classes, plus one field: ``sharded_ddp`` accepts every spelling users have (the
bare flag, ``True``/``False``, ``simple``, ``"zero_dp_3 offload"``, the unquoted
``zero_dp_3 offload``, the ``--fsdp`` words and ``key=value`` settings), parsed by
:func:`~shardcompat.options.parse_options`.  After ``__init__`` it holds what 4.30 held on every
release: a list of ``ShardedDDPOption`` (``[]`` when off; the release's own enum where it has
one, else :mod:`._sharded_ddp_option`'s, which the legacy layer serves at the same import paths),
a :class:`ShardedDDPList` that also carries the full options as ``.options``.  Where the
release's own FSDP is off, ``fsdp`` and ``fsdp_config`` read as 4.30 left them too (``[]`` and
its dict; with ``--fsdp`` the release keeps its own values, which its FSDP reads).

:func:`sharding_options` reads the options from either.  The base class's ``__post_init__``
never sees the field: its checks would refuse what shardcompat's Trainer serves (``--bf16``),
and the wrapping it prepared for is done by :class:`shardcompat.transformers.Trainer`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import types
from collections.abc import Sequence
from typing import Any

from ..arguments import HELP, ShardedDDPAction, sharded_ddp_field
from ..options import ShardingOptions, parse_options
from ._api import has_field, load
from ._group import launched_world_size, train_on_cpu_under_a_launcher
from ._legacy import legacy_field_names, legacy_fields, serve_fields, sync_fields
from ._sharded_ddp_option import args_value, fsdp_config_value

__all__ = [
    "HfArgumentParser",
    "Seq2SeqTrainingArguments",
    "ShardedDDPArgumentError",
    "ShardedDDPList",
    "TrainingArguments",
    "sharding_options",
]

_hf = load()
RELEASE_HAS_FIELD = has_field(_hf.TrainingArguments, "sharded_ddp")

FIELD_HELP = (
    HELP + " Sharding is done by shardcompat.prepare (torch FSDP1/FSDP2, DDP+ZeRO or fairscale, "
    "whichever serves the options here; add backend=NAME to choose)."
)


class ShardedDDPArgumentError(ValueError):
    """``sharded_ddp`` was combined with arguments that shard in another way."""


class ShardedDDPList(list):  # type: ignore[type-arg]
    """``args.sharded_ddp`` as 4.30 held it (``ShardedDDPOption`` members), with ``.options``.

    Words 4.30 did not have (``zero_dp_1``, ``hybrid``, ``key=value`` settings) are only in
    ``.options``; ``zero_dp_1`` reads as ``simple``, which sharded at least as much.
    """

    options: ShardingOptions


def _release_value(options: ShardingOptions) -> ShardedDDPList:
    enum = getattr(load("transformers.trainer_utils"), "ShardedDDPOption", None) if RELEASE_HAS_FIELD else None
    value = ShardedDDPList(enum(m.value) if enum is not None else m for m in args_value(options))
    value.options = options
    return value


def _release_fsdp_off(args: Any) -> bool:
    return not RELEASE_HAS_FIELD and not args.fsdp


def _refuse_other_sharding(args: Any, options: ShardingOptions) -> None:
    others = [
        f"--{name} {value!r}" for name in ("fsdp", "deepspeed")
        if (value := getattr(args, name, None)) not in (None, "", [], False)
    ]
    if others:
        raise ShardedDDPArgumentError(
            f"--sharded_ddp '{options}' and {' and '.join(others)} both shard the model; keep one "
            "(shardcompat.transformers.to_trainer_kwargs turns sharded_ddp options into fsdp arguments)"
        )


_LegacyFields = legacy_fields()  # the 4.x fields this release lacks (see _legacy)


@dataclasses.dataclass
class TrainingArguments(_LegacyFields, _hf.TrainingArguments):  # type: ignore[misc,name-defined,valid-type]
    """The installed ``transformers.TrainingArguments`` with ``sharded_ddp`` (any spelling)
    and the 4.x fields this release removed (served as :mod:`.legacy_table` says).

    ``sharding_options(args)`` gives the parsed options (see the module docstring for what
    ``args.sharded_ddp`` holds on each release); ``to_dict()`` and ``str()`` show the
    canonical string.
    """

    sharded_ddp: str = sharded_ddp_field(help=FIELD_HELP)

    def __post_init__(self) -> None:
        # stacklevel 4: parse_options <- here <- the dataclass __init__ <- the caller's line.
        # dataclasses.replace and copies hand the parsed list back: its .options are the whole value.
        given = self.sharded_ddp
        options = given.options if isinstance(given, ShardedDDPList) else parse_options(given, stacklevel=4)
        if options:
            _refuse_other_sharding(self, options)  # before the base class exports its settings
        self.sharded_ddp = ""  # the base class must see no sharding (see the module docstring)
        serve_fields(self)
        train_on_cpu_under_a_launcher(self, {f.name for f in dataclasses.fields(self)})  # type: ignore[arg-type]
        super().__post_init__()  # type: ignore[misc]
        sync_fields(self)
        # Declared str for HfArgumentParser; holds 4.30's list from here on (see the module docstring).
        self.sharded_ddp = _release_value(options)  # type: ignore[assignment]
        if _release_fsdp_off(self):  # 4.30's values beside it (4.3x releases set their own)
            config: Any = getattr(self, "fsdp_config", None)
            self.fsdp: Any = []
            self.fsdp_config = fsdp_config_value(config)
        if getattr(self, "local_rank", 0) == -1 and launched_world_size() > 1:
            # Releases after 4.x leave local_rank at -1 under torchrun; legacy scripts read it
            # ("distributed training: local_rank != -1", main-process checks).
            self.local_rank = self.local_process_index

    def to_dict(self) -> dict[str, Any]:
        """The base ``to_dict`` with ``sharded_ddp`` as its canonical string (JSON, loggers)."""
        values: dict[str, Any] = super().to_dict()  # type: ignore[misc]
        for name in legacy_field_names():  # served by today's fields, which to_dict has
            values.pop(name, None)
        values["sharded_ddp"] = str(sharding_options(self))
        return values

    def __str__(self) -> str:
        value, self.sharded_ddp = self.sharded_ddp, str(sharding_options(self))
        try:
            text: str = super().__str__()
        finally:
            self.sharded_ddp = value
        return text

    __repr__ = __str__


@dataclasses.dataclass
class Seq2SeqTrainingArguments(TrainingArguments, _hf.Seq2SeqTrainingArguments):  # type: ignore[misc,name-defined]
    """The installed ``transformers.Seq2SeqTrainingArguments`` with ``sharded_ddp`` (any spelling)."""


def sharding_options(args: Any) -> ShardingOptions:
    """The sharding options of any ``TrainingArguments``: ours, or a release's own field."""
    value = getattr(args, "sharded_ddp", None)
    if isinstance(value, ShardingOptions):
        return value
    if isinstance(value, ShardedDDPList):
        return value.options
    if isinstance(value, (list, tuple)):  # a 4.x release's parsed field: [ShardedDDPOption, ...]
        return parse_options([str(getattr(v, "value", v)) for v in value], stacklevel=4)
    return parse_options(value or None, stacklevel=4)


class _CanonicalShardedDDPAction(ShardedDDPAction):
    """For a ``sharded_ddp`` field the script declares itself: the canonical string, which a
    ``str`` field takes as is, a ``bool`` field as truthy, and a 4.x ``TrainingArguments``
    parses with its own options."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, values, option_string)
        setattr(namespace, self.dest, str(getattr(namespace, self.dest)))


class _SharedFieldsNamespace(argparse.Namespace):
    """Deleting a name twice is fine: the script's dataclass took its value, TrainingArguments wants it too."""

    def __delattr__(self, name: str) -> None:
        self.__dict__.pop(name, None)


class HfArgumentParser(_hf.HfArgumentParser):  # type: ignore[misc,name-defined]
    """The installed ``HfArgumentParser``; every dataclass field named ``sharded_ddp`` takes all spellings.

    Fields that bring their own action (this package's ``TrainingArguments``) are left as they
    are; any other ``sharded_ddp`` field (a script's own dataclass, a 4.x release's
    ``TrainingArguments``) gets the bare flag, booleans and unquoted words too.
    """

    def __init__(self, dataclass_types: Any = None, **kwargs: Any) -> None:
        # A 4.x field the script's own dataclass declares (a ported script's overwrite_output_dir)
        # is the script's: the drop-in TrainingArguments leave that flag to it.
        types_: list[Any] = [dataclass_types] if dataclasses.is_dataclass(dataclass_types) else list(dataclass_types or [])
        self._scripts_own = legacy_field_names() & {
            f.name for t in types_ if not (isinstance(t, type) and issubclass(t, TrainingArguments))
            for f in dataclasses.fields(t)
        }
        super().__init__(dataclass_types, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if namespace is None and self._scripts_own:
            namespace = _SharedFieldsNamespace()
        return super().parse_known_args(args, namespace)

    def _parse_dataclass_field(self, parser: argparse.ArgumentParser, field: dataclasses.Field[Any]) -> None:
        if field.name in getattr(self, "_scripts_own", ()) and "Transformers 4.x" in field.metadata.get("help", ""):
            return
        if field.name == "sharded_ddp" and "action" not in field.metadata:
            field = copy.copy(field)
            field.metadata = types.MappingProxyType(
                {**field.metadata, "action": _CanonicalShardedDDPAction, "help": FIELD_HELP}
            )
        # The installed class's own method (transformers.HfArgumentParser may be this class now).
        super(HfArgumentParser, HfArgumentParser)._parse_dataclass_field(parser, field)
