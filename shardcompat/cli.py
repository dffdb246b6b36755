"""``shardcompat info | explain | train | checkpoint | run``: what is installed, what options become,
a real run, checkpoint tools, and an unmodified Hugging Face Trainer script run with ``--sharded_ddp``."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .options import BACKEND_CHOICES, ShardingOptionsError, parse_options

__all__ = ["build_parser", "main"]


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    found: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("torch", "fairscale", "shardcompat"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def _info(args: argparse.Namespace) -> int:
    import torch

    from .backends import probe_all

    if args.matrix:
        from .matrix import collect, render

        record = collect()
        print(json.dumps(record, indent=2) if args.json else render([record]))
        return 0

    probes = probe_all()
    data: dict[str, Any] = {
        "versions": _versions(),
        "cuda": torch.cuda.is_available(),
        "gpus": torch.cuda.device_count(),
        "backends": [
            {
                "name": p.backend,
                "available": p.available,
                "reason": p.reason,
                "versions": dict(p.versions),
                "features": dict(p.features),
            }
            for p in probes
        ],
    }
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for name, version in data["versions"].items():
        print(f"{name:<12} {version or 'not installed'}")
    print(f"{'cuda':<12} {'yes, ' + str(data['gpus']) + ' GPU(s)' if data['cuda'] else 'no'}")
    print("\nbackends:")
    for row in data["backends"]:
        state = "ready" if row["available"] else "unavailable"
        features = ", ".join(k for k, on in row["features"].items() if on)
        detail = row["reason"] if not row["available"] else features
        print(f"  {row['name']:<15} {state:<12} {detail}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    try:
        data, lines = explain(args)
    except ShardingOptionsError:
        raise  # a bad option string: main() reports it as it does for every command
    except ValueError as error:
        print(f"shardcompat explain: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(data, indent=2) if args.json else "\n".join(lines))
    return 0 if data["chosen"] else 1


def explain(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """What ``shardcompat explain`` shows: its JSON data and its text lines (``shardcompat run``
    prints the same for the job it runs); ValueError for a layout that cannot be planned."""
    from .backends import Placement, assess, candidates
    from .backends._optim import refused_optimizers

    options = parse_options(args.options)
    per_node, nnodes, source = _layout(args)
    placement = Placement(
        world_size=per_node * nnodes,
        local_world_size=per_node,
        device="cuda" if args.device == "cuda" else "cpu",
    )
    hf = options.to_hf_fsdp()
    rows: list[dict[str, Any]] = []
    for name in candidates(args.backend if args.backend != "auto" else options.backend):
        found = assess(name, options, placement)
        row: dict[str, Any] = {"backend": name}
        if isinstance(found, str):
            row["reason"] = found
        else:
            row.update(call=found.call, notes=list(found.notes), effective_stage=found.zero_stage)
            row["refused_optimizers"] = refused_optimizers(name)
        rows.append(row)
    chosen = next((r["backend"] for r in rows if "call" in r), None)
    from . import _explain_memory as memory

    sized = memory.memory_section(args, options, placement, rows, chosen, args.backend) if memory.wanted(args) else {}
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
    facade = _facade() if args.fairscale else []
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
        lines += memory.render(sized, rows, chosen)
    if facade:
        lines.append("\nshardcompat.fairscale:")
        for line in facade:
            lines.append(f"  {line}")
    return data, "\n".join(lines).split("\n")


def _layout(args: argparse.Namespace) -> tuple[int, int, str]:
    """``(ranks per node, nodes, where that came from)`` for ``explain``.

    The command line wins (plan for a cluster without launching on it); else, run under a
    launcher (``torchrun ... -m shardcompat explain``), its ``WORLD_SIZE`` and
    ``LOCAL_WORLD_SIZE``; else one node of two ranks.
    """
    for flag in ("nproc", "nnodes"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ValueError(f"--{flag} must be at least 1, got {value}")
    if args.nproc is not None or args.nnodes is not None:
        return args.nproc or 2, args.nnodes or 1, "from the command line"
    import os

    world, local = os.environ.get("WORLD_SIZE"), os.environ.get("LOCAL_WORLD_SIZE")
    if world and local and world.isdigit() and local.isdigit() and int(local) > 0:
        return int(local), max(1, int(world) // int(local)), "from the launcher's WORLD_SIZE and LOCAL_WORLD_SIZE"
    return 2, 1, "default: one node of 2 ranks"


def _consolidate(args: argparse.Namespace) -> int:
    """Exit 2 where the destination is refused (nothing written), 1 where the source is bad."""
    from .checkpoint import CheckpointError, WriteRefused, consolidate

    try:
        written = consolidate(args.src, args.dst)
    except CheckpointError as error:
        print(f"shardcompat checkpoint: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, WriteRefused) else 1
    print(f"wrote full checkpoint {written}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from .checkpoint import CheckpointError, read_manifest

    try:
        manifest = read_manifest(args.path)
    except CheckpointError as error:
        print(f"shardcompat checkpoint: error: {error}", file=sys.stderr)
        return 1
    print(
        f"{args.path}: {manifest['kind']} checkpoint, step {manifest['step']}, saved by "
        f"{manifest['backend']} '{manifest['options']}' on {manifest['world_size']} ranks, "
        f"{len(manifest['files'])} files verified"
    )
    return 0


def _facade() -> list[str]:
    from .fairscale import describe

    return describe()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shardcompat",
        description="Sharded data parallel across fairscale and native PyTorch, one option grammar.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="versions, CUDA and which backends can run here")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.add_argument(
        "--matrix", action="store_true",
        help="which backend serves which options with these versions (docs/compatibility.md)",
    )
    info.set_defaults(run=_info)

    from ._explain_memory import EXAMPLES, add_arguments

    explain = sub.add_parser("explain", help="what the options become on each backend, and will my model fit",
                             epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    explain.add_argument("options", nargs="?", default="", help="e.g. 'zero_dp_3 offload auto_wrap'")
    explain.add_argument(
        "--fairscale", action="store_true",
        help="also say which implementation serves each class of shardcompat.fairscale",
    )
    explain.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, metavar="BACKEND",
                         help="explain only this backend (or family: torch, fairscale); "
                              f"one of {', '.join(BACKEND_CHOICES)} (default auto: all, in preference order)")
    explain.add_argument("--nproc", "--nproc-per-node", type=int, default=None,
                         help="ranks per node to plan for (default: the launcher's LOCAL_WORLD_SIZE "
                              "when run under torchrun, else 2)")
    explain.add_argument("--nnodes", type=int, default=None,
                         help="nodes to plan for (default: WORLD_SIZE / LOCAL_WORLD_SIZE under torchrun, else 1)")
    explain.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                         help="plan for CPU ranks (gloo) or one GPU per rank (nccl); default cpu")
    explain.add_argument("--json", action="store_true", help="print JSON")
    add_arguments(explain)
    explain.set_defaults(run=_explain)

    from . import train

    runner = sub.add_parser("train", help="train a small bundled GPT on local ranks")
    train.configure_parser(runner)
    runner.set_defaults(run=train.run)

    checkpoint = sub.add_parser("checkpoint", help="inspect and convert shardcompat checkpoints")
    commands = checkpoint.add_subparsers(dest="checkpoint_command", required=True)
    cons = commands.add_parser("consolidate", help="turn a sharded checkpoint into the full format")
    cons.add_argument("src", type=Path, help="the sharded checkpoint directory")
    cons.add_argument(
        "dst", type=Path,
        help="the directory to write the full checkpoint into (other files there are kept; it may not overlap SRC)",
    )
    cons.set_defaults(run=_consolidate)
    verify = commands.add_parser("verify", help="check a checkpoint's files against its manifest")
    verify.add_argument("path", type=Path)
    verify.set_defaults(run=_verify)

    from .transformers._cli import add_run_command  # imports no Transformers until a script runs

    add_run_command(sub)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FutureWarning)
        args = parser.parse_args(argv)
    for warning in caught:  # a legacy spelling on the command line: say so as the command
        if issubclass(warning.category, FutureWarning):
            print(f"shardcompat {args.command}: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    try:
        code: int = args.run(args)
    except ShardingOptionsError as error:
        parser.exit(2, f"shardcompat {args.command}: error: {error}\n")
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
