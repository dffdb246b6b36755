"""Serve the 4.x names of :mod:`.legacy_table` that the installed Transformers no longer has.

Three places, each scoped to what the process asked for:

- the drop-in ``TrainingArguments`` (and ``Seq2SeqTrainingArguments``) declare the legacy fields
  the installed release lacks (:func:`legacy_fields`), so ``HfArgumentParser`` parses the old
  flags, and :func:`serve_fields` maps each given value to today's setting before the release's
  own checks run;
- the drop-in ``Trainer`` maps its legacy keywords (:func:`trainer_keywords`) and reads
  ``trainer.tokenizer`` as before (:func:`add_trainer_attributes`);
- :func:`install` (what ``shardcompat run`` and :func:`shardcompat.transformers.install` do) adds
  the removed top-level and ``transformers.utils`` functions, the ``use_auth_token`` keyword of
  ``from_pretrained`` and of ``datasets.load_dataset`` (every 4.x example script passes it),
  ``datasets.load_metric``, and (:mod:`._legacy_imports`) the rest of the 4.30 surface the table
  serves: module names at their 4.x import paths, ``transformers.deepspeed``, class members;
  :func:`uninstall` takes them away again.

Every name is probed on the installed release: what it still has is left alone, so on 4.3x
nothing here does anything.  Each name warns once per process with a ``FutureWarning`` naming
today's spelling.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

from . import _legacy_imports
from ._api import has_field, load, packages
from .legacy_table import DATASETS_LOADERS, FIELDS, NOT_GIVEN, Kind, LegacyName, Served, by_kind

__all__ = [
    "LegacyArgumentError",
    "add_trainer_attributes",
    "install",
    "legacy_fields",
    "serve_fields",
    "sync_fields",
    "trainer_keywords",
    "uninstall",
]

# The permanent fix the warnings name: the migrate rule over the same table.
MIGRATE_HINT = "shardcompat-migrate --transformers-legacy PATH writes the new spelling for good"
_warned: set[tuple[Kind, str]] = set()


class LegacyArgumentError(ValueError):
    """A 4.x setting that has no honest meaning on the installed Transformers."""


def _warn(row: LegacyName, stacklevel: int = 3) -> None:
    if (row.kind, row.name) in _warned:
        return
    _warned.add((row.kind, row.name))
    if row.served is Served.NO_OP and row.replacement:
        how = f"shardcompat keeps the attribute ({row.reason}). Move it to {row.replacement}"
    elif row.served is Served.NO_OP:
        how = f"it has no effect here: {row.reason}. Drop it"
    else:
        how = f"shardcompat serves it as {row.replacement} ({row.reason}). Write {row.replacement}"
    warnings.warn(
        f"{_spelling(row)} is {row.api} API (removed in {row.removed_in}); {how} "
        f"({MIGRATE_HINT}; every name: docs/transformers-legacy.md).",
        FutureWarning, stacklevel=stacklevel,
    )


def _spelling(row: LegacyName) -> str:
    return {
        Kind.FIELD: f"TrainingArguments {row.flag}",
        Kind.TRAINER: f"Trainer({row.name}=...)",
        Kind.FROM_PRETRAINED: f"from_pretrained({row.name}=...)",
        Kind.DATASETS: f"datasets.load_dataset({row.name}=...)",
        Kind.DATASETS_FUNCTION: f"datasets.{row.name}",
        Kind.TOP_LEVEL: f"transformers.{row.name}",
        Kind.UTILS: f"transformers.utils.{row.name}",
    }[row.kind]


# ---------------------------------------------------------------------- TrainingArguments
def _release(name: str) -> Any:
    """The installed release's own class ``name`` (under ``shardcompat run`` the module holds the drop-in)."""
    return next(c for c in getattr(load(), name).__mro__ if c.__module__.split(".")[0] == "transformers")


