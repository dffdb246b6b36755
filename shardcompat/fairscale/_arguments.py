"""Every constructor argument the facade accepts, and what each implementation does with it.

One table, read three ways: the native classes call :func:`check` so a value they cannot
honour raises or warns (once per argument); ``docs/fairscale-facade.md`` is rendered from it by
:func:`markdown_table`; and the tests check each class's signature against it.  Only values
that differ from fairscale's default are checked: the default is what fairscale does anyway.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ARGUMENTS",
    "Argument",
    "FairscaleArgumentWarning",
    "How",
    "UnsupportedArgument",
    "check",
    "markdown_table",
]

FAIRSCALE = "fairscale"
NATIVE = "native"


class How(enum.Enum):
    PASS = "passed as is"
    MAP = "mapped"
    WARN = "ignored, warns once"
    ERROR = "raises UnsupportedArgument"


class UnsupportedArgument(ValueError):
    """An argument value the chosen implementation cannot honour (never silently dropped)."""


class FairscaleArgumentWarning(UserWarning):
    """An argument value that changes nothing that matters here, so it is ignored (once)."""


@dataclass(frozen=True)
class Argument:
    cls: str
    name: str
    default: Any
    fairscale: tuple[How, str]
    native: tuple[How, str]
    shown: str = ""  # the default as fairscale spells it, where the facade uses a stand-in

    @property
    def default_text(self) -> str:
        return self.shown or repr(self.default)


_P = (How.PASS, "")


def _a(
    cls: str, name: str, default: Any, native: tuple[How, str], fairscale: tuple[How, str] = _P, shown: str = ""
) -> Argument:
    return Argument(cls, name, default, fairscale, native, shown)


_OSS, _SDP, _FSDP, _SCALER = "OSS", "ShardedDataParallel", "FullyShardedDataParallel", "ShardedGradScaler"

ARGUMENTS: tuple[Argument, ...] = (
    _a(_OSS, "optim", None, (How.MAP, "ZeroRedundancyOptimizer(optimizer_class=optim)"), shown="torch.optim.SGD"),
    _a(_OSS, "group", None, (How.MAP, "process_group=group")),
    _a(_OSS, "broadcast_buffer_size", -1, (How.WARN, "deprecated and unused in fairscale too")),
    _a(_OSS, "broadcast_fp16", False, (How.WARN, "parameters are broadcast in their own dtype (more exact)")),
    _a(_OSS, "force_broadcast_object", False, (How.WARN, "torch's object broadcast is always used")),
    _a(_OSS, "**default", None, (How.PASS, "the wrapped optimizer's keyword arguments"), shown="{}"),
    _a(_SDP, "sharded_optimizer", None, (How.MAP, "must be shardcompat.fairscale.OSS (one or a list)")),
    _a(_SDP, "process_group", None, (How.MAP, "DistributedDataParallel(process_group=)")),
    _a(_SDP, "broadcast_buffers", True, (How.MAP, "DistributedDataParallel(forward_sync_buffers=), broadcast_buffers= on a torch without it")),
    _a(_SDP, "sync_models_at_startup", True, (How.WARN, "DDP always broadcasts rank 0's model at startup")),
    _a(_SDP, "reduce_buffer_size", 2**23, (How.MAP, "bucket_cap_mb = elements * 4 bytes / 2**20"),
       (How.MAP, "kept; zero_grad is routed through ShardedDDP so bucket views survive torch 2 (fairscale #354)")),
    _a(_SDP, "auto_refresh_trainable", True, (How.MAP, "a requires_grad change seen at forward rebuilds DDP's "
                                                       "reducer; False: call refresh_trainable() yourself")),
    _a(_SDP, "reduce_fp16", False, (How.MAP, "True registers DDP's fp16_compress_hook")),
    _a(_SDP, "warn_on_trainable_params_changed", True, (How.MAP, "logs the change on shardcompat.fairscale")),
    _a(_FSDP, "process_group", None, (How.MAP, "FullyShardedDataParallel(process_group=)")),
    _a(_FSDP, "process_group_reduce_scatter", None,
       (How.ERROR, "torch FSDP reduce-scatters on process_group; a separate group cannot be used"),
       shown="ProcessGroupName.reduce_scatter"),
    _a(_FSDP, "reshard_after_forward", True, (How.MAP, "True: FULL_SHARD, False: SHARD_GRAD_OP")),
    _a(_FSDP, "disable_reshard_on_root", True, (How.WARN, "torch FSDP never reshards the root after forward")),
    _a(_FSDP, "mixed_precision", False, (How.MAP, "MixedPrecision(param_dtype=compute_dtype or fp16, "
                                                  "reduce_dtype=same or fp32 with fp32_reduce_scatter, "
                                                  "buffer_dtype=buffer_dtype or compute dtype)")),
    _a(_FSDP, "fp32_reduce_scatter", False, (How.MAP, "MixedPrecision(reduce_dtype=torch.float32)")),
    _a(_FSDP, "flatten_parameters", True, (How.MAP, "True: use_orig_params=False (flat parameters), "
                                                    "False: use_orig_params=True (original parameters)")),
    _a(_FSDP, "move_params_to_cpu", False, (How.MAP, "CPUOffload(offload_params=True) on CUDA; on a CPU run "
                                                     "parameters already live on CPU (warns once)")),
    _a(_FSDP, "cpu_offload", False, (How.MAP, "fairscale's older name for move_params_to_cpu")),
    _a(_FSDP, "compute_dtype", None, (How.MAP, "MixedPrecision(param_dtype=)")),
    _a(_FSDP, "buffer_dtype", None, (How.MAP, "MixedPrecision(buffer_dtype=)")),
    _a(_FSDP, "move_grads_to_cpu", None, (How.WARN, "torch offloads gradients together with parameters")),
    _a(_FSDP, "bucket_cap_mb", 25, (How.WARN, "torch FSDP reduce-scatters each unit in one collective")),
    _a(_FSDP, "compute_device", None, (How.MAP, "device_id=")),
    _a(_FSDP, "no_broadcast_optim_state", False, (How.WARN, "only affects fairscale's optimizer-state layout")),
    _a(_FSDP, "state_dict_device", None, (How.MAP, "cpu: FullStateDictConfig(offload_to_cpu=True) on CUDA, "
                                                   "nothing to do on a CPU run; other devices warn")),
    _a(_FSDP, "clear_autocast_cache", False, (How.WARN, "torch FSDP manages autocast itself")),
    _a(_FSDP, "force_input_to_fp32", False, (How.WARN, "inputs are cast to the compute dtype by torch FSDP")),
    _a(_FSDP, "verbose", False, (How.WARN, "only changes fairscale's repr")),
    _a(_FSDP, "state_dict_on_rank_0_only", False, (How.MAP, "FullStateDictConfig(rank0_only=True)")),
    _a(_FSDP, "gradient_predivide_factor", None, (How.MAP, "the same factor on torch FSDP's pre-division "
                                                           "(post-division: world size / factor)")),
    _a(_FSDP, "allow_reset_parameters", False, (How.WARN, "only guards fairscale's reset_parameters")),
    _a(_SCALER, "init_scale", 2.0**16, (How.PASS, "")),
    _a(_SCALER, "growth_factor", 2.0, (How.PASS, "")),
    _a(_SCALER, "backoff_factor", 0.5, (How.PASS, "")),
    _a(_SCALER, "growth_interval", 2000, (How.PASS, "")),
    _a(_SCALER, "enabled", True, (How.PASS, "")),
    _a(_SCALER, "process_group", None, (How.PASS, ""), shown="dist.group.WORLD"),
)

_BY_KEY = {(a.cls, a.name): a for a in ARGUMENTS}
_warned: set[tuple[str, str, str]] = set()


def check(cls: str, impl: str, given: Mapping[str, Any], *, override: Mapping[str, tuple[How, str]] = {}) -> None:
    """Raise or warn (once per argument) for each non-default value ``impl`` cannot honour.

    ``override`` lets a class say that, for this call, an argument is handled otherwise than
    the table's general rule (e.g. ``move_params_to_cpu`` warns on a CPU run).
    """
    for name, value in given.items():
        arg = _BY_KEY[(cls, name)]
        if _is_default(value, arg.default):
            continue
        how, why = override.get(name, arg.native if impl == NATIVE else arg.fairscale)
        if how is How.ERROR:
            raise UnsupportedArgument(
                f"{cls}({name}={value!r}) cannot be honoured by the {impl} implementation: {why}. "
                f"Remove the argument, or install a fairscale that serves it (see `shardcompat explain --fairscale`)."
            )
        if how is How.WARN and (cls, name, impl) not in _warned:
            _warned.add((cls, name, impl))
            warnings.warn(
                f"{cls}({name}={value!r}) is ignored by the {impl} implementation: {why}",
                FairscaleArgumentWarning,
                stacklevel=4,
            )


def _is_default(value: Any, default: Any) -> bool:
    if value is default or default is None or value is None:
        return value is default
    return type(value) is type(default) and bool(value == default)


def markdown_table() -> str:
    """The table as Markdown, for ``docs/fairscale-facade.md``."""
    rows = ["| class | argument | default | fairscale | native torch |", "|---|---|---|---|---|"]
    for a in ARGUMENTS:
        cells = [f"{how.value}" + (f": {why}" if why else "") for how, why in (a.fairscale, a.native)]
        rows.append(f"| `{a.cls}` | `{a.name}` | `{a.default_text}` | {cells[0]} | {cells[1]} |")
    return "\n".join(rows)
