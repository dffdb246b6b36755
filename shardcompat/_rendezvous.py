"""A process-group store that a torchrun restart cannot confuse with the previous attempt's.

Since torch 2.5 the c10d rendezvous shares the agent's TCPStore with the workers
(``TORCHELASTIC_USE_AGENT_STORE=True``), and that store outlives a restart.  torch's ``env://``
handler connects to it without a per-attempt prefix, so a restarted gloo or NCCL group can read
the addresses the dead attempt's ranks published and fail with ``Gloo connectFullMesh failed
... Connection refused`` (pytorch/pytorch#135712, #167288).  ``TORCHELASTIC_RESTART_COUNT``
cannot name the attempt either: each agent counts its own restarts, so two nodes disagree
after a peer's failure.

So rank 0 names the attempt and every other rank makes sure it heard this attempt's rank 0:
rank 0 takes the next generation number from a counter in the store and publishes it; each
other rank reads it, registers there with a fresh nonce and waits for rank 0 to echo that
nonce back.  Only a live rank 0 echoes, so a rank that read the previous attempt's number
(rank 0 had not published yet) hears nothing, reads again and registers at the new one.  No
count is trusted, so an attempt that died half-way, or a world that shrank or grew, cannot
mislead the next.  The process group then lives under ``shardcompat/attempt/<generation>``.
"""

from __future__ import annotations

import datetime
import os
import time
import uuid
from typing import Any

__all__ = ["ATTEMPT_PREFIX", "agent_store_outlives_attempts", "attempt_prefix", "attempt_store"]

ATTEMPT_PREFIX = "shardcompat/attempt"
_GENERATION = f"{ATTEMPT_PREFIX}/generation"
_CURRENT = f"{ATTEMPT_PREFIX}/current"
_STALE_AFTER = 1.0  # seconds a rank waits for rank 0's echo before it reads the generation again


def agent_store_outlives_attempts() -> bool:
    """Whether this worker's store is the agent's, shared by every attempt of the job.

    Decided by what the launcher did, not by torch's version: torchrun says so in
    ``TORCHELASTIC_USE_AGENT_STORE``; without it (older torch, or
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``) rank 0 hosts a fresh store on every attempt.
    """
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def attempt_prefix(store: Any, rank: int, world_size: int, timeout: float = 300.0) -> str:
    """The key prefix of this attempt, the same on every rank of it (see the module's docstring)."""
    if rank == 0:
        generation = int(store.add(_GENERATION, 1))
        store.set(_CURRENT, str(generation))
        for other in range(1, world_size):
            joined = _poll(store, f"{ATTEMPT_PREFIX}/{generation}/join/{other}", None, timeout)
            store.set(f"{ATTEMPT_PREFIX}/{generation}/ack/{other}", joined)
        return f"{ATTEMPT_PREFIX}/{generation}"
    deadline = time.monotonic() + timeout
    nonce = uuid.uuid4().hex.encode()  # this process's: a re-registration matches an echo in flight
    while time.monotonic() < deadline:
        try:
            current = _poll(store, _CURRENT, None, deadline - time.monotonic()).decode()
        except TimeoutError:
            break
        store.set(f"{ATTEMPT_PREFIX}/{current}/join/{rank}", nonce)
        try:
            _poll(store, f"{ATTEMPT_PREFIX}/{current}/ack/{rank}", nonce, _STALE_AFTER)
        except TimeoutError:
            continue  # that rank 0 is gone: this attempt's has not published yet
        return f"{ATTEMPT_PREFIX}/{current}"
    raise TimeoutError(f"rank {rank}: rank 0 of this attempt did not answer within {timeout:.0f} s")


def _poll(store: Any, key: str, expected: bytes | None, timeout: float) -> bytes:
    """``key``'s value once it exists (and equals ``expected``, if given); ``TimeoutError`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if store.check([key]):
            value = bytes(store.get(key))
            if expected is None or value == expected:
                return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no {key!r} in the store within {timeout:.1f} s")
        time.sleep(0.02)


def attempt_store(timeout: datetime.timedelta) -> tuple[Any, int, int]:
    """``(store, rank, world_size)`` for ``init_process_group`` from torchrun's environment.

    Where the store outlives attempts it is wrapped in a ``PrefixStore`` of this attempt;
    otherwise it is torch's own ``env://`` store, unchanged.
    """
    import torch.distributed as dist

    store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))  # type: ignore[attr-defined]
    if agent_store_outlives_attempts():
        prefix = attempt_prefix(store, rank, world_size, timeout.total_seconds())
        store = dist.PrefixStore(prefix, store)  # type: ignore[attr-defined]
    return store, rank, world_size
