"""fairscale's version helpers: ``torch_version()`` and the ``__version__`` feature gates read.

fairscale-era code gates features on both: ``torch_version() >= (1, 12, 0)``, and (the
Transformers 4.x ``Trainer`` among it) ``version.parse(fairscale.__version__) >= version.parse("0.3")``
before it imports ``FullyShardedDataParallel``.  The facade's ``__version__`` is the fairscale API it
serves, so such a gate takes the branch it took under fairscale.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import torch

from ._arguments import NATIVE
from ._setting import setting

__all__ = ["MIRRORED_RELEASE", "fairscale_api_version", "torch_version"]

MIRRORED_RELEASE = "0.4.13"  # the newest fairscale, whose API the native classes mirror

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def torch_version(version: str = torch.__version__) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; local and pre-release tags are dropped, as fairscale does.
    A string without a release number gives ``()`` (fairscale's answer for one it cannot parse)."""
    found = _RELEASE.match(version)
    if found is None:
        return ()
    return tuple(int(part or 0) for part in found.groups())


@functools.cache
def fairscale_api_version() -> str:
    """The installed fairscale's own version while the facade may delegate to it (an older
    release brings its older API, so a gate must see that release), else ``MIRRORED_RELEASE``.

    Read from the distribution's metadata, not by importing fairscale or running the probes,
    so the answer is cheap; decided once per process, as the classes' backing is.
    """
    from ..backends._fairscale_common import fairscale_version

    installed = fairscale_version()
    return installed if installed is not None and setting() != NATIVE else MIRRORED_RELEASE


@functools.cache
def _version_tuple() -> tuple[int, ...]:
    return torch_version(fairscale_api_version())


def __getattr__(name: str) -> Any:
    """``__version__`` and ``__version_tuple__`` (fairscale 0.4's ``fairscale.version``), on first
    access rather than at import, so that ``SHARDCOMPAT_FAIRSCALE`` set before then counts."""
    if name == "__version__":
        return fairscale_api_version()
    if name == "__version_tuple__":
        return _version_tuple()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
