"""Run an unmodified Trainer script with the drop-ins in place of Transformers' own classes.

Inside the script, ``transformers.TrainingArguments``, ``Seq2SeqTrainingArguments``,
``Trainer``, ``Seq2SeqTrainer`` and ``HfArgumentParser`` (and the same names in the modules
that define them, for ``from transformers.trainer import Trainer``) are this package's
subclasses, so ``--sharded_ddp`` parses and shards, and a script's own ``Trainer`` subclass
inherits both.  Transformers' internals keep the classes they were built with.

The same step adds the 4.x names the installed release removed (``is_torch_tpu_available``,
``send_example_telemetry``, ``from_pretrained(use_auth_token=)``...; see :mod:`._legacy`), so
a script of that era imports and runs; :func:`dropins` takes all of it away again.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
from collections.abc import Iterator, Sequence
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
    return replaced


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
