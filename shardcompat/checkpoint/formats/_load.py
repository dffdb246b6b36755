"""Loading model weights from a checkpoint another tool wrote (Hugging Face, torch DCP).

Only the model is restored, by parameter name, at any world size and on any backend: rank 0
checks the description against the live model first (names, shapes, nothing inconsistent),
every rank then reads the tensors and must succeed before any rank loads, so a refused load
leaves the model as it was.  What the checkpoint holds beyond the weights (optimizer state,
step, scheduler, RNG) is not restored here, and the load says so once, on rank 0, as a
warning naming each part; nothing of it is guessed.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .._common import (
    CheckpointError,
    all_agree,
    check_names_and_shapes,
    is_rank0,
    rank0_decides,
    shape_table,
    share,
)
from ._base import Description, Reader

if TYPE_CHECKING:
    from .._protocol import Checkpointable

__all__ = ["load_model_weights"]


def _tied(prepared: Any) -> list[list[str]]:
    """The names of each tensor the model holds under several names (GPT-2's ``lm_head.weight``
    and ``transformer.wte.weight``): ``save_pretrained`` writes one of them."""
    tied = getattr(prepared, "tied", None)
    if tied is None:
        module = getattr(prepared, "module", None)
        tied = _shared(module) if isinstance(module, torch.nn.Module) else []
    return [list(names) for names in tied]


def _shared(module: torch.nn.Module) -> list[list[str]]:
    seen: dict[int, list[str]] = {}
    for name, tensor in [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]:
        seen.setdefault(id(tensor), []).append(name)
    return [names for names in seen.values() if len(names) > 1]


def _fill(table: dict[str, Any], tied: Sequence[Sequence[str]]) -> dict[str, Any]:
    for names in tied:
        present = [n for n in names if n in table]
        for name in names if present else ():
            table.setdefault(name, table[present[0]])
    return table


def _left_out(found: Description) -> list[str]:
    parts = []
    if found.optimizer is not None:
        parts.append(f"optimizer state ({len(found.optimizer)} parameters, keyed by {found.optimizer_keys})")
    if found.step is not None:
        parts.append(f"step {found.step}")
    parts += [f"{what} ({where})" for what, where in sorted(found.scalars.items())]
    return parts


def load_model_weights(prepared: Checkpointable, path: Path, reader: Reader) -> dict[str, Any]:
    """Load the model weights of the checkpoint at ``path`` (read by ``reader``) into
    ``prepared`` (collective); return ``{"step": prepared.step_count, "format", "restored",
    "not_restored"}``."""
    group = prepared.placement.process_group
    tied = _tied(prepared)
    expected = share(shape_table(prepared.full_state_dict(rank0_only=True)), group)  # collective

    def validate() -> Description:
        found = reader.describe(path)
        problems = found.inconsistent + found.missing
        if problems:
            raise CheckpointError(f"{path}: {problems[0]}; the model was not changed")
        table = _fill({n: list(e.shape) for n, e in found.parameters.items()}, tied)
        check_names_and_shapes(table, expected, path)
        return found

    found: Description = share(rank0_decides(validate, group), group)

    def read() -> dict[str, torch.Tensor]:
        state = dict(reader.tensors(path))
        return {n: t for n, t in _fill(state, tied).items() if n in expected}

    state = all_agree(read, group)
    prepared.load_full_state_dict(state)
    del state
    left = _left_out(found)
    if left and is_rank0(group):
        warnings.warn(
            f"{path} ({found.format}): restored the model weights ({len(found.parameters)} tensors) only; "
            f"not restored, starting fresh: {'; '.join(left)}",
            UserWarning,
            stacklevel=4,  # the caller of Prepared.load_checkpoint
        )
    return {"step": prepared.step_count, "format": found.format, "restored": ["model"], "not_restored": left}
