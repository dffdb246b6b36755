"""fairscale's ``torch_version()``: torch's release as a tuple of ints, for version gates
such as ``torch_version() >= (1, 12, 0)`` that fairscale-era code keeps."""

from __future__ import annotations

import re

import torch

__all__ = ["torch_version"]

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def torch_version(version: str = torch.__version__) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; local and pre-release tags are dropped, as fairscale does.
    A string without a release number gives ``()`` (fairscale's answer for one it cannot parse)."""
    found = _RELEASE.match(version)
    if found is None:
        return ()
    return tuple(int(part or 0) for part in found.groups())
