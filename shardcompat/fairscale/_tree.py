"""fairscale's public module tree (0.1.7-0.4.13), mirrored: what each path serves and refuses.

``TREE`` is the one table: for each module path (relative to ``fairscale``), the names fairscale
offered there that the facade serves and those it does not (:mod:`._unserved` says why).  Each
mirrored module is a small file that calls :func:`attach`, which gives it a ``__getattr__``
resolving its served names (the same object on every path, see :mod:`._classes`), refusing the
unserved ones (``UnservedAttribute``) and naming a did-you-mean for typos.  :class:`_Finder`
covers the import forms a module ``__getattr__`` cannot: ``import
shardcompat.fairscale.nn.model_parallel`` and, since Python reports a ``from m import X`` whose
``__getattr__`` raised an ``AttributeError`` as a bare "cannot import name", the ``from``
import of an unserved name or of a typo (``UnservedImport``, with the same text).  :func:`markdown_table` is the
served/unserved listing of ``docs/fairscale-facade.md``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, NamedTuple

from ._unserved import (
    UNSERVED,
    UNSERVED_MODULES,
    UnservedAttribute,
    UnservedImport,
    module_refusal,
    refusal,
)

__all__ = ["PACKAGE", "TREE", "Node", "Verdict", "attach", "install", "markdown_table", "resolve",
           "unserved_modules_table", "unserved_names_table"]

PACKAGE = __package__ or "shardcompat.fairscale"


class Node(NamedTuple):
    served: tuple[str, ...]
    unserved: tuple[str, ...] = ()


_WRAP = ("auto_wrap", "config_auto_wrap_policy", "default_auto_wrap_policy", "enable_wrap", "wrap")
_CHECKPOINT = ("checkpoint_wrapper", "is_checkpointing", "is_recomputing")
_FSDP = ("FullyShardedDataParallel", "TrainingState", "auto_wrap_bn", "get_fsdp_instances")
# What fairscale's own modules define for themselves: public by name only (0.1.7-0.4.13).
_CHECKPOINT_INTERNALS = ("CheckpointFunction", "autocast", "get_rng_state", "is_autocast_enabled", "set_rng_state")
_FSDP_INTERNALS = ("alloc_storage_", "cast_buffers_", "cast_floats_to_right_precision", "cast_inputs_to_fp16",
                   "free_storage_", "p_assert")

TREE: dict[str, Node] = {
    # shardcompat.fairscale itself keeps its flat names (fairscale's root has only ``nn`` and its version).
    "": Node(("OSS", "FullyShardedDataParallel", "ShardedDataParallel", "ShardedGradScaler", "TrainingState",
              "auto_wrap", "auto_wrap_bn", "checkpoint_wrapper", "config_auto_wrap_policy",
              "default_auto_wrap_policy", "enable_wrap", "get_fsdp_instances", "is_checkpointing",
              "is_recomputing", "wrap", "__version__", "__version_tuple__"), tuple(UNSERVED)),
    "nn": Node(("FullyShardedDataParallel", "ShardedDataParallel", "checkpoint_wrapper", *_WRAP),
               ("FlattenParamsWrapper", "MOELayer", "Top2Gate", "Pipe", "PipeRPCWrapper")),
    "nn.data_parallel": Node((*_FSDP, "ShardedDataParallel"), ("no_pre_load_state_dict_hook", "OffloadConfig")),
    "nn.data_parallel.fully_sharded_data_parallel": Node(
        _FSDP, ("no_pre_load_state_dict_hook", "OffloadConfig", *_FSDP_INTERNALS)),
    "nn.data_parallel.sharded_ddp": Node(("ShardedDataParallel",)),
    "nn.checkpoint": Node(_CHECKPOINT),
    "nn.checkpoint.checkpoint_activations": Node((*_CHECKPOINT, "disable_checkpointing"), (
        *_CHECKPOINT_INTERNALS, "ThreadLocal", "ThreadLocalCheckpointingState", "thread_local", "enable_checkpointing",
        "enable_recomputing")),
    "nn.misc": Node(("checkpoint_wrapper",), ("FlattenParamsWrapper", "GradBucket", "ParamBucket")),
    "nn.misc.checkpoint_activations": Node(("checkpoint_wrapper",), _CHECKPOINT_INTERNALS),  # its home before 0.3.7
    "nn.misc.flatten_params_wrapper": Node((), ("FlattenParamsWrapper", "FlatParameter", "FlatTypes", "ParamGroups")),
    "nn.wrap": Node(_WRAP),
    "nn.wrap.auto_wrap": Node((*_WRAP, "ConfigAutoWrap")),
    "optim": Node(("OSS",), ("AdaScale", "AdaScaleWrapper", "GradScaler", "Adam", "Precision")),
    "optim.oss": Node(("OSS",)),
    "optim.grad_scaler": Node(("ShardedGradScaler",), ("GradScaler", "OptState")),
    "utils": Node(("torch_version",)),  # fairscale.internal's name before 0.4.7
    "utils.version": Node(("torch_version",)),
    "internal": Node(("torch_version",)),
    "internal.version": Node(("torch_version",)),
    "version": Node(("__version_tuple__",)),  # 0.4.4 on; the root serves __version__ (and this) in every release
}


class Verdict(NamedTuple):
    """What ``shardcompat.fairscale`` makes of a dotted fairscale path (see :func:`resolve`)."""

    kind: str  # "served" (a name), "module" (a mirrored module), "unserved" or "unknown"
    reason: str = ""  # for "unserved": the refusal text


def resolve(dotted: str, *, module: bool = False) -> Verdict:
    """``fairscale.optim.OSS`` -> served; ``fairscale.nn`` -> module; ``fairscale.optim.AdaScale``
    or ``fairscale.nn.model_parallel.x`` -> unserved, with the reason; anything else unknown.

    Attributes after a served name (``fairscale.optim.OSS.step``) belong to it.  As attribute
    lookups do in fairscale, a package's served name wins over its submodule of the same name
    (``fairscale.nn.wrap`` is the function); ``module=True`` reads ``dotted`` as an import's
    module path instead, where the submodule is meant.  The migration tool asks this before it
    swaps a prefix, so it moves exactly what the facade serves.
    """
    parts = dotted.split(".")
    if parts[0] != "fairscale":
        return Verdict("unknown")
    path = ""
    for part in parts[1:]:
        child = _join(path, part)
        node = TREE[path]
        if part in node.served and not module:
            return Verdict("served")
        if child in TREE:
            path = child
            continue
        refused = _unserved_module(child)
        if refused is not None:
            return Verdict("unserved", module_refusal(refused))
        if part in node.served:
            return Verdict("served")
        if part in node.unserved:
            return Verdict("unserved", _refusal(part))
        return Verdict("unknown")
    return Verdict("module")


def _relative(module: str) -> str:
    return module[len(PACKAGE) + 1:] if module != PACKAGE else ""


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _children(path: str) -> list[str]:
    """The child module names under ``path``, mirrored or refused."""
    prefix = f"{path}." if path else ""
    return sorted({p[len(prefix):].split(".", 1)[0] for p in (*TREE, *UNSERVED_MODULES)
                   if p.startswith(prefix) and p != path})


def _unserved_module(path: str) -> str | None:
    """``path`` or the nearest parent of it that the facade refuses."""
    parts = path.split(".")
    for end in range(1, len(parts) + 1):
        if ".".join(parts[:end]) in UNSERVED_MODULES:
            return ".".join(parts[:end])
    return None


def where(name: str) -> list[str]:
    """Every fairscale module path that offered ``name`` (served or not), root excluded."""
    return [f"fairscale.{path}" for path, node in TREE.items()
            if path and (name in node.served or name in node.unserved)]


def _refusal(name: str) -> str:
    return refusal(name, ", ".join(where(name)))


def _missing(module: str, name: str) -> AttributeError:
    path = _relative(module)
    node = TREE[path]
    known = [*node.served, *node.unserved, *_children(path)]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else (
        f"; it serves {', '.join(node.served)}" if node.served else "")
    return AttributeError(f"module {module!r} has no attribute {name!r}{hint}")


class _Mirrored(ModuleType):
    """A mirrored module whose served names are not shadowed by its submodules.

    Importing ``nn.wrap.auto_wrap`` binds the submodule on ``nn.wrap`` under the name of the
    function ``nn.wrap`` serves; in fairscale the package's own ``from .auto_wrap import
    auto_wrap`` runs afterwards and the function wins.  Here the binding is declined instead.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ModuleType) and name in TREE[_relative(self.__name__)].served:
            return
        super().__setattr__(name, value)


