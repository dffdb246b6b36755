"""The rule tables: *what* changes, one subpackage per table, apart from how files are read.

:mod:`.sharded_ddp` holds legacy boolean ``--sharded_ddp`` usage: :mod:`~.sharded_ddp.flags`,
the one table of flag rules every format asks (values, argv lists, command lines), its libcst
rules for Python (:mod:`~.sharded_ddp.python`) and the same rules as libcst codemod commands
(:mod:`~.sharded_ddp.commands`); :mod:`.fairscale` holds fairscale imports to the
``shardcompat.fairscale`` facade, laid out the same way (:mod:`~.fairscale.python`,
:mod:`~.fairscale.commands`); :mod:`.transformers_legacy` holds the Transformers 4.x names of
:mod:`shardcompat.transformers.legacy_table` (imported, never copied) to today's spelling, with
its command-line rule in :mod:`~.transformers_legacy.flags`; :mod:`.base` is the plumbing every Python rule shares
(:class:`~.base.Records`, :class:`~.base.Rule`, :func:`~.base.run`) and :mod:`.command` the
codemod command every table's commands derive from.  A new table is a new subpackage with the
same parts (its table or plans, a libcst rule, a codemod command), switched on in
:func:`python_rules` below and in :class:`~codemods.run.context.Settings` (with
:func:`~codemods.run.context.needles`, the bytes a file must hold to be looked at).  Importing
this package is cheap: a table loads only when a file needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..run.context import Settings
    from .base import Rule

__all__ = ["python_rules"]


def python_rules(settings: Settings) -> list[type[Rule]]:
    """The Python rules ``settings`` asks for, in the order they run."""
    rules: list[type[Rule]] = []
    if settings.legacy:
        from .sharded_ddp.python import LEGACY

        rules += LEGACY
    if settings.fairscale_imports:
        from .fairscale.python import FairscaleImports

        rules.append(FairscaleImports)
    if settings.transformers_legacy:
        from .transformers_legacy.commands import TransformersLegacyCommand

        rules += TransformersLegacyCommand.RULES
    return rules
