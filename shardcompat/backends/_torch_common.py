"""What the three native torch backends share: dtypes, device meshes, call text, and a
``Prepared`` whose full state dicts go through ``torch.distributed.checkpoint.state_dict``.

``get/set_model_state_dict`` and ``get/set_optimizer_state_dict`` understand DDP, FSDP1
(``use_orig_params=True``) and FSDP2 alike and key everything by the original parameter
names, so one implementation serves all three.  ``cpu_offload=True`` in
``StateDictOptions`` crashes on CPU-only runs (pytorch#188989), so it is used on CUDA only.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..options import Precision, ShardingOptions
from ..prepared import Prepared
from ._base import Placement, Probe, UnsupportedOptions

__all__ = [
    "MESH_DIMS",
    "TorchPrepared",
    "autocast_forward",
    "call_text",
    "compute_dtype",
    "device_mesh",
    "device_type",
    "mesh_shape",
    "mesh_text",
    "move_to_device",
    "torch_probe",
]

MESH_DIMS = ("replicate", "shard")

_DTYPES = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}


def compute_dtype(options: ShardingOptions) -> torch.dtype | None:
    """The reduced compute dtype ``mixed_precision=`` asks for; ``None`` for fp32 or unset."""
    return _DTYPES.get(options.mixed_precision) if options.mixed_precision else None


def call_text(name: str, *args: str, **kwargs: str) -> str:
    """``name(arg, key=value, ...)``: the Python-looking call a plan shows."""
    parts = [*args, *(f"{k}={v}" for k, v in kwargs.items())]
    return f"{name}({', '.join(parts)})"


def torch_probe(name: str, features: Mapping[str, bool], missing: str = "") -> Probe:
    """A probe for a native backend: torch's version, CUDA, and the features found."""
    import torch.distributed

    versions = {"torch": torch.__version__}
    base = {
        "distributed": torch.distributed.is_available(),
        "cuda": torch.cuda.is_available(),
        "gloo": torch.distributed.is_available() and torch.distributed.is_gloo_available(),
        "nccl": torch.distributed.is_available() and torch.distributed.is_nccl_available(),
    }
    if not base["distributed"]:
        missing = missing or "torch.distributed is not available in this torch build"
    return Probe(name, not missing, missing, versions, {**base, **features})


def move_to_device(model: nn.Module, placement: Placement) -> nn.Module:
    """Put the model on this rank's accelerator (a no-op on CPU)."""
    return model.to(placement.device) if placement.cuda else model


def _check_hybrid(backend: str, options: ShardingOptions, placement: Placement) -> None:
    if placement.world_size % max(1, placement.local_world_size):
        raise UnsupportedOptions(
            backend, options,
            f"hybrid sharding needs whole nodes: world size {placement.world_size} is not a "
            f"multiple of LOCAL_WORLD_SIZE {placement.local_world_size}",
            "start the same number of ranks on every node",
        )
    if placement.nnodes < 2:
        raise UnsupportedOptions(
            backend, options,
            f"hybrid sharding replicates across nodes, but all {placement.world_size} ranks are "
            "on one node (LOCAL_WORLD_SIZE == WORLD_SIZE)",
            f"use '{options.replace(hybrid=False)}' on a single node, or launch on 2+ nodes with torchrun",
        )


def mesh_shape(backend: str, options: ShardingOptions, placement: Placement) -> tuple[int, ...]:
    """``(nodes, ranks per node)`` for hybrid sharding, else ``(world_size,)``."""
    if not options.hybrid:
        return (placement.world_size,)
    _check_hybrid(backend, options, placement)
    return (placement.nnodes, placement.world_size // placement.nnodes)


def device_type(placement: Placement) -> str:
    """``"cuda"`` or ``"cpu"``: what autocast, grad scalers and device meshes are told."""
    return "cuda" if placement.cuda else "cpu"


def sharded_grad_scaler(wanted: bool, placement: Placement) -> Any:
    """torch's ``ShardedGradScaler`` when fp16 needs one (a plain scaler sees one shard's infs)."""
    if not wanted:
        return None
    from ._scaler import ShardedGradScaler

    return ShardedGradScaler(device=device_type(placement), process_group=placement.process_group)


def mesh_text(shape: tuple[int, ...], placement: Placement) -> str:
    names = f", mesh_dim_names={MESH_DIMS!r}" if len(shape) == 2 else ""
    return f"init_device_mesh({device_type(placement)!r}, {shape!r}{names})"


def device_mesh(shape: tuple[int, ...], placement: Placement) -> Any:
    """The device mesh a plan asked for (a custom process group becomes a 1-D mesh over it)."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    if placement.process_group is not None and len(shape) == 1:
        return DeviceMesh.from_group(placement.process_group, device_type(placement))
    names = MESH_DIMS if len(shape) == 2 else None
    return init_device_mesh(device_type(placement), shape, mesh_dim_names=names)


def _cpu_copy(tree: Any) -> Any:
    """A deep copy with every tensor detached on CPU, so a saved state never aliases training."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, Mapping):
        return {k: _cpu_copy(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_cpu_copy(v) for v in tree)
    return copy.copy(tree)


def _is_rank0(placement: Placement) -> bool:
    return dist.get_rank(placement.process_group) == 0


class TorchPrepared(Prepared):
    """``Prepared`` for DDP, FSDP1 and FSDP2: state dicts through torch's DCP helpers."""

    def _state_options(self, rank0_only: bool) -> Any:
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        # cpu_offload=True also means "rank 0 only" in DCP; it crashes without an accelerator.
        return StateDictOptions(full_state_dict=True, cpu_offload=rank0_only and self.placement.cuda)

    def _clip_grad_norm(self, max_norm: float, norm_type: float) -> torch.Tensor:
        """Every rank holds (or, for DTensor grads, describes) the full gradients: plain clip."""
        norm = nn.utils.clip_grad_norm_(self.model.parameters(), max_norm, norm_type)
        full = getattr(norm, "full_tensor", None)
        return full() if full is not None else norm

    def _full_state_dict(self, *, rank0_only: bool = True) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        state = get_model_state_dict(self.model, options=self._state_options(rank0_only))
        if rank0_only and not _is_rank0(self.placement):
            return {}
        result: dict[str, torch.Tensor] = _cpu_copy(state)
        return result

    def optimizer_state_dict(self, *, rank0_only: bool = True) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        state = get_optimizer_state_dict(
            self.model, self.optimizer, options=self._state_options(rank0_only)
        )
        if rank0_only and not _is_rank0(self.placement):
            return {}
        result: dict[str, Any] = _cpu_copy(state)
        return result

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(self.model, dict(state), options=StateDictOptions(full_state_dict=True))

    def _load_optimizer_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        set_optimizer_state_dict(
            self.model, self.optimizer, _cpu_copy(state),
            options=StateDictOptions(full_state_dict=True),
        )


def autocast_forward(model: nn.Module, placement: Placement, dtype: torch.dtype) -> None:
    """Run ``model``'s forward under ``torch.autocast`` (on the wrapper, not the user's module),
    so calling ``prepared.model(...)`` directly gets mixed precision too."""
    forward = model.forward
    kind = device_type(placement)

    def autocast_forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(kind, dtype=dtype):
            return forward(*args, **kwargs)

    model.forward = autocast_forward  # type: ignore[method-assign]