def attach(module: str) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for the mirrored module named ``module``.

    Called from the module's own body.  Every mirrored module is also made a namespace for
    the import system (an empty ``__path__``): ``from m import X`` then asks :class:`_Finder`
    for ``m.X`` when ``m.X`` is not an attribute, so that an unserved ``X`` is explained there.
    """
    path = _relative(module)
    node = TREE[path]
    this = sys.modules[module]
    if not hasattr(this, "__path__"):
        this.__path__ = []  # type: ignore[attr-defined]
    this.__class__ = _Mirrored
    children = _children(path)

    def __getattr__(name: str) -> Any:
        if name in node.served:
            from ._classes import implementation

            return implementation(name)
        if name in node.unserved:
            raise UnservedAttribute(_refusal(name), name=name, obj=this)
        if name in children:
            refused = _join(path, name)
            if refused in UNSERVED_MODULES:
                raise UnservedAttribute(module_refusal(refused), name=name, obj=this)
            return importlib.import_module(f"{module}.{name}")
        raise _missing(module, name)

    def __dir__() -> list[str]:
        mirrored = [c for c in children if _join(path, c) in TREE]
        return sorted({*vars(this), *node.served, *mirrored})

    return __getattr__, __dir__, [name for name in node.served if not name.startswith("_")]


class _Finder(importlib.abc.MetaPathFinder):
    """Explains, as ``ImportError``, the facade paths that no file provides.

    Consulted after the ordinary finders, so only for names under ``shardcompat.fairscale``
    that are not real modules: a refused fairscale module (or anything under one), an
    unserved name reached through ``from m import X``, or a typo of a served name.  Anything
    else is left to the import system (``None``: the usual ``ModuleNotFoundError``).
    """

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(f"{PACKAGE}."):
            return None
        relative = _relative(fullname)
        refused = _unserved_module(relative)
        if refused is not None:
            raise UnservedImport(module_refusal(refused), name=fullname)
        parent, _, name = relative.rpartition(".")
        node = TREE.get(parent)
        if node is None or name.startswith("_"):
            return None
        if name in node.unserved:
            raise UnservedImport(_refusal(name), name=_join(PACKAGE, parent))
        if name in node.served:  # served, but resolving it failed (say, a fairscale too old for it)
            from ._classes import implementation

            try:
                implementation(name)
            except AttributeError as error:
                raise UnservedImport(str(error), name=_join(PACKAGE, parent)) from error
            return None
        close = difflib.get_close_matches(name, [*node.served, *_children(parent)], n=1)
        if close:
            raise ImportError(f"cannot import name {name!r} from {_join(PACKAGE, parent)!r}; did you mean "
                              f"{close[0]!r}?", name=_join(PACKAGE, parent))
        return None


_FINDER = _Finder()


def install() -> None:
    """Put the finder last on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_FINDER)


