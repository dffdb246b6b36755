"""Settings shared by every rewriter in one run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Settings", "Target", "needles"]

#: The target syntax: the list syntax or modern Transformers ``--fsdp``.
Target = Literal["list", "fsdp"]


@dataclass(frozen=True)
class Settings:
    """``to``: the target syntax; ``local_scripts``: script names that define their own boolean
    ``--sharded_ddp`` (commands running them are held for review); ``fairscale_imports``:
    also rewrite fairscale imports."""

    to: Target = "list"
    local_scripts: frozenset[str] = frozenset()
    fairscale_imports: bool = False
    legacy: bool = True


def needles(settings: Settings) -> tuple[bytes, ...]:
    """The byte strings a file must contain to be looked at (the prefilter)."""
    found = [b"sharded_ddp"] if settings.legacy else []
    return (*found, b"fairscale") if settings.fairscale_imports else tuple(found)
