"""Two (or more) torchrun agents on localhost, meeting through a c10d rendezvous: "nodes" for tests.

Each agent gets its own ``--nproc-per-node`` and runs in its own session, so a test can take
a whole "node" away (:meth:`Agents.kill_node`) and :meth:`Agents.wait` kills every agent and
its workers on timeout: a failing test never leaves ranks behind.

The rendezvous store is served by the test process itself (every agent gets ``is_host=false``),
as a cluster's etcd or login-node store would be.  Left to the agents, whichever binds the
endpoint first hosts it: losing that node then ends the job for the survivors, and an agent
that finishes first pulls the store from under the others' shutdown ("failed to shutdown the
rendezvous ... Broken pipe", exit 1 after a good run).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from shardcompat.launch import free_port

ROOT = Path(__file__).resolve().parents[1]
# Quick to notice a dead node, quick to close a round: the defaults suit real clusters, not tests.
FAST_RDZV = "join_timeout=60,last_call_timeout=1,close_timeout=5,keep_alive_interval=1,keep_alive_max_attempt=3"


@dataclass(frozen=True)
class AgentResult:
    """What one agent ended with."""

    returncode: int
    stdout: str
    stderr: str


def _rendezvous_store(port: int) -> Any:
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,  # type: ignore[attr-defined]
                         timeout=timedelta(seconds=300))


class Agents:
    """``torchrun`` agents started together: ``Agents([2, 2], argv)`` is two nodes of two ranks.

    ``argv`` is what follows torchrun's own options (``-m shardcompat train ...`` or a script).
    ``nnodes`` defaults to the number of agents; ``"1:2"`` makes the job elastic.
    """

    def __init__(
        self,
        nproc_per_agent: Sequence[int],
        argv: Sequence[str],
        *,
        nnodes: str | None = None,
        max_restarts: int = 0,
        env: dict[str, str] | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        port = free_port()
        endpoint = f"127.0.0.1:{port}"
        self._store = _rendezvous_store(port)
        run_id = uuid.uuid4().hex
        self._logs: list[tuple[IO[str], IO[str]]] = []
        self.procs: list[subprocess.Popen[str]] = []
        full_env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **(env or {})}
        for nproc in nproc_per_agent:
            command = [
                sys.executable, "-m", "torch.distributed.run",
                "--nnodes", nnodes or str(len(nproc_per_agent)), "--nproc-per-node", str(nproc),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
                "--rdzv-conf", f"{FAST_RDZV},is_host=false", "--max-restarts", str(max_restarts), "--monitor-interval", "0.2",
                *extra, *argv,
            ]
            # Files, not pipes: a chatty agent cannot block on a full pipe while the test waits.
            out = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in close())
            err = tempfile.TemporaryFile("w+")  # noqa: SIM115
            self._logs.append((out, err))
            self.procs.append(subprocess.Popen(command, cwd=ROOT, env=full_env, stdout=out, stderr=err,
                                               text=True, start_new_session=True))

    def kill_node(self, index: int) -> None:
        """Take agent ``index`` and all its workers away at once, as a lost machine would."""
        if self.procs[index].poll() is not None:
            return  # gone already (and its session id may belong to someone else by now)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[index].pid, signal.SIGKILL)

    def wait(self, timeout: float) -> list[AgentResult]:
        """Every agent's exit code and output; on timeout all are killed and ``TimeoutError`` says so."""
        deadline = time.monotonic() + timeout
        try:
            for proc in self.procs:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            tails = self._tails()
            self.close()
            raise TimeoutError(f"the agents ran past {timeout:.0f} s; killed\n{tails}") from None
        results = [AgentResult(p.returncode, *self._read(i)) for i, p in enumerate(self.procs)]
        self.close()
        return results

    def close(self) -> None:
        for index in range(len(self.procs)):
            self.kill_node(index)
        for proc in self.procs:
            proc.wait(timeout=30)
        for logs in self._logs:
            for log in logs:
                log.close()
        self._store = None  # the server stops with its last reference

    def _read(self, index: int) -> tuple[str, str]:
        texts = []
        for log in self._logs[index]:
            log.seek(0)
            texts.append(log.read())
        return texts[0], texts[1]

    def _tails(self) -> str:
        return "\n".join(f"--- agent {i} stderr\n{self._read(i)[1][-3000:]}" for i in range(len(self.procs)))

    def __enter__(self) -> Agents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_agents(nproc_per_agent: Sequence[int], argv: Sequence[str], *, timeout: float = 240,
               **kwargs: Any) -> list[AgentResult]:
    """Start the agents, wait for all, assert that every one succeeded; their results."""
    with Agents(nproc_per_agent, argv, **kwargs) as agents:
        results = agents.wait(timeout)
    for i, result in enumerate(results):
        assert result.returncode == 0, f"agent {i} exited {result.returncode}:\n{result.stderr[-4000:]}"
    return results


def rank0_json(results: Sequence[AgentResult]) -> dict[str, Any]:
    """The JSON report global rank 0 printed: exactly one agent holds it, the others print nothing."""
    printed = [r.stdout for r in results if r.stdout.strip()]
    assert len(printed) == 1, f"expected one report (global rank 0's), got {len(printed)}"
    report: dict[str, Any] = json.loads(printed[0])
    return report


def rank0_reports(results: Sequence[AgentResult]) -> list[dict[str, Any]]:
    """Every JSON report global rank 0 printed, in order: a job whose workers the agent restarted
    after rank 0 had finished prints one per attempt."""
    printed = [r.stdout for r in results if r.stdout.strip()]
    assert len(printed) == 1, f"expected the reports of one agent (global rank 0's), got {len(printed)}"
    decoder, text, at, reports = json.JSONDecoder(), printed[0], 0, []
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        report, at = decoder.raw_decode(text, at)
        reports.append(report)
    return reports
