"""Run a function on N local ranks, and never leave the others hanging when one fails.

Used by ``shardcompat train``, training scripts and the distributed tests.  Children come
from a forkserver that has imported torch once, so a 2-rank job starts in well under a
second instead of importing torch in every child.  Results travel through per-rank files,
which survive a rank being killed (a queue would not).

Inside a worker that a launcher already started (``torchrun``, or a process group that is
already initialised), :func:`spawn` starts nothing: it runs the function on this rank, so
one script works both ways.  There it sets up the process group through
:mod:`shardcompat._rendezvous`, so a group that torchrun restarts after a lost worker starts
cleanly instead of meeting the dead attempt's addresses.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _exit_guard
from ._rendezvous import agent_store_outlives_attempts, attempt_store

__all__ = [
    "WorkerFailed", "WorkerTimeout", "default_collective_timeout", "deferred_ctrl_c", "free_port", "fresh_processes",
    "init_launched_group", "launched", "spawn",
]


class WorkerFailed(RuntimeError):
    """A rank raised or died; ``rank`` is the first to fail, ``details`` its traceback.

    ``stalled`` lists the ranks still running when it failed: when the failure is a
    collective timeout, those are the ranks that stopped taking part.  ``error`` is the
    exception the rank raised, where it could travel (``None`` for a killed rank), so a
    caller can tell a refusal it reports in one line from a crash.
    """

    def __init__(
        self, rank: int, exitcode: int | None, details: str, stalled: Sequence[int] = (),
        error: BaseException | None = None,
    ) -> None:
        how = f"exit code {exitcode}" if exitcode not in (None, 1) else "an exception"
        hint = ""
        if stalled:
            hint = (f"\n(rank(s) {', '.join(map(str, stalled))} were still running when it failed; "
                    "if this is a timeout, they are the ones that stopped taking part)")
        super().__init__(f"rank {rank} failed with {how}:\n{details}".rstrip() + hint)
        self.rank = rank
        self.exitcode = exitcode
        self.details = details
        self.stalled = tuple(stalled)
        self.error = error


class WorkerTimeout(RuntimeError):
    """The job ran past its time limit; every rank was stopped."""


def default_collective_timeout(backend: str) -> float:
    """torch's own limit on one collective for ``backend``, in seconds (what ``init_process_group``
    uses when given none: 10 minutes for NCCL where torch has it, 30 minutes otherwise)."""
    from torch.distributed import constants

    nccl = getattr(constants, "default_pg_nccl_timeout", None)
    if backend == "nccl" and isinstance(nccl, datetime.timedelta):
        return nccl.total_seconds()
    return constants.default_pg_timeout.total_seconds()


def _checked_limits(timeout: float | None, collective_timeout: float | None, backend: str) -> float:
    """The collective limit to use; a limit that is not a positive number of seconds is refused."""
    meaning = {"timeout": "no limit on the whole job", "collective_timeout": "torch's default"}
    for name, value in (("timeout", timeout), ("collective_timeout", collective_timeout)):
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"spawn({name}={value!r}): a limit is a positive number of seconds, "
                             f"or None ({meaning[name]})")
    return default_collective_timeout(backend) if collective_timeout is None else float(collective_timeout)


def _job_limit_hit(timeout: float, what: str) -> WorkerTimeout:
    """The failure at the whole-job limit: which limit it was and how to raise it."""
    return WorkerTimeout(f"{what} ran past its {timeout:g} s limit and was stopped: that is the job limit "
                         "(spawn(timeout=...), shardcompat train --timeout), which bounds the whole job; "
                         "raise it, or leave it out for no limit")


def _collective_hint(details: str, collective_timeout: float) -> str:
    """What a timed-out collective's failure adds: which limit it was and how to raise it."""
    text = details.lower()
    if "timed out" not in text and "timeout" not in text:
        return ""
    return (f"\n(if a collective timed out: the collective limit is {collective_timeout:g} s; raise it with "
            "spawn(collective_timeout=...) or shardcompat train --collective-timeout)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    world_size: int
    port: int
    backend: str
    collective_timeout: float
    threads: int
    out: str
    env: tuple[tuple[str, str], ...]


def _worker(job: _Job, rank: int) -> None:
    out = Path(job.out)
    env = dict(job.env)
    # A caller may pretend one machine is several nodes (LOCAL_WORLD_SIZE=2 of 4 ranks).
    local = int(env.get("LOCAL_WORLD_SIZE", job.world_size))
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(job.port),
        RANK=str(rank),
        LOCAL_RANK=str(rank % local),
        WORLD_SIZE=str(job.world_size),
        LOCAL_WORLD_SIZE=str(local),
    )
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(job.threads)
    try:
        _accept_ctrl_c()
        if job.backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(
            job.backend,
            rank=rank,
            world_size=job.world_size,
            timeout=datetime.timedelta(seconds=job.collective_timeout),
        )
        result = job.fn(rank, job.world_size, *job.args)
        (out / f"result-{rank}.tmp").write_bytes(pickle.dumps(result))
        os.replace(out / f"result-{rank}.tmp", out / f"result-{rank}.pkl")
        dist.destroy_process_group()
    except BaseException as error:
        # The parent reports it; exiting quietly keeps stderr to one traceback per failure.
        with contextlib.suppress(OSError):  # gone: the parent was interrupted and has cleaned up
            (out / f"error-{rank}.txt").write_text(traceback.format_exc())
        _save_error(out / f"error-{rank}.pkl", error)
        raise SystemExit(1) from None


