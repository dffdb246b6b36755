"""``shardcompat run [--nproc N] script.py ARGS...`` and ``python -m shardcompat.transformers``.

With ``--nproc`` above 1 the ranks are started by ``torchrun`` (``torch.distributed.run
--standalone``), each running ``python -m shardcompat.transformers script.py ARGS``; with one
process the script runs here.  Nothing in this module imports Transformers until a script runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from .. import _exit_guard
from . import _sharding_report
from ._sharding_report import FILENAME, JSON_ENV

__all__ = ["add_run_command", "main", "run_command"]

DESCRIPTION = (
    "Run an unmodified Hugging Face Trainer script: inside it, transformers.TrainingArguments, "
    "Seq2SeqTrainingArguments, Trainer, Seq2SeqTrainer and HfArgumentParser are shardcompat's "
    "drop-ins, so --sharded_ddp (any spelling) shards the model with shardcompat.prepare on the "
    "torch (or fairscale) installed today. The other Transformers 4.x names the installed release "
    "removed (--evaluation_strategy, --overwrite_output_dir, Trainer(tokenizer=), "
    "from_pretrained(use_auth_token=), is_torch_tpu_available, ...) are served as "
    "docs/transformers-legacy.md says, each with a FutureWarning naming today's spelling. "
    "Once per job, after the first optimizer step, global rank 0 prints how the job shards: the plan "
    "as 'shardcompat explain' shows it and each rank's parameter, gradient and optimizer-state bytes."
)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", help="the training script, e.g. run_clm.py")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="the script's own arguments, e.g. --sharded_ddp zero_dp_3 offload")


def add_run_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``run`` to a CLI (``subparsers`` from ``add_subparsers()``); sets ``run(args) -> int``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "run", help="run a Hugging Face Trainer script with --sharded_ddp working", description=DESCRIPTION
    )
    parser.add_argument("--nproc", type=int, default=1, metavar="N",
                        help="processes on this machine, started by torchrun (default 1: in this process)")
    parser.add_argument("--json", action="store_true",
                        help=f"also write the sharding block (printed once per job after the first optimizer "
                             f"step: the plan as 'shardcompat explain' shows it, each rank's parameter, gradient "
                             f"and optimizer-state bytes) as JSON to OUTPUT_DIR/{FILENAME}; the same as setting "
                             f"{JSON_ENV}=1, which also works under torchrun -m shardcompat.transformers")
    _add_arguments(parser)
    parser.set_defaults(run=run_command)
    return parser


def run_command(args: argparse.Namespace) -> int:
    if args.nproc < 1:
        print(f"shardcompat run: error: --nproc must be 1 or more, got {args.nproc}", file=sys.stderr)
        return 2
    if not os.path.isfile(args.script):
        print(f"shardcompat run: error: no such script: {args.script}", file=sys.stderr)
        return 2
    if args.json:
        os.environ[JSON_ENV] = "1"  # in this process and the ranks torchrun starts
    if args.nproc == 1:
        return _run_here(args.script, args.script_args)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
        "-m", "shardcompat.transformers", args.script, *args.script_args,
    ]
    return subprocess.call(command)


def _run_here(script: str, argv: Sequence[str]) -> int:
    from ._dropin import run_script

    _sharding_report.enable()
    try:
        run_script(script, argv)
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    finally:
        _close_process_group()
    return 0


def _close_process_group() -> None:
    """Destroy the group the script's Trainer opened, and keep its gloo threads from aborting
    the rank at interpreter shutdown (see :mod:`shardcompat._exit_guard`)."""
    _exit_guard.install()
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m shardcompat.transformers script.py ARGS`` (what each torchrun rank runs)."""
    parser = argparse.ArgumentParser(prog="python -m shardcompat.transformers", description=DESCRIPTION)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    if not os.path.isfile(args.script):
        parser.error(f"no such script: {args.script}")
    return _run_here(args.script, args.script_args)
