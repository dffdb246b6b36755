"""``shardcompat train`` with faults injected, for the tests that kill workers (run by torchrun).

``SHARDCOMPAT_CHAOS=DIR;WHAT,WHAT...`` where each WHAT is ``kill@RANK:STEP`` (that global rank
SIGKILLs itself as it starts step STEP), ``node@RANK:STEP`` (the same, and first its agent and
the agent's other workers: a lost machine) or ``save@STEP`` (rank 0 SIGKILLs itself while the
step-STEP checkpoint is written, after its files and before its rename into place).  Each
fault fires once per job: a marker file in DIR records it before the kill, so the restarted
attempt goes past it.  Everything else is the real command: ``python chaos_train.py ARGS``
is ``shardcompat train ARGS``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any


def _faults() -> tuple[Path, list[str]]:
    spec = os.environ["SHARDCOMPAT_CHAOS"]
    folder, _, faults = spec.partition(";")
    return Path(folder), [f for f in faults.split(",") if f]


def _node_pids() -> list[int]:
    """This worker's agent and the agent's other workers (Linux /proc; empty elsewhere)."""
    agent = os.getppid()
    children: list[int] = []
    for task in Path(f"/proc/{agent}/task").glob("*/children"):
        children += [int(pid) for pid in task.read_text().split()]
    return [agent, *(pid for pid in children if pid != os.getpid())]


def _fire(fault: str) -> None:
    folder, _ = _faults()
    marker = folder / fault.replace("@", "-at-").replace(":", "-step-")
    try:
        marker.touch(exist_ok=False)  # once per job, whichever attempt gets here first
    except FileExistsError:
        return
    print(f"chaos: {fault} (pid {os.getpid()})", file=sys.stderr, flush=True)
    if fault.startswith("node@"):
        for pid in _node_pids():
            os.kill(pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    import shardcompat._atomic as atomic
    import shardcompat.train as train
    from shardcompat.cli import main as cli

    _, faults = _faults()
    rank = int(os.environ["RANK"])
    step_of = train._step
    commit = atomic.commit

    def step(prepared: Any, config: Any, rank_: int, step: int, *args: Any) -> Any:
        for kind in ("kill", "node"):
            if f"{kind}@{rank}:{step}" in faults:
                _fire(f"{kind}@{rank}:{step}")
        return step_of(prepared, config, rank_, step, *args)

    def commit_then_maybe_die(tmp: Path, path: Path) -> None:
        fault = f"save@{Path(path).name.removeprefix('step-')}"
        if rank == 0 and fault in faults:
            _fire(fault)
        commit(tmp, path)

    train._step = step  # type: ignore[assignment]
    atomic.commit = commit_then_maybe_die
    return cli(["train", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