def markdown_table() -> str:
    """Every mirrored path with what it serves and refuses, for ``docs/fairscale-facade.md``."""
    rows = ["| fairscale module | shardcompat module | served | not served (ImportError says why) |",
            "|---|---|---|---|"]
    for path, node in TREE.items():
        if not path:
            continue
        served = ", ".join(f"`{n}`" for n in node.served) or "-"
        refused = ", ".join(f"`{n}`" for n in node.unserved) or "-"
        rows.append(f"| `fairscale.{path}` | `{PACKAGE}.{path}` | {served} | {refused} |")
    return "\n".join(rows)


def unserved_modules_table() -> str:
    """The fairscale modules not mirrored, for ``docs/fairscale-facade.md``."""
    rows = ["| fairscale module | why it is not served | use instead |", "|---|---|---|"]
    rows += [f"| `fairscale.{path}` | {row.why} | {row.instead} |" for path, row in UNSERVED_MODULES.items()]
    return "\n".join(rows)


def unserved_names_table() -> str:
    """The fairscale names not served inside mirrored modules, for ``docs/fairscale-facade.md``."""
    rows = ["| fairscale name | offered at | why it is not served | use instead |", "|---|---|---|---|"]
    rows += [f"| `{name}` | {', '.join(where(name)) or '-'} | {row.why} | {row.instead} |"
             for name, row in UNSERVED.items()]
    return "\n".join(rows)