def _save_error(path: Path, error: BaseException) -> None:
    """The exception itself for the parent, where it pickles (the traceback text always travels)."""
    with contextlib.suppress(Exception):
        path.write_bytes(pickle.dumps(error.error if isinstance(error, WorkerFailed) else error))


def _load_error(path: Path) -> BaseException | None:
    """What :func:`_save_error` wrote: this job's own child wrote it, so it is trusted."""
    try:
        error = pickle.loads(path.read_bytes())
    except Exception:
        return None
    return error if isinstance(error, BaseException) else None


_LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def launched() -> bool:
    """Whether this process is already one rank of a job (torchrun's environment, or a group)."""
    if all(name in os.environ for name in _LAUNCHER_ENV):
        return True
    dist = sys.modules.get("torch.distributed")  # never import torch just to ask
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def init_launched_group(backend: str = "gloo", collective_timeout: float | None = None) -> None:
    """``init_process_group`` for a rank that torchrun started, safe across torchrun restarts.

    What ``dist.init_process_group(backend)`` does from torchrun's environment, except that
    where torchrun shares its store across restarts each attempt gets its own prefix in it
    (:mod:`shardcompat._rendezvous`), so a restarted group cannot fail on the previous
    attempt's addresses.  Call it instead of ``init_process_group`` in a script run by
    ``torchrun --max-restarts``.  ``collective_timeout`` (seconds) bounds every collective;
    ``None`` is torch's default for ``backend`` (:func:`default_collective_timeout`).
    """
    import torch.distributed as dist

    _exit_guard.install()
    timeout = datetime.timedelta(seconds=_checked_limits(None, collective_timeout, backend))
    store, rank, world = attempt_store(timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def _run_here(
    fn: Callable[..., Any], args: Sequence[Any], backend: str, collective_timeout: float | None
) -> list[Any]:
    """Run ``fn`` as this launcher-started rank; every rank's result, gathered to all."""
    import torch
    import torch.distributed as dist

    owned = not dist.is_initialized()
    if owned:
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        init_launched_group(backend, collective_timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        try:
            result = fn(rank, world, *args)
        except Exception as error:
            # The launcher stops the other ranks; the message names this one, as spawn's does.
            raise WorkerFailed(rank, None, traceback.format_exc(), error=error) from error
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, result)
        return gathered
    finally:
        if owned:
            dist.destroy_process_group()


def fresh_processes() -> bool:
    """Whether ``spawn(..., fresh=True)`` runs ``fn`` in processes that did nothing before.

    Started here, every rank is a new process anyway.  Under torchrun a rank's children can
    form a new group each time only through the agent's store, which outlives them
    (:mod:`shardcompat._rendezvous` gives each group its own prefix); without it rank 0
    hosts the store itself, and a second group in a row could meet the first one's store.
    A process group this process already holds cannot be handed to a child either.
    """
    if not launched():
        return True
    dist = sys.modules.get("torch.distributed")
    held = bool(dist is not None and dist.is_available() and dist.is_initialized())
    return not held and agent_store_outlives_attempts() and all(name in os.environ for name in _LAUNCHER_ENV)


def _run_in_child(
    fn: Callable[..., Any], args: Sequence[Any], backend: str, timeout: float | None, collective_timeout: float
) -> list[Any]:
    """:func:`_run_here` in a new child of this launcher-started rank; its result, or its failure raised here.

    torchrun stops a job by killing each worker's process group, which holds this child too.
    """
    rank = int(os.environ["RANK"])
    with tempfile.TemporaryDirectory(prefix="shardcompat-") as out:
        proc = _context().Process(target=_child, args=(fn, tuple(args), backend, collective_timeout, out))
        proc.start()
        try:
            proc.join(timeout)
            if proc.is_alive() and timeout is not None:
                raise _job_limit_hit(timeout, f"rank {rank}")
        finally:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        result = Path(out) / "result.pkl"
        if proc.exitcode == 0 and result.exists():
            gathered: list[Any] = pickle.loads(result.read_bytes())
            return gathered
        error = Path(out) / "error.pkl"
        if error.exists():
            failed, details = pickle.loads(error.read_bytes())
            raise WorkerFailed(failed, None, details + _collective_hint(details, collective_timeout),
                               error=_load_error(Path(out) / "exception.pkl"))
        raise WorkerFailed(rank, proc.exitcode, "(no traceback: the process was killed)")


def _child(
    fn: Callable[..., Any], args: tuple[Any, ...], backend: str, collective_timeout: float | None, out: str
) -> None:
    """The body of :func:`_run_in_child`'s process: results and failures travel through files."""
    folder = Path(out)
    try:
        _accept_ctrl_c()
        result = _run_here(fn, args, backend, collective_timeout)
    except BaseException as error:
        failed = (error.rank, error.details) if isinstance(error, WorkerFailed) else (
            int(os.environ["RANK"]), traceback.format_exc())
        (folder / "error.pkl").write_bytes(pickle.dumps(failed))
        _save_error(folder / "exception.pkl", error)
        raise SystemExit(1) from None
    (folder / "result.tmp").write_bytes(pickle.dumps(result))
    os.replace(folder / "result.tmp", folder / "result.pkl")


def _context() -> Any:
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["torch", "torch.distributed", "shardcompat"])
        _start_forkserver_shielded()
    return ctx


