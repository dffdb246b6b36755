"""Settings shared by every rewriter in one run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FsdpForm", "Settings", "Target", "fsdp_form_for", "legacy_names_in", "needles"]

#: The target syntax: the list syntax or Transformers' FSDP arguments.
Target = Literal["list", "fsdp"]
#: How ``--to fsdp`` writes FSDP: ``fsdp=True`` plus an ``fsdp_config`` dict (current
#: Transformers) or the 4.x ``--fsdp "full_shard offload auto_wrap"`` words.
FsdpForm = Literal["config", "string"]


@dataclass(frozen=True)
class Settings:
    """``to``: the target syntax (``fsdp_form``: which FSDP form); ``local_scripts``: script
    names that define their own boolean ``--sharded_ddp`` (commands running them are held for
    review); ``fairscale_imports``: also rewrite fairscale imports; ``legacy``: apply the
    ``--sharded_ddp`` rules; ``transformers_legacy``: also rewrite the Transformers 4.x names of
    :mod:`shardcompat.transformers.legacy_table` to today's spelling."""

    to: Target = "list"
    fsdp_form: FsdpForm = "config"
    local_scripts: frozenset[str] = frozenset()
    fairscale_imports: bool = False
    legacy: bool = True
    transformers_legacy: bool = False


def needles(settings: Settings) -> tuple[bytes, ...]:
    """The byte strings a file must contain to be looked at (the prefilter)."""
    found = [b"sharded_ddp"] if settings.legacy else []
    if settings.fairscale_imports:
        found.append(b"fairscale")
    if settings.transformers_legacy:
        from ..rules.transformers_legacy.plans import NEEDLES

        found += [name.encode() for name in NEEDLES]
    return tuple(found)


def legacy_names_in(text: str, settings: Settings) -> bool:
    """Whether ``text`` (a code block, a notebook cell) holds a Transformers-legacy name the run asks for."""
    if not settings.transformers_legacy:
        return False
    from ..rules.transformers_legacy.plans import NEEDLES

    return any(name in text for name in NEEDLES)


def fsdp_form_for(transformers: str | None) -> FsdpForm:
    """The FSDP form for a target Transformers release: the 4.x ``--fsdp`` words before 5.0
    (``--transformers 4.40``), else ``fsdp=True`` with ``fsdp_config`` (the default)."""
    if not transformers:
        return "config"
    from packaging.version import InvalidVersion, Version

    try:
        return "string" if Version(transformers) < Version("5") else "config"
    except InvalidVersion as error:
        raise ValueError(f"--transformers {transformers!r}: not a version number; "
                         "give the release to migrate for, e.g. 4.40") from error
