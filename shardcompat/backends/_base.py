"""The values that cross the :class:`~shardcompat.backends._protocol.Backend` protocol: what a
backend found (``Probe``), where the job runs (``Placement``), what it will do (``Plan``), and
its refusal (``UnsupportedOptions``).  Below ``prepared`` (which holds a ``Plan``), so nothing
here imports upward."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..options import ShardingOptions

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

__all__ = [
    "FAIRSCALE_MISSING",
    "OptimizerFactory",
    "Placement",
    "Plan",
    "Probe",
    "UnsupportedOptions",
]

# The reason both fairscale backends give when it is absent, probed or read from metadata.
FAIRSCALE_MISSING = "fairscale is not installed (pip install 'fairscale>=0.1.5')"

OptimizerFactory = Callable[[Iterable["torch.nn.Parameter"]], "torch.optim.Optimizer"]


@dataclass(frozen=True)
class Probe:
    """What a backend found on this machine: usable or not, and why."""

    backend: str
    available: bool
    reason: str = ""
    versions: Mapping[str, str] = field(default_factory=dict)
    features: Mapping[str, bool] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.available


@dataclass(frozen=True)
class Placement:
    """Where the job runs; ``plan`` decides from this, ``wrap`` builds on it."""

    world_size: int = 1
    rank: int = 0
    local_world_size: int = 1
    device: str = "cpu"
    process_group: ProcessGroup | None = None

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


@dataclass(frozen=True)
class Plan:
    """A backend's answer for some options: the exact call it will make, and any notes.

    ``effective_stage`` is the ZeRO stage the call really implements (0: nothing sharded),
    which can differ from the one asked for: torch-zero serves ``simple`` (stage 2 in
    fairscale) as ZeRO-1.  ``None`` means the options' own :attr:`ShardingOptions.zero_stage`;
    :attr:`zero_stage` resolves it.
    """

    backend: str
    options: ShardingOptions
    call: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    effective_stage: int | None = None

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage this plan really implements."""
        return self.options.zero_stage if self.effective_stage is None else self.effective_stage

    def explain(self) -> str:
        lines = [f"{self.backend}: {self.call}"]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


class UnsupportedOptions(ValueError):
    """A backend cannot serve these options here; ``reason`` says why, ``fix`` what to do."""

    def __init__(self, backend: str, options: ShardingOptions | str, reason: str, fix: str = "") -> None:
        text = f"{backend} cannot serve '{options}' here: {reason}"
        super().__init__(f"{text}. {fix}" if fix else text)
        self.backend = backend
        self.reason = reason
        self.fix = fix
