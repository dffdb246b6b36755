"""``shardcompat run [--nproc N] script.py ARGS...`` and ``python -m shardcompat.transformers``.

With ``--nproc`` above 1 the ranks are started as ``torchrun --standalone`` starts them (torch's
elastic agent, run in this process), each running ``python -m shardcompat.transformers script.py
ARGS``; with one process the script runs here.  Nothing in this module imports Transformers until
a script runs.

A refusal prints once, last, without a traceback, and the command exits 2 (see
:mod:`shardcompat._refusal`): ``--sharded_ddp`` is parsed here before any rank starts (the one
grammar, :func:`~shardcompat.options.parse_options`); a refusal a rank raises (the Trainer's
``ShardedTrainerError``, a backend's, a checkpoint's) or a usage error of the script's own
argparse parser is left by each rank in a folder instead of printed, and this process prints the
lowest rank's once the agent has stopped them all, without the agent's failure report.  On a rank
of several, argparse's ``ArgumentParser.error`` is replaced while the script runs (and restored
after) so that it raises ``SystemExit(2)`` carrying its text instead of printing it; under a
plain ``torchrun -m shardcompat.transformers`` global rank 0 prints it and the others stay quiet.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from .. import _exit_guard
from .._refusal import EXIT_CODE, FOLDER_ENV, is_refusal, read_refusal, write_refusal
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
    refused = sharded_ddp_refusal(args.script_args)
    if refused is not None:  # before any rank starts: nothing to stop, nothing printed twice
        print(f"shardcompat run: error: {refused}", file=sys.stderr)
        return EXIT_CODE
    if args.json:
        os.environ[JSON_ENV] = "1"  # in this process and the ranks torchrun starts
    if args.nproc == 1:
        return _run_here(args.script, args.script_args, "shardcompat run")
    return _launch(args.nproc, args.script, args.script_args)


def sharded_ddp_refusal(argv: Sequence[str]) -> str | None:
    """Why the script's ``--sharded_ddp`` would be refused, read from its arguments as its parser
    reads them (the words after the last ``--sharded_ddp`` / ``--sharded-ddp``, or ``=VALUE``);
    ``None`` where it is absent or parses."""
    from ..options import ShardingOptionsError, parse_options

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--sharded_ddp", "--sharded-ddp", dest="words", nargs="*", default=None)
    try:
        found, _ = parser.parse_known_args(list(argv))
    except argparse.ArgumentError:
        return None  # the script's own parser will say what is wrong
    if not found.words:  # absent, or the bare flag (legacy 'simple')
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the ranks warn about legacy spellings, as the script's parser does
            parse_options(found.words)
    except ShardingOptionsError as error:
        return f"argument --sharded_ddp: {error}"
    return None


_AGENT_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher")


class _QuietWhenRefused(logging.Filter):
    """Drops the agent's records about stopping the ranks once a rank has left a refusal."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def filter(self, record: logging.LogRecord) -> bool:
        return read_refusal(self.folder) is None


@contextlib.contextmanager
def _refusal_folder() -> Iterator[str]:
    """A folder for the ranks' refusals, named to them in the environment; the agent's loggers quiet
    once one is there; the signal handlers the agent installs put back afterwards."""
    import signal

    signals = [getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, name)]
    handlers = {sig: signal.getsignal(sig) for sig in signals}
    with tempfile.TemporaryDirectory(prefix="shardcompat-run-") as folder:
        quiet = _QuietWhenRefused(folder)
        loggers = [logger for name, logger in list(logging.root.manager.loggerDict.items())
                   if isinstance(logger, logging.Logger) and name.startswith(_AGENT_LOGGERS)]
        for logger in loggers:
            logger.addFilter(quiet)
        os.environ[FOLDER_ENV] = folder
        try:
            yield folder
        finally:
            os.environ.pop(FOLDER_ENV, None)
            for logger in loggers:
                logger.removeFilter(quiet)
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)


def _launch(nproc: int, script: str, argv: Sequence[str]) -> int:
    """``torchrun --standalone --nproc_per_node N -m shardcompat.transformers script ARGS``, with the
    agent in this process so that a refusal ends the command in one message and exit 2."""
    from ..launch import deferred_ctrl_c

    with deferred_ctrl_c():  # a Ctrl-C inside torch's import would abort it: it is raised after
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.run import parse_args, run

    launch = parse_args(["--standalone", f"--nproc_per_node={nproc}", "-m", "shardcompat.transformers",  # type: ignore[no-untyped-call]
                         script, *argv])
    with _refusal_folder() as folder:
        try:
            run(launch)  # type: ignore[no-untyped-call]
        except ChildFailedError as failed:
            refusal = read_refusal(folder)
            if refusal is not None:
                sys.stderr.write(refusal)
                return EXIT_CODE
            print(f"shardcompat run: a rank failed:\n{str(failed).strip()}", file=sys.stderr)
            return 1
        except SignalException:  # Ctrl-C or SIGTERM: the agent has stopped the ranks
            print("shardcompat run: interrupted", file=sys.stderr)
            return 130
    return 0


class _UsageError(SystemExit):
    """argparse's usage error on a rank of several: ``SystemExit(2)`` carrying what it would print."""

    def __init__(self, text: str) -> None:
        super().__init__(2)
        self.text = text


@contextlib.contextmanager
def _usage_errors_held() -> Iterator[None]:
    """On a rank of several, ``ArgumentParser.error`` raises :class:`_UsageError` instead of printing."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        yield
        return
    original = argparse.ArgumentParser.error

    def error(self: argparse.ArgumentParser, message: str) -> Any:
        raise _UsageError(f"{self.format_usage()}{self.prog}: error: {message}\n")

    setattr(argparse.ArgumentParser, "error", error)  # noqa: B010 (restored below)
    try:
        yield
    finally:
        setattr(argparse.ArgumentParser, "error", original)  # noqa: B010


def _refuse(text: str) -> int:
    """Report a refusal once: to the parent that started the ranks, else from global rank 0."""
    folder = os.environ.get(FOLDER_ENV)
    rank = int(os.environ.get("RANK", "0") or 0)
    if folder:
        write_refusal(folder, rank, text)
    elif rank == 0:
        sys.stderr.write(text)
        sys.stderr.flush()
    return EXIT_CODE


def _run_here(script: str, argv: Sequence[str], prog: str) -> int:
    from ._dropin import run_script

    _sharding_report.enable()
    try:
        with _usage_errors_held():
            run_script(script, argv)
    except _UsageError as usage:
        return _refuse(usage.text)
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    except Exception as error:
        if not is_refusal(error):
            raise
        return _refuse(f"{prog}: error: {error}\n")
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
    prog = "shardcompat run" if os.environ.get(FOLDER_ENV) else "python -m shardcompat.transformers"
    return _run_here(args.script, args.script_args, prog)
