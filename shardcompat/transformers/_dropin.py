"""Run an unmodified Trainer script with the drop-ins in place of Transformers' own classes.

Inside the script, ``transformers.TrainingArguments``, ``Seq2SeqTrainingArguments``,
``Trainer``, ``Seq2SeqTrainer`` and ``HfArgumentParser`` (and the same names in the modules
that define them, for ``from transformers.trainer import Trainer``) are this package's
subclasses, so ``--sharded_ddp`` parses and shards, and a script's own ``Trainer`` subclass
inherits both.  Transformers' internals keep the classes they were built with.

The same step adds the 4.x names the installed release removed (``is_torch_tpu_available``,
``send_example_telemetry``, ``from_pretrained(use_auth_token=)``...; see :mod:`._legacy`), so
a script of that era imports and runs; a ``Trainer`` subclass of that era has its overrides
called in the form it declares (:mod:`._overrides`); and, where fairscale is not installed,
``import fairscale...`` (``from fairscale.optim import OSS`` in a 4.30 ``create_optimizer``)
gives ``shardcompat.fairscale``'s module of the same path.  :func:`dropins` takes all of it
away again.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

from ._api import load, packages

__all__ = ["NAMES", "dropins", "install", "run_script", "uninstall"]

NAMES = ("TrainingArguments", "Seq2SeqTrainingArguments", "Trainer", "Seq2SeqTrainer", "HfArgumentParser")


def _ours() -> dict[str, Any]:
    from . import _arguments, _trainer

    return {name: getattr(_arguments, name, None) or getattr(_trainer, name) for name in NAMES}


def install() -> list[tuple[Any, str, Any]]:
    """Put the drop-ins and the 4.x names in place; returns what :func:`uninstall` undoes."""
    from . import _legacy

    earlier = sys.modules.get("transformers")  # a package object that code may already hold
    replaced: list[tuple[Any, str, Any]] = _legacy.install()  # first: it settles which module is `transformers`
    transformers = load()
    for name, ours in _ours().items():
        original = getattr(transformers, name)
        if original is ours:
            continue
        defining = sys.modules.get(getattr(original, "__module__", ""))
        # Every package object in play (see _api.packages) and the module defining the class.
        for module in dict.fromkeys((*packages(earlier), defining)):
            if module is not None and getattr(module, name, None) is original:
                replaced.append((module, name, original))
                setattr(module, name, ours)
    if _fairscale_missing():
        sys.meta_path.append(_FAIRSCALE)
        replaced.append((sys, "meta_path", _FAIRSCALE))
    return replaced


class _FairscaleAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``fairscale`` and ``fairscale.*`` as the facade's modules (only while installed)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "fairscale" and not fullname.startswith("fairscale."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module: ModuleType = importlib.import_module("shardcompat." + spec.name)
        return module

    def exec_module(self, module: ModuleType) -> None:
        pass  # the facade's module, already executed

    def forget(self) -> None:
        for name in [n for n in sys.modules if n == "fairscale" or n.startswith("fairscale.")]:
            if getattr(sys.modules[name], "__name__", "").startswith("shardcompat."):
                del sys.modules[name]


_FAIRSCALE = _FairscaleAlias()


def _fairscale_missing() -> bool:
    if _FAIRSCALE in sys.meta_path:
        return False
    try:
        return importlib.util.find_spec("fairscale") is None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def dropins() -> Iterator[None]:
    """The drop-ins in place for the duration of the block."""
    replaced = install()
    try:
        yield
    finally:
        uninstall(replaced)


def uninstall(replaced: list[tuple[Any, str, Any]]) -> None:
    """Undo :func:`install`: every name back as it was, the added ones gone."""
    from . import _legacy

    if (sys, "meta_path", _FAIRSCALE) in replaced:
        replaced = [r for r in replaced if r != (sys, "meta_path", _FAIRSCALE)]
        if _FAIRSCALE in sys.meta_path:
            sys.meta_path.remove(_FAIRSCALE)
        _FAIRSCALE.forget()
    _legacy.uninstall(replaced)


def run_script(script: str, argv: Sequence[str] = ()) -> None:
    """Run ``script`` as ``__main__`` with ``argv``, the drop-ins in place, in this process."""
    path = os.path.abspath(script)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(path))
    try:
        with dropins():
            runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
