"""An optimizer state dict keyed by parameter index, in a file of its own.

What ``torch.save(optimizer.state_dict())`` writes, and what ``ZeroRedundancyOptimizer`` and
fairscale's ``OSS`` write after ``consolidate_state_dict()``: ``{"state": {index: {key:
tensor}}, "param_groups": [{..., "params": [index, ...]}]}``.  The indices count the
parameters in the order the optimizer was given them, group after group; only that order
gives them names, so :func:`names_for_indices` maps them through it and checks the shapes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ._base import Description, Entry, FormatError, entry_of, load_safe

__all__ = ["READER", "describe_state", "names_for_indices"]


def _is_state(value: Any) -> bool:
    return isinstance(value, Mapping) and {"state", "param_groups"} <= value.keys()


def describe_state(state: Any, file: Path, rel: str, into: Description) -> None:
    """Fill ``into``'s optimizer fields from a loaded optimizer state dict (index or name keyed)."""
    if not _is_state(state) or not isinstance(state["state"], Mapping) or not isinstance(state["param_groups"], list):
        raise FormatError(f"{file} is not an optimizer state (a mapping with 'state' and 'param_groups')")
    table: dict[str, dict[str, Entry]] = {}
    kinds = set()
    for key, values in state["state"].items():
        kinds.add("index" if isinstance(key, int) else "name")
        if not isinstance(values, Mapping):
            raise FormatError(f"{file}: the state of parameter {key!r} is not a mapping")
        table[str(key)] = {k: entry_of(v, rel) for k, v in values.items() if isinstance(v, torch.Tensor)}
    grouped: list[Any] = []
    for i, group in enumerate(state["param_groups"]):
        if not isinstance(group, Mapping) or not isinstance(group.get("params"), list):
            raise FormatError(f"{file}: parameter group {i} has no list of 'params'")
        grouped += group["params"]
    if len(kinds) > 1:
        into.inconsistent.append(f"{rel}: its state is keyed by parameter index and by name at once")
    into.optimizer, into.optimizer_groups = table, len(state["param_groups"])
    into.optimizer_keys = kinds.pop() if len(kinds) == 1 else ("index" if all(type(p) is int for p in grouped) else "name")
    if len(set(map(str, grouped))) != len(grouped):
        into.inconsistent.append(f"{rel}: a parameter is listed in more than one group")
    stray = sorted(set(table) - set(map(str, grouped)), key=_order)
    if stray:
        into.inconsistent.append(f"{rel}: state for parameter(s) {', '.join(stray[:5])} that no group lists")
    without = [str(p) for p in grouped if str(p) not in table]
    if without and table:
        into.missing.append(
            f"optimizer state of {len(without)} of the {len(grouped)} parameters its groups list "
            f"({', '.join(without[:5])}{', ...' if len(without) > 5 else ''}) not in {rel}: "
            "other ranks' shards of a sharded optimizer, or parameters that had no gradient yet"
        )
    if into.optimizer_keys == "index":
        into.notes.append(
            f"{rel} keys its state by parameter index (0..{len(grouped) - 1} over {len(state['param_groups'])} "
            "group(s)): the names come from the order the optimizer was given the parameters, not from the file"
        )


def _order(key: str) -> tuple[int, str]:
    return (int(key), "") if key.isdigit() else (1 << 62, key)


def names_for_indices(
    state: Mapping[str, Any], names: Sequence[Sequence[str]], shapes: Mapping[str, Sequence[int]] | None = None
) -> dict[str, Any]:
    """``state`` (index-keyed) keyed by parameter name: ``names[g]`` lists group ``g``'s
    parameters in the order the optimizer was built with (``model.parameters()`` order for one
    group).  Raises :class:`FormatError` where the groups' sizes differ or (``shapes``) a state
    tensor does not have its parameter's shape: the order is then not the saved one."""
    groups = state["param_groups"]
    if [len(g["params"]) for g in groups] != [len(n) for n in names]:
        raise FormatError(
            f"the optimizer state has groups of {[len(g['params']) for g in groups]} parameters, the model "
            f"{[len(n) for n in names]}: build the optimizer's groups as the saved run did"
        )
    by_index = {i: n for g, ns in zip(groups, names) for i, n in zip(g["params"], ns)}
    out: dict[str, Any] = {}
    for index, values in state["state"].items():
        name = by_index[index]
        for key, value in values.items():
            want = None if shapes is None else list(shapes[name])
            if isinstance(value, torch.Tensor) and value.dim() > 0 and want is not None and list(value.shape) != want:
                raise FormatError(
                    f"optimizer state {index}.{key} has shape {list(value.shape)}, parameter {name!r} {want}: "
                    "the parameter order is not the one the optimizer was saved with"
                )
        out[name] = values
    groups_by_name = [{**g, "params": list(ns)} for g, ns in zip(groups, names)]
    return {"state": out, "param_groups": groups_by_name}


class _OptimizerFile:
    name = "torch-optimizer"
    title = "an optimizer state dict keyed by parameter index (torch, ZeroRedundancyOptimizer, fairscale OSS)"

    def detect(self, path: Path) -> bool:
        if not path.is_file() or path.is_symlink():
            return False
        try:
            return _is_state(load_safe(path))
        except FormatError:
            return False

    def describe(self, path: Path) -> Description:
        if path.is_symlink():
            raise FormatError(f"{path} is a symbolic link: give the file itself")
        out = Description(self.name, self.title, str(path), files=[path.name])
        describe_state(load_safe(path), path, path.name, out)
        out.world_size_from = "an optimizer state file does not record it"
        out.notes.append(
            "a consolidated ZeroRedundancyOptimizer / OSS state holds every rank's shard: nothing marks it as such"
        )
        return out

    def tensors(self, path: Path) -> Iterator[tuple[str, torch.Tensor]]:
        raise FormatError(f"{path} holds optimizer state only, no model weights")


READER = _OptimizerFile()
