"""Which implementation serves each fairscale class here: real fairscale or native torch.

Decided by the same capability probes as ``shardcompat.prepare`` (``backends.get(name).probe()``),
once per process, and logged at INFO on ``shardcompat.fairscale``.  ``SHARDCOMPAT_FAIRSCALE``
(``auto``, the default; ``fairscale``; ``native``) overrides the choice: ``fairscale`` turns a
failed probe into an error instead of a fallback.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch

from ..backends import get as get_backend
from ._arguments import FAIRSCALE, NATIVE
from ._setting import ENV, setting
from ._version import MIRRORED_RELEASE, fairscale_api_version

__all__ = ["ENV", "FAMILIES", "Choice", "announce", "choose", "describe", "setting"]

log = logging.getLogger("shardcompat.fairscale")

# OSS and ShardedDataParallel must come from the same library: ShardedDDP drives OSS's internals;
# FSDP's companions follow FSDP (fairscale FSDP relies on fairscale's checkpoint_wrapper).
FAMILIES = {
    "OSS": "sdp",
    "ShardedDataParallel": "sdp",
    "FullyShardedDataParallel": "fsdp",
    "TrainingState": "fsdp",
    "checkpoint_wrapper": "fsdp",
    "is_checkpointing": "fsdp",
    "is_recomputing": "fsdp",
    "disable_checkpointing": "fsdp",
    "ShardedGradScaler": "scaler",
}
_BACKEND = {"sdp": "fairscale-sdp", "fsdp": "fairscale-fsdp"}


@dataclass(frozen=True)
class Choice:
    family: str
    impl: str  # FAIRSCALE or NATIVE
    reason: str


def _fairscale_unusable(family: str) -> str:
    """Why real fairscale cannot serve ``family`` here, or "" if it can."""
    try:
        probe = get_backend(_BACKEND[family]).probe()
    except ImportError as error:  # the backend module itself is not in this shardcompat
        return f"shardcompat has no {_BACKEND[family]} backend here ({error})"
    if not probe:
        return probe.reason
    if family == "fsdp" and not torch.cuda.is_available() and not probe.features.get("cpu_compat"):
        return (f"fairscale {probe.versions.get('fairscale')} FSDP needs CUDA, and shardcompat's CPU "
                "compatibility layer does not fit this release; torch FSDP1 serves it on CPU")
    return ""


@functools.cache
def choose(family: str) -> Choice:
    chosen = setting()
    if family == "scaler":
        sdp = choose("sdp")
        if sdp.impl == FAIRSCALE and torch.cuda.is_available():
            return Choice(family, FAIRSCALE, "fairscale's ShardedGradScaler (CUDA)")
        return Choice(family, NATIVE, "torch's ShardedGradScaler (fairscale's is CUDA-only)")
    if chosen == NATIVE:
        return Choice(family, NATIVE, f"{ENV}=native")
    why_not = _fairscale_unusable(family)
    if not why_not:
        fix = {"sdp": "; ShardedDDP's reduce-bucket/zero_grad trap is fixed",
               "fsdp": "" if torch.cuda.is_available() else "; on CPU through shardcompat's compatibility layer"}
        return Choice(family, FAIRSCALE, f"{_BACKEND[family]} probe passed{fix[family]}")
    if chosen == FAIRSCALE:
        raise RuntimeError(f"{ENV}=fairscale but fairscale cannot serve {family} here: {why_not}")
    return Choice(family, NATIVE, why_not)


@functools.cache
def announce(name: str) -> Choice:
    """The choice for class ``name``, logged the first time it is asked for."""
    choice = choose(FAMILIES[name])
    log.info("shardcompat.fairscale.%s: %s implementation (%s)", name, choice.impl, choice.reason)
    return choice


def describe() -> list[str]:
    """One line per class: which implementation serves it here and why (for ``explain --fairscale``)."""
    lines = []
    for name, family in FAMILIES.items():
        choice = choose(family)
        lines.append(f"{name}: {choice.impl} ({choice.reason})")
    lines.append("auto_wrap, enable_wrap, wrap, default_auto_wrap_policy, config_auto_wrap_policy, auto_wrap_bn, "
                 "get_fsdp_instances, ConfigAutoWrap: shardcompat (with the FullyShardedDataParallel above)")
    lines.append("torch_version: shardcompat")
    lines.append(f"__version__: {fairscale_api_version()} (what version gates read: the installed fairscale's own, "
                 f"else {MIRRORED_RELEASE}, the release the native classes mirror)")
    return lines
