"""Keep a rank from aborting at exit while torch's gloo threads still let go of Python tensors.

A gloo worker thread drops a finished collective's tensors a moment after the caller's
``wait()`` has returned, and dropping one that Python created takes the GIL.  If the
interpreter has begun finalising by then, taking the GIL ends the thread inside a C++
destructor and the whole rank aborts ("terminate called without an active exception",
SIGABRT) after its work is done, so torchrun reports the job failed.  torch keeps the group
alive past ``destroy_process_group``, so nothing joins those threads first.

An ``atexit`` hook runs while threads may still take the GIL: it waits, briefly and with a
bound, until no gloo thread is running.
"""

from __future__ import annotations

import atexit
import os
import time

__all__ = ["install", "wait_for_idle_gloo_threads"]

_INTERVAL = 0.005  # seconds between looks; the GIL is free meanwhile
_QUIET_LOOKS = 3  # consecutive looks with no gloo thread running
_installed = False


def install() -> None:
    """Register the exit hook once per process (cheap: it only reads ``/proc`` at exit)."""
    global _installed
    if not _installed:
        atexit.register(wait_for_idle_gloo_threads)
        _installed = True


def _running_gloo_threads(name_part: str = "gloo") -> int | None:
    """How many of torch's gloo threads (``name_part`` in their name) are running or runnable;
    ``None`` where ``/proc`` cannot tell."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    running = 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat", encoding="ascii", errors="replace") as file:
                stat = file.read()
        except OSError:
            continue  # the thread has just ended
        name, state = stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 : stat.rfind(")") + 3]
        if name_part in name and state == "R":
            running += 1
    return running


def wait_for_idle_gloo_threads(limit: float = 2.0) -> None:
    """Return once no gloo thread has run for a few consecutive looks, or after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    quiet = 0
    while quiet < _QUIET_LOOKS and time.monotonic() < deadline:
        time.sleep(_INTERVAL)
        running = _running_gloo_threads()
        if running is None:
            return
        quiet = quiet + 1 if running == 0 else 0
