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
    from .backends import Placement, assess, candidates

    options = parse_options(args.options)
    placement = Placement(
        world_size=args.nproc * args.nnodes,
        local_world_size=args.nproc,
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
        rows.append(row)
    chosen = next((r["backend"] for r in rows if "call" in r), None)
    from . import _explain_memory as memory

    sized = memory.memory_section(args, options, placement, rows, chosen, args.backend) if memory.wanted(args) else {}
    data = {
        "options": str(options),
        "sharding": bool(options),
        "transformers_fsdp": {"fsdp": hf.fsdp, "fsdp_config": hf.fsdp_config},
        "placement": {"world_size": placement.world_size, "nnodes": placement.nnodes, "device": placement.device},
        "chosen": chosen,
        "backends": rows,
        **sized,
    }
    facade = _facade() if args.fairscale else []
    if facade:
        data["fairscale_facade"] = facade
    if args.json:
        print(json.dumps(data, indent=2))
        return 0 if chosen else 1
    print(f"canonical:    {data['options'] or '(off: plain DDP)'}")
    print(f"--fsdp:       {hf.fsdp or '(none)'} {json.dumps(hf.fsdp_config) if hf.fsdp_config else ''}".rstrip())
    print(f"placement:    {placement.world_size} rank(s) on {placement.nnodes} node(s), {placement.device}")
    print(f"chosen:       {chosen or 'none can serve these options here'}\n")
    for row in rows:
        mark = "*" if row["backend"] == chosen else " "
        if "call" in row:
            print(f"{mark} {row['backend']}:\n    {row['call']}")
            for note in row["notes"]:
                print(f"    note: {note}")
        else:
            reason = row["reason"]
            print(f"{mark} {row['backend']}: {reason[:1].upper()}{reason[1:].rstrip('.')}.")
    if sized:
        print("\n".join(memory.render(sized, rows, chosen)))
    if facade:
        print("\nshardcompat.fairscale:")
        for line in facade:
            print(f"  {line}")
    return 0 if chosen else 1


def _consolidate(args: argparse.Namespace) -> int:
    from .checkpoint import CheckpointError, consolidate

    try:
        written = consolidate(args.src, args.dst)
    except CheckpointError as error:
        print(f"shardcompat checkpoint: error: {error}", file=sys.stderr)
        return 1
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
    explain.add_argument("--nproc", type=int, default=2, help="ranks per node to plan for (default 2)")
    explain.add_argument("--nnodes", type=int, default=1, help="nodes to plan for (default 1)")
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
    cons.add_argument("dst", type=Path, help="where to write the full checkpoint")
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
