"""Settings shared by every rewriter in one run."""

from __future__ import annotations

from dataclasses import dataclass

from .flags import Target

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    """``to``: the target syntax; ``local_scripts``: script names that define their own boolean
    ``--sharded_ddp`` (commands running them are held for review); ``fairscale_imports``:
    also rewrite fairscale imports."""

    to: Target = "list"
    local_scripts: frozenset[str] = frozenset()
    fairscale_imports: bool = False
    legacy: bool = True
