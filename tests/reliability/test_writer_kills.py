"""The atomic writer SIGKILLed at every line it runs while replacing an earlier write among
the user's files: each kill leaves the old or the new files, never a mix (test_atomic samples
every 37th line in the default suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_atomic import kill_sweep

pytestmark = pytest.mark.reliability


@pytest.mark.timeout(900)
def test_a_kill_at_every_line_of_a_write_leaves_old_or_new(tmp_path: Path) -> None:
    assert len(kill_sweep(tmp_path, every=1)) > 200
