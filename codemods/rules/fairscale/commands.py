"""libcst codemod command for fairscale imports: the rule of :mod:`codemods.rules.fairscale.python`
for libcst's own runner (``.libcst.codemod.yaml``)::

    python -m libcst.tool codemod fairscale.commands.FairscaleImportsCommand --no-format src/

``shardcompat-migrate --fairscale-imports`` runs the same rule without this module.
"""

from __future__ import annotations

from ..command import RuleCommand
from .python import FairscaleImports

__all__ = ["FairscaleImportsCommand"]


class FairscaleImportsCommand(RuleCommand):
    """fairscale imports and module uses to the ``shardcompat.fairscale`` facade."""

    DESCRIPTION = "Rewrite fairscale imports to the shardcompat.fairscale facade."
    RULES = (FairscaleImports,)
    LEGACY = False
