"""Backend registry and capability-based resolution.

Modules are imported lazily: ``shardcompat explain`` must not pay for fairscale's imports
unless it is asked about fairscale.
"""

from __future__ import annotations

import functools
import importlib

from ..options import BACKEND_NAMES, ShardingOptions
from ._base import Backend, OptimizerFactory, Placement, Plan, Probe, UnsupportedOptions

__all__ = [
    "Backend",
    "NoBackendAvailable",
    "OptimizerFactory",
    "Placement",
    "Plan",
    "Probe",
    "UnsupportedOptions",
    "all_backends",
    "candidates",
    "get",
    "probe_all",
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


class NoBackendAvailable(ValueError):
    """No backend can serve the options here; ``reasons`` maps each backend to why not."""

    def __init__(self, options: ShardingOptions, choice: str, reasons: dict[str, str]) -> None:
        lines = "\n".join(f"  - {name}: {why}" for name, why in reasons.items())
        super().__init__(
            f"no backend can serve '{options}' (backend={choice}) here:\n{lines}\n"
            "Run `shardcompat info` to see what is installed and usable."
        )
        self.reasons = reasons


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
    get(choice)  # validates the name
    return [choice]


@functools.cache
def _probe(name: str) -> Probe:
    return get(name).probe()


def probe_all() -> list[Probe]:
    return [_probe(name) for name in _AUTO_ORDER]


def resolve(
    options: ShardingOptions, backend: str = "auto", placement: Placement | None = None
) -> Plan:
    """The plan of the first backend ``backend`` allows that can serve ``options`` here."""
    choice = backend if backend != "auto" else options.backend
    placement = placement or Placement()
    reasons: dict[str, str] = {}
    for name in candidates(choice):
        impl = get(name)
        if options.stage not in impl.serves:
            reasons[name] = f"does not serve {options.stage or 'plain DDP'}"
            continue
        probe = _probe(name)
        if not probe:
            reasons[name] = probe.reason
            continue
        try:
            return impl.plan(options, placement)
        except UnsupportedOptions as error:
            reasons[name] = f"{error.reason}. {error.fix}".rstrip(". ") if error.fix else error.reason
    raise NoBackendAvailable(options, choice, reasons)
