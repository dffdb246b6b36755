"""What ``shardcompat run`` shows once per job, so a user sees from the outside that it shards.

Global rank 0 prints the plan exactly as ``shardcompat explain`` gives it for the job's options
and layout (:func:`shardcompat.explain.explain`), then each rank's parameter, gradient and
optimizer-state bytes (:func:`shardcompat.memory.count_state` over what the rank holds, gathered
from every rank in one collective) next to the unsharded model's parameter bytes.  With ``--json`` (the
:data:`JSON_ENV` variable) the same goes, atomically, into ``output_dir/`` :data:`FILENAME`.

When: right after the first optimizer step of training.  Wrapping happens before training and
builds the optimizer, but an optimizer such as AdamW creates its state in its first step and
gradients exist only after a backward; counted at wrapping, both would read 0 B and hide the
very sharding the block is meant to show.  The block says so.

Observing is read-only: every rank runs the whole block under :func:`shardcompat._rng.unchanged`,
so the torch (CPU and CUDA), NumPy and Python random streams of the training it watches are the
ones it would have had without ``shardcompat run``.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..prepared import Prepared

__all__ = ["FILENAME", "JSON_ENV", "MOMENT", "enable", "watch"]

JSON_ENV = "SHARDCOMPAT_RUN_JSON"  # "1": also write the block as JSON into the Trainer's output_dir
FILENAME = "shardcompat_sharding.json"
MOMENT = ("after the first optimizer step (the optimizer creates its state there, and gradients exist only "
          "after a backward: counted at wrapping, both would be 0 B)")
_enabled = False


def enable() -> None:
    """Show the block in this process (``shardcompat run`` and each rank it starts call this)."""
    global _enabled
    _enabled = True


def watch(prepared: Prepared, backend: str, output_dir: str, model_bytes: int) -> None:
    """Show the block after ``prepared``'s first optimizer step (every rank calls this)."""
    if not _enabled:
        return

    shown = False

    def after_step(*_: Any) -> None:
        # Not handle.remove(): torch is iterating the optimizer's post-hooks right now, and a
        # hook the user registered after this one would make that a "mutated during iteration" crash.
        nonlocal shown
        if not shown:
            shown = True
            _show(prepared, backend, output_dir, model_bytes)

    prepared.optimizer.register_step_post_hook(after_step)


def _explain_args(prepared: Prepared, backend: str, world: int) -> dict[str, Any]:
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = "cuda" if prepared.placement.device.startswith("cuda") else "cpu"
    return {"backend": backend, "nproc": local, "nnodes": max(1, world // local), "device": device}


_COUNTS = ("params", "grads", "optim", "cpu", "total")  # StateBytes.as_dict order


def _gather(prepared: Prepared, mine: dict[str, int], world: int) -> list[dict[str, int]]:
    """Every rank's counts, in one all_gather of a small int64 tensor (every rank of the job,
    whatever group the sharding uses; no pickling, so no second collective for sizes)."""
    import torch
    import torch.distributed as dist

    row = [mine["rank"], *(mine[k] for k in _COUNTS)]
    if world == 1:
        return [mine]
    device = prepared.placement.device if dist.get_backend() == "nccl" else "cpu"
    local = torch.tensor(row, dtype=torch.int64, device=device)
    rows = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(rows, local)
    return [dict(zip(("rank", *_COUNTS), (int(x) for x in r.tolist()))) for r in rows]


def _show(prepared: Prepared, backend: str, output_dir: str, model_bytes: int) -> None:
    from .. import _rng

    with _rng.unchanged():
        _block(prepared, backend, output_dir, model_bytes)


def _block(prepared: Prepared, backend: str, output_dir: str, model_bytes: int) -> None:
    import torch.distributed as dist

    from ..memory import count_state

    initialized = dist.is_initialized()
    counts = count_state(prepared.local_tensors()).as_dict()
    mine = {"rank": dist.get_rank() if initialized else 0, **{k: int(counts[k]) for k in _COUNTS}}
    world = dist.get_world_size() if initialized else 1
    ranks = _gather(prepared, mine, world)
    if mine["rank"] != 0:
        return
    from ..explain import explain

    layout = _explain_args(prepared, backend, world)
    plan, plan_lines = explain(str(prepared.options), **layout)
    argv = [str(prepared.options)]
    for key, value in layout.items():
        argv += [f"--{key}", str(value)]
    report = {
        "moment": MOMENT,
        "options": str(prepared.options),
        "backend": prepared.backend,
        "world_size": world,
        "model_param_bytes": model_bytes,
        "ranks": ranks,
        "explain_command": "shardcompat explain " + " ".join(shlex.quote(a) for a in argv),
        "explain": plan,
    }
    print("\n".join(_render(report, plan_lines)), flush=True)
    if os.environ.get(JSON_ENV) == "1":
        from .._atomic import write_json

        path = Path(output_dir) / FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, report)
        print(f"[shardcompat] written to {path}", flush=True)


def _render(report: dict[str, Any], plan_lines: list[str]) -> list[str]:
    from ..train.report import align_columns, format_bytes

    psi = report["model_param_bytes"]
    lines = [f"***** shardcompat: '{report['options']}' on {report['backend']}, {report['world_size']} rank(s) *****",
             f"plan ({report['explain_command']}):"]
    lines += [f"  {line}".rstrip() for line in plan_lines]
    lines.append(f"state per rank, counted {report['moment']}:")
    table = [["rank", "params", "grads", "optim", "total", "on CPU", "params / model"]]
    for r in report["ranks"]:
        share = f"{r['params'] / psi:.2f}x" if psi else "-"
        table.append([str(r["rank"]), *(format_bytes(r[k]) for k in ("params", "grads", "optim", "total", "cpu")),
                      share])
    lines += [f"  {line}" for line in align_columns(table)]
    lines.append(f"unsharded model: {format_bytes(psi)} of parameters ({psi} B)")
    lines.append("*****")
    return lines
