"""fairscale's sharded checkpoint format on torch FSDP1: local state dicts, their metadata, and
the offline consolidation of one file per rank into a full state dict.

fairscale saves, per FSDP unit, ``flat_param_0`` (this rank's padded shard of the flat
parameter) when parameters are flattened, or each original parameter's shard under its own
name when they are not; ``local_metadata_dict()`` says how to cut the concatenated shards back
into parameters.  torch FSDP1 shards a unit's flat parameter exactly as fairscale does (equal
chunks in rank order, padding at the end), so with flat parameters the files are the same; with
``use_orig_params`` each original parameter's piece of the local shard is saved under its
name, which concatenates across ranks just as fairscale's per-parameter shards do.  The files
are read from ``FlatParameter._local_shard``, which holds the shard whatever the training state.
torch FSDP1 needs one ``use_orig_params`` for all nested units, so ``flatten_parameters`` must be
the same everywhere too (the constructor says so).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.fsdp._common_utils import clean_tensor_name

__all__ = ["consolidate_shard_weights", "load_local_state_dict", "local_metadata_dict", "local_state_dict"]

FLAT = "flat_param_0"  # fairscale's name for a unit's (single) flat parameter


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


class _Piece(NamedTuple):
    key: str  # the name in the local state dict, relative to the unit
    names: list[str]
    shapes: list[torch.Size]
    numels: list[int]
    padding: int
    tensor: torch.Tensor  # a view of the unit's local shard


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _units(root: nn.Module) -> Iterator[tuple[str, FullyShardedDataParallel]]:
    for path, module in root.named_modules():
        if isinstance(module, FullyShardedDataParallel):
            yield clean_tensor_name(path), module


def _pieces(unit: FullyShardedDataParallel) -> list[_Piece]:
    handle = unit._handle
    if handle is None:  # a unit without parameters of its own
        return []
    flat = handle.flat_param
    # ``_local_shard`` appears at the first forward; until then the flat parameter is the shard.
    shard: torch.Tensor = flat._local_shard if hasattr(flat, "_local_shard") else flat.data
    names = [clean_tensor_name(n) for n in flat._fqns]
    if not handle._use_orig_params:
        if len(flat._numels_with_padding) != len(flat._numels):
            raise NotImplementedError("local_state_dict: this flat parameter has alignment padding, "
                                      "which fairscale's format cannot describe; use state_dict()")
        return [_Piece(FLAT, names, list(flat._shapes), list(flat._numels), flat._shard_numel_padded, shard)]
    pieces = []
    for name, shape, numel, info in zip(names, flat._shapes, flat._numels, flat._shard_param_infos, strict=True):
        start, length = (info.offset_in_shard, info.numel_in_shard) if info.in_shard else (0, 0)
        assert start is not None and length is not None
        pieces.append(_Piece(name, [name], [shape], [numel], 0, shard[start:start + length]))
    return pieces


def _buffers(root: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The persistent buffers, by clean name (they are not sharded)."""
    for path, module in root.named_modules():
        for name, buffer in module._buffers.items():
            if buffer is not None and name not in module._non_persistent_buffers_set:
                yield clean_tensor_name(_join(path, name)), buffer


