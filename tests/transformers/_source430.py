"""Transformers 4.30.2's own source files, for the tests that derive a table from them.

The wheel is fetched once with ``pip download`` into a cache (or the folder is taken from
``SHARDCOMPAT_TRANSFORMERS_430_SOURCE``); where neither works the calling test skips, saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

FILES = ("transformers/trainer.py", "transformers/trainer_seq2seq.py", "transformers/training_args.py")


def source_430() -> Path:
    """The ``transformers/`` folder holding :data:`FILES` of 4.30.2."""
    given = os.environ.get("SHARDCOMPAT_TRANSFORMERS_430_SOURCE")
    if given:
        return Path(given)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "shardcompat" / "transformers-4.30.2"
    if not all((cache / name).exists() for name in FILES):
        wheels = cache / "wheel"
        done = subprocess.run([sys.executable, "-m", "pip", "download", "transformers==4.30.2", "--no-deps",
                               "--only-binary", ":all:", "-q", "-d", str(wheels)],
                              capture_output=True, text=True, timeout=300)
        found = sorted(wheels.glob("transformers-4.30.2-*.whl")) if done.returncode == 0 else []
        if not found:
            pytest.skip("needs Transformers 4.30.2's source: set SHARDCOMPAT_TRANSFORMERS_430_SOURCE to its "
                        f"transformers/ folder, or let pip download it ({done.stderr.strip()[-300:]})")
        with zipfile.ZipFile(found[0]) as wheel:
            for name in FILES:
                wheel.extract(name, cache)
    return cache / "transformers"
