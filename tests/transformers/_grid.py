"""Which of the Trainer grid's cases run: ``SHARDCOMPAT_TRANSFORMERS_GRID``.

- unset or ``lean``: the default suite's cases (the README's test command);
- ``full``: every case (the nox ``transformers`` sessions);
- ``additions``: only what ``full`` adds to ``lean``, for a session whose release the default
  suite has already run the lean cases on (``transformers(current-fairscale)``, for the files
  whose outcome fairscale cannot change: the same cases would run twice on the same release).
"""

from __future__ import annotations

import os

GRID = os.environ.get("SHARDCOMPAT_TRANSFORMERS_GRID") or "lean"
if GRID not in ("lean", "full", "additions"):
    raise ValueError(f"SHARDCOMPAT_TRANSFORMERS_GRID={GRID!r}: expected lean, full or additions")
FULL = GRID in ("full", "additions")  #: the cases only the full grid has run
LEAN = GRID != "additions"  #: the lean grid's cases run