_SHIELDED = hasattr(signal, "pthread_sigmask") and hasattr(signal, "SIGINT")


def _start_forkserver_shielded() -> None:
    """Start the forkserver with Ctrl-C blocked, so it cannot die of it while it imports torch.

    A terminal's Ctrl-C goes to the whole foreground group, the forkserver too, and Python's
    forkserver ignores SIGINT only once its preloading is done: one that arrives while it
    imports torch ends it with a ``KeyboardInterrupt`` traceback.  Started with SIGINT blocked
    (the mask survives fork and exec; CPython starts its resource tracker the same way), it
    never sees one; here the block lasts only as long as starting it takes, and a Ctrl-C in
    that moment is delivered to this process when it ends.  The ranks it forks inherit the
    block and lift it first thing (:func:`_accept_ctrl_c`).
    """
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()  # first: starting it unblocks SIGINT when done (it blocks it too)
    with deferred_ctrl_c():
        forkserver.ensure_running()


@contextlib.contextmanager
def deferred_ctrl_c() -> Iterator[None]:
    """Ctrl-C held for the block; one that came meanwhile is acted on right after it.

    For what a ``KeyboardInterrupt`` must not interrupt: starting the forkserver and the ranks
    (a rank started unknown to us outlives the job), and importing torch, whose C++ half
    aborts the process ("terminate called after throwing an instance of
    'pybind11::error_already_set'") when one arrives inside it.  Two holds, for two receivers:
    SIGINT is blocked in this thread, so processes started here inherit the block; and a
    handler that only notes it runs instead of the previous one, because the kernel may hand
    SIGINT to any other thread (torch's, once imported), whose delivery Python would raise in
    the main thread at once.  SIGINT ignored (``nohup``) stays ignored.  Outside the main
    thread (where Python would not deliver SIGINT anyway) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGINT"):
        yield
        return
    came: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    holding = previous is not signal.SIG_IGN and previous is not None
    if holding:
        signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if _SHIELDED else None
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending now runs the noting handler
        if holding:
            signal.signal(signal.SIGINT, previous)
            if came:
                _deliver_ctrl_c(previous)


def _deliver_ctrl_c(handler: Any) -> None:
    """Act on a held Ctrl-C as ``handler`` (the one before the hold) would have."""
    if callable(handler):
        handler(signal.SIGINT, None)  # Python's default raises KeyboardInterrupt
    else:  # SIG_DFL: the default action, ending the process
        signal.raise_signal(signal.SIGINT)


def _accept_ctrl_c() -> None:
    """In a rank forked by the shielded forkserver: take SIGINT again (as ``KeyboardInterrupt``)."""
    if _SHIELDED:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def spawn(
    fn: Callable[..., Any],
    nprocs: int = 2,
    args: Sequence[Any] = (),
    *,
    backend: str = "gloo",
    timeout: float | None = None,
    collective_timeout: float | None = None,
    grace: float = 5.0,
    env: dict[str, str] | None = None,
    fresh: bool = False,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``nprocs`` ranks; return each rank's result.

    ``fn`` must be importable (a module-level function), and the calling script needs an
    ``if __name__ == "__main__":`` guard.  The process group is set up before ``fn`` runs
    and torn down after.  When a rank fails, the others get ``grace`` seconds to notice and
    are then killed, and :class:`WorkerFailed` names the first rank that failed.

    Limits, in seconds: ``timeout`` bounds the whole job (default ``None``: none, so a long
    training run is never cut short; past it :class:`WorkerTimeout`), ``collective_timeout``
    bounds any one collective (default ``None``: torch's own default for ``backend``, see
    :func:`default_collective_timeout`), so a lost rank fails the others instead of hanging
    them.  A failure at either limit says which one it was and how to raise it.

    Under ``torchrun`` (or in an initialised process group) nothing is started: ``fn`` runs
    on this rank with the launcher's world size (``nprocs`` is ignored), and every rank gets
    the list of all ranks' results.  With ``fresh`` (and where :func:`fresh_processes` says
    it can), each rank runs ``fn`` in a new child process of its own instead, whose group
    meets through the launcher's store: what the call measures about its process (peak
    RSS) then excludes whatever this process did before.
    """
    per_collective = _checked_limits(timeout, collective_timeout, backend)
    if launched():
        if fresh and fresh_processes():
            return _run_in_child(fn, args, backend, timeout, per_collective)
        return _run_here(fn, args, backend, per_collective)
    ctx = _context()
    threads = max(1, (os.cpu_count() or 1) // nprocs)
    with tempfile.TemporaryDirectory(prefix="shardcompat-") as out:
        job = _Job(
            fn, tuple(args), nprocs, free_port(), backend, per_collective, threads, out,
            tuple((env or {}).items()),
        )
        procs = [ctx.Process(target=_worker, args=(job, rank), daemon=False) for rank in range(nprocs)]
        try:
            # A Ctrl-C while the forkserver still imports torch would leave a rank it forks
            # afterwards running unknown to us: it is raised once every rank has started.
            with deferred_ctrl_c():
                for proc in procs:
                    proc.start()
            _supervise(procs, Path(out), timeout, grace, per_collective)
        finally:
            for proc in procs:
                if proc.pid is not None and proc.is_alive():
                    proc.kill()
                if proc.pid is not None:
                    proc.join(5)
        return [pickle.loads((Path(out) / f"result-{r}.pkl").read_bytes()) for r in range(nprocs)]


def _supervise(procs: list[Any], out: Path, timeout: float | None, grace: float, collective_timeout: float) -> None:
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    failed_at: float | None = None
    stalled: list[int] = []
    while any(p.is_alive() for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
            failed_at = now
            stalled = [r for r, p in enumerate(procs) if p.exitcode is None]
        if failed_at is not None and now - failed_at > grace:
            break
        if timeout is not None and now > deadline:
            for proc in procs:
                proc.kill()
            raise _job_limit_hit(timeout, "the job (all ranks)")
        time.sleep(0.02)
    # Ranks still alive here are killed by the caller afterwards: what failed now failed itself.
    failed = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
    if failed:
        # A rank that died without a traceback (killed) is the cause; else the rank that
        # raised first, since the others usually fail after it with "connection closed".
        died = [r for r in failed if not (out / f"error-{r}.txt").exists()]
        errors = sorted((out / f"error-{r}.txt" for r in failed if r not in died),
                        key=lambda f: f.stat().st_mtime)
        rank = died[0] if died else int(errors[0].stem.split("-")[1])
        code = procs[rank].exitcode
        error = out / f"error-{rank}.txt"
        details = error.read_text() if error.exists() else "(no traceback: the process was killed)"
        raise WorkerFailed(rank, code, details + _collective_hint(details, collective_timeout),
                           [r for r in stalled if r != rank], _load_error(out / f"error-{rank}.pkl"))
