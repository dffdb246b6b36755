"""What sharding options become: the plan ``shardcompat explain`` prints and ``shardcompat run``'s
sharding block shows, one function for both so they cannot disagree.

:func:`explain` resolves the options against every candidate backend for a layout (ranks per
node, nodes, device) and returns the JSON data and the text lines.  It is read-only: probing a
backend may build a tiny module, so it runs under :func:`shardcompat._rng.unchanged` and leaves
every random stream of the caller where it was.
"""

from __future__ import annotations

import json
import os
from typing import Any

from . import _rng
from .options import OptionsInput, parse_options

__all__ = ["explain", "layout"]


def layout(nproc: int | None = None, nnodes: int | None = None) -> tuple[int, int, str]:
    """``(ranks per node, nodes, where that came from)`` to plan for.

    Given numbers win (plan for a cluster without launching on it); else, run under a
    launcher (``torchrun ... -m shardcompat explain``), its ``WORLD_SIZE`` and
    ``LOCAL_WORLD_SIZE``; else one node of two ranks.  ValueError for a count below 1.
    """
    for flag, value in (("nproc", nproc), ("nnodes", nnodes)):
        if value is not None and value < 1:
            raise ValueError(f"--{flag} must be at least 1, got {value}")
    if nproc is not None or nnodes is not None:
        return nproc or 2, nnodes or 1, "from the command line"
    world, local = os.environ.get("WORLD_SIZE"), os.environ.get("LOCAL_WORLD_SIZE")
    if world and local and world.isdigit() and local.isdigit() and int(local) > 0:
        return int(local), max(1, int(world) // int(local)), "from the launcher's WORLD_SIZE and LOCAL_WORLD_SIZE"
    return 2, 1, "default: one node of 2 ranks"


def explain(
    options: OptionsInput,
    *,
    backend: str = "auto",
    nproc: int | None = None,
    nnodes: int | None = None,
    device: str = "cpu",
    fairscale: bool = False,
    memory: Any = None,
) -> tuple[dict[str, Any], list[str]]:
    """The plan for ``options`` on ``backend`` (``auto``: every candidate, in preference order):
    its JSON data and its text lines.

    ``memory``: the ``shardcompat explain`` memory arguments (``--params``/``--model``,
    ``--gpu-memory``, ...; :mod:`shardcompat._explain_memory`), or None for no memory section.
    ``fairscale``: also say which implementation serves each ``shardcompat.fairscale`` class.
    ShardingOptionsError for a bad option string, ValueError for a layout that cannot be planned.
    """
    with _rng.unchanged():
        return _explain(options, backend, nproc, nnodes, device, fairscale, memory)


def _explain(options_in: OptionsInput, backend: str, nproc: int | None, nnodes: int | None, device: str,
             fairscale: bool, memory_args: Any) -> tuple[dict[str, Any], list[str]]:
    from .backends import Placement, assess, candidates
    from .backends._optim import refused_optimizers

    options = parse_options(options_in)
    per_node, nodes, source = layout(nproc, nnodes)
    placement = Placement(
        world_size=per_node * nodes,
        local_world_size=per_node,
        device="cuda" if device == "cuda" else "cpu",
    )
    hf = options.to_hf_fsdp()
    rows: list[dict[str, Any]] = []
    for name in candidates(backend if backend != "auto" else options.backend):
        found = assess(name, options, placement)
        row: dict[str, Any] = {"backend": name}
        if isinstance(found, str):
            row["reason"] = found
        else:
            row.update(call=found.call, notes=list(found.notes), effective_stage=found.zero_stage)
            row["refused_optimizers"] = refused_optimizers(name)
        rows.append(row)
    chosen = next((r["backend"] for r in rows if "call" in r), None)
    sized: dict[str, Any] = {}
    if memory_args is not None:
        from . import _explain_memory as memory

        if memory.wanted(memory_args):
            sized = memory.memory_section(memory_args, options, placement, rows, chosen, backend)
    data = {
        "options": str(options),
        "sharding": bool(options),
        "transformers_fsdp": {"fsdp": hf.fsdp, "fsdp_config": hf.fsdp_config},
        "placement": {"world_size": placement.world_size, "nnodes": placement.nnodes,
                      "ranks_per_node": placement.local_world_size, "device": placement.device, "source": source},
        "chosen": chosen,
        "backends": rows,
        **sized,
    }
    facade: list[str] = []
    if fairscale:
        from .fairscale import describe

        facade = describe()
    if facade:
        data["fairscale_facade"] = facade
    lines = [f"canonical:    {data['options'] or '(off: plain DDP)'}"]
    lines.append(f"--fsdp:       {hf.fsdp or '(none)'} {json.dumps(hf.fsdp_config) if hf.fsdp_config else ''}".rstrip())
    lines.append(f"placement:    {placement.world_size} rank(s) on {placement.nnodes} node(s) of "
                 f"{placement.local_world_size}, {placement.device} ({source})")
    lines.append(f"chosen:       {chosen or 'none can serve these options here'}\n")
    for row in rows:
        mark = "*" if row["backend"] == chosen else " "
        if "call" in row:
            lines.append(f"{mark} {row['backend']}:\n    {row['call']}")
            for note in row["notes"]:
                lines.append(f"    note: {note}")
            if row["refused_optimizers"]:
                lines.append(f"    refuses: {'; '.join(row['refused_optimizers'])} (docs/optimizers.md)")
        else:
            reason = row["reason"]
            lines.append(f"{mark} {row['backend']}: {reason[:1].upper()}{reason[1:].rstrip('.')}.")
    if sized:
        from . import _explain_memory as memory

        lines += memory.render(sized, rows, chosen)
    if facade:
        lines.append("\nshardcompat.fairscale:")
        for line in facade:
            lines.append(f"  {line}")
    return data, "\n".join(lines).split("\n")
