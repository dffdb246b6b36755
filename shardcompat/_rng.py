"""Observing is read-only: :func:`unchanged` puts every random stream back as it found it.

Planning, probing, explaining, measuring and reporting run inside it (``prepare()``, the
sharding block of ``shardcompat run``, ``shardcompat train``'s planning and snapshots), so a
probe that builds a layer, a library that seeds itself on import or a collective that draws
cannot shift the dropout masks of the run it watches.  What it keeps: torch's CPU generator,
every CUDA device's generator once CUDA is initialised (it never initialises CUDA itself),
Python's ``random`` and NumPy's global ``RandomState`` once NumPy is imported (it never imports
NumPy).  In-memory only; checkpoints keep their own serialisable form (``checkpoint``).
"""

from __future__ import annotations

import contextlib
import functools
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["State", "capture", "read_only", "restore", "unchanged"]

State = dict[str, Any]
_F = TypeVar("_F", bound=Callable[..., Any])


def capture() -> State:
    """This process's random states, as :func:`restore` takes them."""
    import torch  # here, not above: the backend registry imports this module before torch is needed

    state: State = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    return state


def restore(state: State) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        sys.modules["numpy"].random.set_state(state["numpy"])


@contextlib.contextmanager
def unchanged() -> Iterator[None]:
    """Run the body, then restore the random states it found (also when it raises)."""
    state = capture()
    try:
        yield
    finally:
        restore(state)


def read_only(function: _F) -> _F:
    """``function`` run under :func:`unchanged`: for probes and planners, which any caller (a
    user's own code included) may run in the middle of training."""

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        with unchanged():
            return function(*args, **kwargs)

    return guarded  # type: ignore[return-value]
