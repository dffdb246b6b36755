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
from collections.abc import Callable
from typing import Any

__all__ = ["INSTALL_HINT", "accepts", "has_field", "load"]

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