@functools.cache
def _missing_fields() -> tuple[LegacyName, ...]:
    base = _release("TrainingArguments")
    return tuple(r for r in FIELDS if not has_field(base, r.name))


def legacy_fields() -> type:
    """A dataclass of the legacy fields the installed ``TrainingArguments`` lacks (none on 4.3x)."""
    fields = [
        (r.name, r.type, dataclasses.field(default=r.default, repr=False, metadata={
            "help": f"Transformers 4.x (removed in {r.removed}): "
                    + (f"ignored, {r.reason}." if r.served is Served.NO_OP else f"use {r.replacement} ({r.reason}).")
        }))
        for r in _missing_fields()
    ]
    cls = dataclasses.make_dataclass("LegacyTrainingArguments", fields)
    cls.__module__ = __name__
    return cls


def _given(args: Any, r: LegacyName) -> Any:
    value = getattr(args, r.name, r.default)
    return NOT_GIVEN if value == r.default and type(value) is type(r.default) else value


def serve_fields(args: Any) -> None:
    """Map the legacy fields ``args`` was given onto today's ones (before the release's ``__post_init__``)."""
    for r in _missing_fields():
        value = _given(args, r)
        if value is NOT_GIVEN:
            continue
        if value in r.refuse or NOT_GIVEN in r.refuse:
            raise LegacyArgumentError(
                f"{r.flag} {value!r} has no equivalent in the installed Transformers ({r.reason}); "
                + (f"use {r.replacement} instead." if r.replacement else f"drop {r.flag}.")
            )
        _warn(r, stacklevel=5)
        _MAPPERS.get(r.name, _map)(args, r, value)


def _map(args: Any, r: LegacyName, value: Any) -> None:
    if r.served is Served.NO_OP or r.new is None:
        return
    values = dict(r.values)
    setattr(args, r.new, values[value] if r.values and value in values else value)


def _map_fsdp_config(key: str, wrap: Callable[[Any], Any]) -> Callable[[Any, LegacyName, Any], None]:
    def mapper(args: Any, r: LegacyName, value: Any) -> None:
        config = args.fsdp_config
        if config is not None and not isinstance(config, dict):
            raise LegacyArgumentError(
                f"{r.flag} with --fsdp_config {config!r} (a file): put \"{key}\" into that file instead"
            )
        args.fsdp_config = {**(config or {}), key: wrap(value)}

    return mapper


def _map_warmup_ratio(args: Any, r: LegacyName, value: Any) -> None:
    if not args.warmup_steps:  # 4.x: warmup_steps, when given, won over the ratio
        args.warmup_steps = float(value)


def _map_logging_dir(args: Any, r: LegacyName, value: Any) -> None:
    os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(value))


def _map_organization(args: Any, r: LegacyName, value: Any) -> None:
    name = args.hub_model_id or os.path.basename(os.path.normpath(str(args.output_dir)))
    args.hub_model_id = f"{value}/{name.rsplit('/', 1)[-1]}"


_MAPPERS: dict[str, Callable[[Any, LegacyName, Any], None]] = {
    "fsdp_min_num_params": _map_fsdp_config("min_num_params", int),
    "fsdp_transformer_layer_cls_to_wrap": _map_fsdp_config(
        "transformer_layer_cls_to_wrap", lambda v: [c.strip() for c in str(v).split(",") if c.strip()]),
    "warmup_ratio": _map_warmup_ratio,
    "logging_dir": _map_logging_dir,
    "push_to_hub_organization": _map_organization,
}


def sync_fields(args: Any) -> None:
    """After ``__post_init__``: renamed fields read today's value, as the old attribute did."""
    for r in _missing_fields():
        if r.served is Served.RENAMED and r.new is not None and hasattr(args, r.new):
            setattr(args, r.name, getattr(args, r.new))


def legacy_field_names() -> frozenset[str]:
    return frozenset(r.name for r in _missing_fields())


