"""Matching a checkpoint's parameter groups to the live optimizer's, by the names they hold.

The same optimizer factory gives different groups on different backends: DDP, ZeRO, OSS and
FSDP keep its groups, fairscale FSDP has one per flat parameter group, a run may be resumed
with a factory that groups otherwise.  Saved optimizer state is keyed by parameter name, so
what has to agree is only the settings: every live group takes those the checkpoint saved for
its parameters, and a checkpoint is refused only where that would lose something.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from ._common import CheckpointError

__all__ = ["match_groups"]

_NOT_SETTINGS = ("params", "param_names")  # what a group holds, not how it optimizes


def match_groups(
    saved: Sequence[Mapping[str, Any]],
    names: Sequence[Sequence[str]],
    live: Sequence[Mapping[str, Any]],
    state: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The live optimizer's groups (``names[i]`` holds ``live[i]``'s parameters, by name) with
    the settings of the ``saved`` groups that held the same parameters.

    As in torch's ``load_state_dict``, the checkpoint's settings (learning rate, weight decay,
    ...) win; a group holding none of the saved parameters keeps its own.  Raises
    :class:`CheckpointError` when a live group holds parameters that the saved run kept in
    groups with different settings, or when the checkpoint has parameters (in its groups, or
    with ``state``) that no live group holds: their settings or state would be lost.
    """
    home = {name: i for i, group in enumerate(saved) for name in group["params"]}
    held = {name for group in names for name in group}
    problems = []
    lost = sorted((home.keys() | set(state)) - held)
    if lost:
        problems.append(
            f"the checkpoint's optimizer holds {_some(lost)}, which this optimizer does not "
            "(frozen now, or left out by the optimizer factory): build it on the same parameters"
        )
    groups = []
    for index, (group_names, group) in enumerate(zip(names, live)):
        sources = sorted({home[name] for name in group_names if name in home})
        settings = [_settings(saved[i]) for i in sources] or [_settings(group)]
        clashes = [(i, d) for i, s in zip(sources, settings) if (d := _differences(settings[0], s))]
        if clashes:
            clash, differences = clashes[0]
            first = next(n for n in group_names if home.get(n) == sources[0])
            other = next(n for n in group_names if home.get(n) == clash)
            problems.append(
                f"this optimizer's group {index} holds {first!r} and {other!r}, which the checkpoint "
                f"keeps in groups with different settings ({differences}): build the optimizer "
                "with groups that keep them apart, as the saved run did"
            )
        groups.append({**settings[0], "params": list(group_names)})
    if problems:
        raise CheckpointError("the optimizer's parameter groups do not match the checkpoint's: " + "; ".join(problems))
    return groups


def _settings(group: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k not in _NOT_SETTINGS}


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """``"weight_decay 0.1 vs 0.0, ..."`` for every setting that differs; ``""`` when none does."""
    return ", ".join(
        f"{key} {a.get(key)!r} vs {b.get(key)!r}"
        for key in sorted(a.keys() | b.keys())
        if key not in a or key not in b or not _equal(a[key], b[key])
    )


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    try:
        return bool(a == b)
    except (RuntimeError, ValueError):  # containers of tensors
        return False


def _some(names: Sequence[str], shown: int = 5) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(map(repr, names[:shown])) + more
