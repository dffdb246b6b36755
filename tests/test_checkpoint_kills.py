"""A real ``save_checkpoint`` (torch-fsdp2, full format) into a folder holding the user's files
and an earlier checkpoint, SIGKILLed at points from start to end: every load finds the old or the
new checkpoint, never a mix, and the user's files byte-identical.  The sweep over many more
points, and the sharded format, run in tests/reliability/test_checkpoint_kills.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._killed_save import check_all, sweep

pytestmark = pytest.mark.slow


def test_a_killed_save_leaves_the_old_or_the_new_checkpoint(tmp_path: Path) -> None:
    results = sweep(tmp_path, "full", {"fractions": [0.02, 0.5, 0.97]}, timeout=300)
    check_all(tmp_path, results)
