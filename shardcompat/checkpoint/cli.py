"""``shardcompat checkpoint consolidate | verify``: the checkpoint commands of the CLI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from . import CheckpointError, consolidate, read_manifest

__all__ = ["add_checkpoint_command"]


def add_checkpoint_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``checkpoint consolidate SRC DST`` and ``checkpoint verify PATH`` to a CLI.

    ``subparsers`` is what ``ArgumentParser.add_subparsers()`` returned; each command sets
    ``run(args) -> int`` on the parsed namespace, as every ``shardcompat`` command does.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "checkpoint", help="inspect and convert shardcompat checkpoints"
    )
    sub = parser.add_subparsers(dest="checkpoint_command", required=True)
    cons = sub.add_parser("consolidate", help="turn a sharded checkpoint into the full format")
    cons.add_argument("src", type=Path, help="the sharded checkpoint directory")
    cons.add_argument("dst", type=Path, help="where to write the full checkpoint")
    cons.set_defaults(run=_cli_consolidate)
    ver = sub.add_parser("verify", help="check a checkpoint's files against its manifest")
    ver.add_argument("path", type=Path)
    ver.set_defaults(run=_cli_verify)
    return parser


def _cli_consolidate(args: argparse.Namespace) -> int:
    try:
        written = consolidate(args.src, args.dst)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote full checkpoint {written}")
    return 0


def _cli_verify(args: argparse.Namespace) -> int:
    try:
        manifest = read_manifest(args.path)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(
        f"{args.path}: {manifest['kind']} checkpoint, step {manifest['step']}, saved by "
        f"{manifest['backend']} '{manifest['options']}' on {manifest['world_size']} ranks, "
        f"{len(manifest['files'])} files verified"
    )
    return 0
