"""Drop-in ``--sharded_ddp`` arguments for argparse and ``HfArgumentParser`` dataclasses.

Old scripts pass the bare flag (``--sharded_ddp``), a boolean (``--sharded_ddp True``), one
quoted list (``--sharded_ddp "zero_dp_2 offload"``) or several words
(``--sharded_ddp zero_dp_2 offload``).  All of them land as one :class:`ShardingOptions`.
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

from .options import TOKENS, ShardingOptions, ShardingOptionsError, legacy_simple, parse_options

__all__ = ["ShardedDDPAction", "add_sharded_ddp_argument", "sharded_ddp_field"]

HELP = (
    "Sharded data parallel: words from "
    + ", ".join(TOKENS)
    + " and key=value settings, e.g. 'zero_dp_3 offload bucket_cap_mb=50'. "
    "The bare flag means 'simple' (legacy)."
)


class ShardedDDPAction(argparse.Action):
    """Parses the flag's words with :func:`parse_options`; a bad value is a usage error."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs["nargs"] = "*"
        kwargs.pop("type", None)  # HfArgumentParser passes the field's annotation
        kwargs.setdefault("default", ShardingOptions())
        kwargs.setdefault("metavar", "OPTION")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        words = [values] if isinstance(values, str) else list(values or [])
        try:
            with warnings.catch_warnings():
                # Point the legacy warning at the user's script, not at argparse internals.
                warnings.simplefilter("default", FutureWarning)
                if words:
                    options = parse_options(words, stacklevel=8)
                else:
                    options = legacy_simple(f"the bare {option_string or self.dest} flag", 7)
        except ShardingOptionsError as error:
            parser.error(f"argument {option_string or self.dest}: {error}")
        setattr(namespace, self.dest, options)


def add_sharded_ddp_argument(
    parser: argparse.ArgumentParser, flag: str = "--sharded_ddp", **kwargs: Any
) -> argparse.Action:
    """Add ``flag`` to ``parser``; the namespace then holds a :class:`ShardingOptions`."""
    kwargs.setdefault("help", HELP)
    return parser.add_argument(flag, action=ShardedDDPAction, **kwargs)


def sharded_ddp_field(default: str = "", *, help: str = HELP) -> Any:
    """A dataclass field for ``HfArgumentParser``-style parsers.

    Declare it as ``sharded_ddp: str = sharded_ddp_field()``.  After parsing, the attribute
    holds a :class:`ShardingOptions` when the flag was given and the default string when it
    was not; ``parse_options(args.sharded_ddp)`` gives options in both cases::

        @dataclass
        class Args:
            sharded_ddp: str = sharded_ddp_field()

        (args,) = HfArgumentParser(Args).parse_args_into_dataclasses()
        options = shardcompat.parse_options(args.sharded_ddp)
    """
    return dataclasses.field(default=default, metadata={"help": help, "action": ShardedDDPAction})