# ---------------------------------------------------------------------- Trainer
def _mentions(fn: Any, name: str) -> bool:
    """Whether the installed function (or module) knows ``name`` (a parameter, or popped from ``**kwargs``)."""
    if callable(fn) and name in inspect.signature(fn).parameters:
        return True
    try:
        return f'"{name}"' in inspect.getsource(fn) or f"'{name}'" in inspect.getsource(fn)
    except (OSError, TypeError):
        return True  # cannot tell: leave the release alone


@functools.cache
def _trainer_rows() -> tuple[LegacyName, ...]:
    init = _release("Trainer").__init__
    return tuple(r for r in by_kind(Kind.TRAINER) if not _mentions(init, r.name))


def trainer_keywords(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``Trainer(**kwargs)`` with the legacy keywords the installed release lacks renamed, and the
    ones 3.x moved into the arguments (``prediction_loss_only=``) as ``{field: value}`` to set there."""
    rows = [r for r in _trainer_rows() if r.name in kwargs]
    if not rows:
        return kwargs, {}
    kwargs, settings = dict(kwargs), {}
    for r in rows:
        assert r.new is not None
        field = r.new.removeprefix("args.") if r.new.startswith("args.") else None
        if field is None and r.new in kwargs:
            raise LegacyArgumentError(f"Trainer got both {r.name}= and {r.new}=; keep {r.new}=")
        _warn(r, stacklevel=4)
        if field is not None:
            settings[field] = kwargs.pop(r.name)
        else:
            kwargs[r.new] = kwargs.pop(r.name)
    return kwargs, settings


def add_trainer_attributes(cls: type) -> None:
    """``trainer.tokenizer`` reads (and sets) ``processing_class`` where the release dropped it."""
    for r in _trainer_rows():
        new = r.new
        assert new is not None
        if hasattr(_release("Trainer"), r.name) or new.startswith("args."):
            continue

        def get(self: Any, r: LegacyName = r, new: str = new) -> Any:
            _warn(r, stacklevel=3)
            return getattr(self, new)

        def set_(self: Any, value: Any, r: LegacyName = r, new: str = new) -> None:
            _warn(r, stacklevel=3)
            setattr(self, new, value)

        setattr(cls, r.name, property(get, set_, doc=f"The 4.x name of ``{new}``."))


# ---------------------------------------------------------------------- module names, from_pretrained
_ABSENT: Any = object()
_CONSTANT = {"False": False, "True": True}


def _function(r: LegacyName, module: Any) -> Callable[..., Any]:
    if r.new is not None:
        target = getattr(module, r.new)

        def mapped(*args: Any, **kwargs: Any) -> Any:
            _warn(r)
            return target()

        return mapped
    answer = _CONSTANT.get(r.replacement)

    def served(*args: Any, **kwargs: Any) -> Any:
        _warn(r)
        return answer

    return served


def _from_pretrained_owners() -> list[Any]:
    transformers = load()
    # Not AutoProcessor & co.: touching them makes 5.25 put a second `transformers` module into
    # sys.modules, so that what install() adds would land on a module the script never sees.
    names = ("PreTrainedModel", "PreTrainedConfig", "PretrainedConfig", "PreTrainedTokenizerBase",
             "AutoConfig", "AutoTokenizer")
    owners = [getattr(transformers, n) for n in names if isinstance(getattr(transformers, n, None), type)]
    auto = load("transformers.models.auto.auto_factory")
    owners += [c for c in (getattr(auto, "_BaseAutoModelClass", None),) if c is not None]
    return [c for c in dict.fromkeys(owners) if "from_pretrained" in vars(c)]


def _serve_keywords(rows: list[LegacyName], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` taking the renamed keywords of ``rows`` under their old names too (a warning each)."""

    @functools.wraps(fn)
    def served(*args: Any, **kwargs: Any) -> Any:
        for r in rows:
            if r.name in kwargs:
                assert r.new is not None
                _warn(r)
                value = kwargs.pop(r.name)
                kwargs.setdefault(r.new, value)
        return fn(*args, **kwargs)

    return served


def _serve_datasets(done: list[tuple[Any, str, Any]]) -> None:
    """``datasets.load_dataset(use_auth_token=)`` & co. and ``datasets.load_metric``, where the
    installed ``datasets`` lacks them.

    The Trainer module imports ``datasets`` itself when it is installed, so importing it here
    costs a script nothing it would not have paid.
    """
    if importlib.util.find_spec("datasets") is None:
        return
    datasets = importlib.import_module("datasets")
    rows = by_kind(Kind.DATASETS)
    for name in DATASETS_LOADERS:
        fn = getattr(datasets, name, None)
        if fn is None:
            continue
        missing = [r for r in rows if not _mentions(sys.modules[fn.__module__], r.name)]
        if missing:
            setattr(datasets, name, _serve_keywords(missing, fn))
            done.append((datasets, name, fn))
    for r in by_kind(Kind.DATASETS_FUNCTION):
        if not hasattr(datasets, r.name):
            setattr(datasets, r.name, _datasets_function(r))
            done.append((datasets, r.name, _ABSENT))


def _datasets_function(r: LegacyName) -> Any:
    """A removed ``datasets`` function, served by :mod:`._legacy_functions`' adapter of that name;
    a moved class (``ArrowWriter``, a renamed row) is the class at its home, subclassed to warn
    when built (datasets 2.x lacks it too, beside Transformers 4.3x, whose hub client
    :mod:`._legacy_functions` does not import with)."""
    if r.served is Served.RENAMED:
        assert r.new is not None, f"datasets.{r.name}: a renamed row names its home"
        module, attribute = r.new.split(":")
        home = getattr(importlib.import_module(module), attribute)

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            _warn(r)
            home.__init__(self, *args, **kwargs)

        return type(r.name, (home,), {"__init__": __init__, "__doc__": home.__doc__, "__module__": "datasets"})
    from . import _legacy_functions

    adapter = getattr(_legacy_functions, r.name)

    @functools.wraps(adapter)
    def served(*args: Any, **kwargs: Any) -> Any:
        _warn(r)
        return adapter(*args, **kwargs)

    return served


def install() -> list[tuple[Any, str, Any]]:
    """Add what the installed release lacks; ``(owner, name, previous or _ABSENT)`` for :func:`uninstall`."""
    # Importing processing_utils (the Trainer does) runs transformers/__init__.py again on 5.x,
    # which puts a new `transformers` module into sys.modules: the names go to every package
    # object in play, the earlier one that code may already hold included.
    earlier = sys.modules.get("transformers")
    load("transformers.processing_utils")
    done: list[tuple[Any, str, Any]] = []
    modules = [(Kind.TOP_LEVEL, m) for m in packages(earlier)] + [(Kind.UTILS, load("transformers.utils"))]
    for kind, module in modules:
        for r in by_kind(kind):
            if not hasattr(module, r.name):
                setattr(module, r.name, _function(r, module))
                done.append((module, r.name, _ABSENT))
    rows = list(by_kind(Kind.FROM_PRETRAINED))
    for owner in _from_pretrained_owners():
        method = vars(owner)["from_pretrained"]
        if not isinstance(method, classmethod):
            continue
        # The module, not the method: 4.x releases pop use_auth_token in helpers the method calls.
        missing = [r for r in rows if not _mentions(sys.modules[owner.__module__], r.name)]
        if missing:
            owner.from_pretrained = classmethod(_serve_keywords(missing, method.__func__))
            done.append((owner, "from_pretrained", method))
    _serve_datasets(done)
    # The rest of the 4.30 surface: module names, gone modules, class members (legacy_table.SURFACE).
    done.append((_legacy_imports.install(packages(earlier)), "state", _ABSENT))
    return done


def uninstall(done: list[tuple[Any, str, Any]]) -> None:
    for owner, name, previous in reversed(done):
        if previous is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, previous)
