"""The installed Transformers, imported once, and what its API offers.

This subpackage runs against whichever Transformers release is installed (4.x releases that
still had ``sharded_ddp`` and the 5.x ones that removed it), so it asks the release what it
has (fields, parameters, hooks) instead of comparing version strings, as the backends do.
Everything is typed ``Any`` on purpose: the installed release's own annotations describe one
release, and this code must fit all of them.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["INSTALL_HINT", "accepts", "has_field", "load", "packages"]

INSTALL_HINT = "pip install 'shardcompat[transformers]'"


def load(module: str = "transformers") -> Any:
    """``transformers`` (or one of its modules), or an ImportError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"shardcompat.transformers needs Hugging Face Transformers and Accelerate ({error}); "
            f"install them with: {INSTALL_HINT}"
        ) from error


def has_field(cls: type, name: str) -> bool:
    """Whether the dataclass ``cls`` (e.g. this release's ``TrainingArguments``) declares ``name``."""
    return any(f.name == name for f in dataclasses.fields(cls))


def accepts(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes a parameter called ``name`` (releases add and drop them)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def packages(*known: Any) -> list[Any]:
    """Every ``transformers`` package object in play: ``sys.modules``' current one, ``known``
    (objects taken earlier), and any other module's global ``transformers``.

    Importing ``transformers.processing_utils`` runs ``transformers/__init__.py`` again on 4.34
    and 5.x and puts a new package object into ``sys.modules``; code that imported Transformers
    before holds the earlier one, so whatever the installers add must land on each of them.
    """
    found: dict[int, Any] = {}
    candidates = [load(), *known]
    for module in list(sys.modules.values()):
        held = getattr(module, "__dict__", {}).get("transformers")
        if isinstance(held, ModuleType):
            candidates.append(held)
    for module in candidates:
        if isinstance(module, ModuleType) and module.__name__ == "transformers":
            found.setdefault(id(module), module)
    return list(found.values())