def local_state_dict(root: FullyShardedDataParallel, prefix: str = "", keep_vars: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, unit in _units(root):
        for piece in _pieces(unit):
            out[prefix + _join(path, piece.key)] = piece.tensor if keep_vars else piece.tensor.detach()
    for name, buffer in _buffers(root):
        out[prefix + name] = buffer if keep_vars else buffer.detach()
    return out


@torch.no_grad()
def load_local_state_dict(root: FullyShardedDataParallel, state_dict: Mapping[str, Any],
                          strict: bool = True) -> IncompatibleKeys:
    targets = local_state_dict(root, keep_vars=True)
    missing = [k for k in targets if k not in state_dict]
    unexpected = [k for k in state_dict if k not in targets]
    if strict and (missing or unexpected):
        raise RuntimeError(
            f"Error(s) in loading the local state_dict of {type(root).__name__}: missing keys {missing}, "
            f"unexpected keys {unexpected}.  A local state dict loads only into the same wrapping, "
            "flatten_parameters setting and world size it was saved with; FullyShardedDataParallel."
            "consolidate_shard_weights() turns one file per rank into a full state dict that loads anywhere"
        )
    for key, target in targets.items():
        if key not in state_dict:
            continue
        value = state_dict[key]
        if tuple(value.shape) != tuple(target.shape):
            raise RuntimeError(
                f"local state_dict entry {key!r} has shape {tuple(value.shape)}, this rank's shard has "
                f"{tuple(target.shape)}: was it saved with another world size or wrapping?"
            )
        target.copy_(value)
    return IncompatibleKeys(missing, unexpected)


def local_metadata_dict(root: FullyShardedDataParallel) -> dict[str, Any]:
    units = []
    for path, unit in _units(root):
        handle = unit._handle
        shared = [] if handle is None else [
            (_join(path, clean_tensor_name(_join(s.prim_module_name, s.prim_param_name))),
             _join(path, clean_tensor_name(_join(s.module_name, s.param_name))))
            for s in handle.flat_param._shared_param_infos
        ]
        units.append({
            "fsdp_path": path,
            "params": {p.key: {"names": p.names, "shapes": p.shapes, "numels": p.numels, "padding": p.padding}
                       for p in _pieces(unit)},
            "no_broadcast_optim_state": False,
            "shared_param_info": shared,
        })
    return {"param_metadata": units, "buffer_names": [name for name, _ in _buffers(root)]}


def consolidate_shard_weights(
    shard_weights: Sequence[Mapping[str, torch.Tensor]],
    shard_metadata: Sequence[Mapping[str, Any]],
    with_module_buffers: bool = True,
    strict: bool = True,
) -> dict[str, torch.Tensor]:
    """The full state dict from every rank's local state dict and metadata, without any process.

    Per parameter: each rank's shard, less its padding, concatenated in rank order, then cut
    into the original parameters by numel and reshaped.  Units marked
    ``no_broadcast_optim_state`` (unsharded experts) are read from the first file only;
    buffers come from the first file.  ``strict=False`` skips what the files lack.
    """
    if not shard_weights or len(shard_weights) != len(shard_metadata):
        raise ValueError(f"consolidate_shard_weights needs one metadata dict per shard and at least one shard, "
                         f"got {len(shard_weights)} shards and {len(shard_metadata)} metadata dicts")
    out: dict[str, torch.Tensor] = {}
    for index, unit in enumerate(shard_metadata[0]["param_metadata"]):
        path = unit["fsdp_path"]
        ranks = 1 if unit["no_broadcast_optim_state"] else len(shard_weights)
        for backing, info in unit["params"].items():
            key = _join(path, backing)
            if key not in shard_weights[0] and not strict:
                continue
            shards = []
            for rank in range(ranks):
                padding = shard_metadata[rank]["param_metadata"][index]["params"][backing]["padding"]
                shard = shard_weights[rank][key].reshape(-1)
                shards.append(shard[:shard.numel() - padding])
            full = torch.cat(shards)
            if sum(info["numels"]) != full.numel():
                raise ValueError(f"{key}: the shards hold {full.numel()} elements, the metadata names "
                                 f"{sum(info['numels'])}: are all ranks' files from the same checkpoint?")
            for name, chunk, shape in zip(info["names"], torch.split(full, info["numels"]), info["shapes"], strict=True):
                out[_join(path, name)] = chunk.view(shape)
        for source, target in unit["shared_param_info"]:
            if source in out:
                out[target] = out[source]
    if with_module_buffers:
        for name in shard_metadata[0]["buffer_names"]:
            if name in shard_weights[0] or strict:
                out[name] = shard_weights[0][name]
    return out
