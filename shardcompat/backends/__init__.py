"""Backend registry and capability-based resolution.

Modules are imported lazily: ``shardcompat explain`` must not pay for fairscale's imports
unless it is asked about fairscale.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from collections.abc import Sequence

from .. import _rng
from ..options import BACKEND_NAMES, ShardingOptions
from ._base import (
    FAIRSCALE_MISSING,
    OptimizerFactory,
    Placement,
    Plan,
    Probe,
    UnsupportedOptions,
)
from ._protocol import Backend

__all__ = [
    "Backend",
    "NoBackendAvailable",
    "OptimizerFactory",
    "Placement",
    "Plan",
    "Probe",
    "UnsupportedOptions",
    "all_backends",
    "assess",
    "candidates",
    "describe",
    "get",
    "probe_all",
    "refuse_uninstalled",
    "resolve",
]

_MODULES = {
    "torch-zero": "torch_ddp_zero",
    "torch-fsdp2": "torch_fsdp2",
    "torch-fsdp1": "torch_fsdp1",
    "fairscale-sdp": "fairscale_sdp",
    "fairscale-fsdp": "fairscale_fsdp",
}
# "auto" prefers maintained native torch (it runs on CPU too), fairscale only when native
# support is missing for the request.
_AUTO_ORDER = ("torch-zero", "torch-fsdp2", "torch-fsdp1", "fairscale-sdp", "fairscale-fsdp")
assert set(_AUTO_ORDER) == set(BACKEND_NAMES) == set(_MODULES)


def describe(options: ShardingOptions) -> str:
    """How messages name the options: the canonical string, or plain DDP when sharding is off."""
    return f"'{options}'" if options else "plain DDP (no sharding)"


class NoBackendAvailable(ValueError):
    """No backend can serve the options here; ``reasons`` maps each backend to why not."""

    def __init__(
        self, options: ShardingOptions, choice: str, reasons: dict[str, str], others: Sequence[str] = ()
    ) -> None:
        if len(reasons) == 1:
            ((name, why),) = reasons.items()
            message = f"{name} cannot serve {describe(options)} here: {why}."
        else:
            lines = "\n".join(f"  - {name}: {why}" for name, why in reasons.items())
            message = (f"no backend can serve {describe(options)} (backend={choice}) here:\n{lines}\n"
                       "Run `shardcompat info` to see what is installed and usable.")
        if others:
            message += f"\nThese backends can: {', '.join(others)} (choose one, or backend auto)."
        super().__init__(message)
        self.reasons = reasons
        self.others = tuple(others)


@functools.cache
def get(name: str) -> Backend:
    """The backend called ``name`` (one of :data:`shardcompat.options.BACKEND_NAMES`)."""
    if name not in _MODULES:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(_MODULES)}")
    module = importlib.import_module(f".{_MODULES[name]}", __name__)
    backend: Backend = module.BACKEND
    return backend


def all_backends() -> list[Backend]:
    return [get(name) for name in _AUTO_ORDER]


def candidates(choice: str = "auto") -> list[str]:
    """Backend names ``choice`` (auto, torch, fairscale or a name) may use, in preference order."""
    if choice == "auto":
        return list(_AUTO_ORDER)
    if choice in ("torch", "fairscale"):
        return [n for n in _AUTO_ORDER if n.startswith(choice + "-")]
    if choice not in _MODULES:
        raise ValueError(f"unknown backend {choice!r}; choose from {', '.join(_MODULES)}")
    return [choice]


def refuse_uninstalled(options: ShardingOptions, backend: str = "auto") -> None:
    """Raise :class:`NoBackendAvailable` if every backend ``backend`` allows needs fairscale and
    fairscale is not installed.

    Read from package metadata alone, before torch is imported (seconds on a small machine), so
    ``shardcompat train --backend fairscale-sdp`` answers at once; :func:`resolve` would say the
    same after probing.
    """
    choice = backend if backend != "auto" else options.backend
    names = candidates(choice)
    if not all(name.startswith("fairscale-") for name in names):
        return
    try:
        importlib.metadata.version("fairscale")
    except importlib.metadata.PackageNotFoundError:
        raise NoBackendAvailable(options, choice, dict.fromkeys(names, FAIRSCALE_MISSING)) from None


@functools.cache
@_rng.read_only  # a probe may build a tiny module: it must not draw from the run's streams
def _probe(name: str) -> Probe:
    return get(name).probe()


def probe_all() -> list[Probe]:
    return [_probe(name) for name in _AUTO_ORDER]


@_rng.read_only
def assess(name: str, options: ShardingOptions, placement: Placement) -> Plan | str:
    """Backend ``name``'s plan for ``options`` here, or the one-sentence reason it has none.

    An unusable backend gives its probe's reason first (fairscale not installed, with the pip
    command), since that is the cause to fix whatever the options are.
    """
    probe = _probe(name)
    if not probe:
        return probe.reason
    impl = get(name)
    if options.stage not in impl.serves:
        served = ", ".join(s.value if s else "plain DDP" for s in sorted(
            impl.serves, key=lambda s: (s is not None, s.value if s else "")))
        return f"it does not serve {options.stage.value if options.stage else 'plain DDP'} (it serves {served})"
    try:
        return impl.plan(options, placement)
    except UnsupportedOptions as error:
        return f"{error.reason}. {error.fix[:1].upper()}{error.fix[1:]}" if error.fix else error.reason


def resolve(
    options: ShardingOptions, backend: str = "auto", placement: Placement | None = None
) -> Plan:
    """The plan of the first backend ``backend`` allows that can serve ``options`` here."""
    choice = backend if backend != "auto" else options.backend
    placement = placement or Placement()
    reasons: dict[str, str] = {}
    for name in candidates(choice):
        found = assess(name, options, placement)
        if isinstance(found, Plan):
            return found
        reasons[name] = found
    others = [n for n in _AUTO_ORDER if n not in reasons and isinstance(assess(n, options, placement), Plan)]
    raise NoBackendAvailable(options, choice, reasons, others)
