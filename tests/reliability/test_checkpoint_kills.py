"""Real saves (torch-fsdp2, full and sharded) SIGKILLed at about 30 points each, spread over
every line they run in ``shardcompat/_atomic.py`` and ``shardcompat/checkpoint/`` (plus the last
lines of the commit): each leaves the old or the new checkpoint, whole, and the user's files
byte-identical.  (The writer alone is killed at every one of its lines in test_writer_kills.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._killed_save import check_all, sweep

pytestmark = pytest.mark.reliability


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("fmt", ["full", "sharded"])
def test_saves_killed_at_many_points_leave_old_or_new(tmp_path: Path, fmt: str) -> None:
    results = sweep(tmp_path, fmt, {"count": 25}, timeout=1400)
    steps = check_all(tmp_path, results)
    assert len(steps) >= 25
    assert "again" in results, "no kill fell between the commit point and its end"
