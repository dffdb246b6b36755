"""``SHARDCOMPAT_FAIRSCALE``: the user's say in which library serves the facade's classes.

Read by :mod:`._select` (which implementation serves each class) and :mod:`._version` (which
release ``__version__`` names); it sits below both so that neither imports the other back.
"""

from __future__ import annotations

import os

from ._arguments import FAIRSCALE, NATIVE

__all__ = ["ENV", "setting"]

ENV = "SHARDCOMPAT_FAIRSCALE"


def setting() -> str:
    """``SHARDCOMPAT_FAIRSCALE`` as one of auto, fairscale, native."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", FAIRSCALE, NATIVE):
        raise ValueError(f"{ENV}={value!r}: choose auto, fairscale or native")
    return value
