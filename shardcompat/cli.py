"""``shardcompat info | explain | train | checkpoint | run``: what is installed, what options become,
a real run, checkpoint tools, and an unmodified Hugging Face Trainer script run with ``--sharded_ddp``."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .options import BACKEND_CHOICES, ShardingOptionsError

__all__ = ["build_parser", "main"]

_T = TypeVar("_T")


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
    from .explain import explain

    try:
        data, lines = explain(" ".join(args.options), backend=args.backend, nproc=args.nproc, nnodes=args.nnodes,
                              device=args.device, fairscale=args.fairscale, memory=args)
    except ShardingOptionsError:
        raise  # a bad option string: main() reports it as it does for every command
    except ValueError as error:
        print(f"shardcompat explain: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(data, indent=2) if args.json else "\n".join(lines))
    return 0 if data["chosen"] else 1


def _checkpoint_command(work: Callable[[], _T], show: Callable[[_T], int]) -> int:
    """``show(work())``; a bad checkpoint is one line and exit 1, a refused destination exit 2
    (nothing written)."""
    from .checkpoint import CheckpointError, WriteRefused

    try:
        result = work()
    except CheckpointError as error:
        print(f"shardcompat checkpoint: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, WriteRefused) else 1
    return show(result)


def _consolidate(args: argparse.Namespace) -> int:
    from .checkpoint import consolidate

    def show(written: Any) -> int:
        print(f"wrote full checkpoint {written}")
        return 0

    return _checkpoint_command(lambda: consolidate(args.src, args.dst), show)


def _verify(args: argparse.Namespace) -> int:
    from .checkpoint import read_manifest

    def show(manifest: dict[str, Any]) -> int:
        print(
            f"{args.path}: {manifest['kind']} checkpoint, step {manifest['step']}, saved by "
            f"{manifest['backend']} '{manifest['options']}' on {manifest['world_size']} ranks, "
            f"{len(manifest['files'])} files verified"
        )
        return 0

    return _checkpoint_command(lambda: read_manifest(args.path), show)


def _inspect(args: argparse.Namespace) -> int:
    """Exit 1 where the checkpoint cannot be read or contradicts itself, else 0 (missing parts are listed)."""
    from .checkpoint.formats import describe

    def show(found: Any) -> int:
        print(json.dumps(found.to_json(), indent=2) if args.json else "\n".join(found.lines()))
        return 1 if found.inconsistent else 0

    return _checkpoint_command(lambda: describe(args.path), show)


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
    # Words as a shell splits them (explain zero_dp_3 offload) read as the quoted text, as train's
    # --sharded_ddp does: _explain joins them.
    explain.add_argument("options", nargs="*", default=[], metavar="OPTIONS",
                         help="e.g. 'zero_dp_3 offload auto_wrap' (quoted or not)")
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

    checkpoint = sub.add_parser("checkpoint", help="inspect, verify and consolidate checkpoints")
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
    inspect = commands.add_parser(
        "inspect", help="what a checkpoint holds: shardcompat, torch DCP, Hugging Face, optimizer state files",
    )
    inspect.add_argument("path", type=Path, help="a checkpoint folder or file (its format is read from the files)")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(run=_inspect)

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
        sys.stdout.flush()
    except ShardingOptionsError as error:
        parser.exit(2, f"shardcompat {args.command}: error: {error}\n")
    except BrokenPipeError:  # `shardcompat explain ... | head -1`: the reader has had enough
        _silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it
    except KeyboardInterrupt:
        print(f"shardcompat {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit cannot fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
