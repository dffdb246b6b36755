"""Stock ``torchrun`` for the reference runs of ported or migrated scripts, plus the exit guard.

Without the guard, torch's gloo threads now and then abort a rank that has finished its work
at interpreter exit (see shardcompat/_exit_guard.py; seen in these very runs in CI), and a
reference run fails for a reason that is not the script's.  Only that one module is loaded,
from its file: the reference run imports nothing else of shardcompat.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from pathlib import Path

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__]

if __name__ == "__main__":  # a rank: python _stock.py SCRIPT ARGS...
    guard = Path(__file__).resolve().parents[2] / "shardcompat" / "_exit_guard.py"
    spec = importlib.util.spec_from_file_location("_shardcompat_exit_guard", guard)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    runpy.run_path(sys.argv[0], run_name="__main__")
