"""A cache file from elsewhere that runs code when unpickled: the kept 4.x datasets must never load it."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any


class Detonator:
    """Unpickling it writes ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path.write_text, (self.marker, "unpickled"))


def plant(path: Path, marker: Path) -> bytes:
    """A pickled :class:`Detonator` at ``path`` (4.x's name for a cache); its bytes, to check it was left alone."""
    data = pickle.dumps(Detonator(marker))
    path.write_bytes(data)
    return data
