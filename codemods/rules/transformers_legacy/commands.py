"""libcst codemod command for the Transformers-legacy table: the rules of
:mod:`codemods.rules.transformers_legacy` (removed imports, legacy names, the tokenizer's target
mode, Trainer overrides, a model folder passed as a checkpoint) for libcst's own runner::

    python -m libcst.tool codemod transformers_legacy.commands.TransformersLegacyCommand --no-format src/

``shardcompat-migrate --transformers-legacy`` runs the same rules without this module.
"""

from __future__ import annotations

from typing import Any

from libcst.codemod import CodemodContext

from ...run.context import Settings
from ..command import RuleCommand
from .homes import TodaysHomes
from .overrides import TrainerOverrides
from .python import TransformersLegacy
from .resume import ModelFolderResume
from .targets import TargetTokenizer

__all__ = ["TransformersLegacyCommand"]


class TransformersLegacyCommand(RuleCommand):
    """Transformers 4.x Trainer-script names to today's spelling."""

    DESCRIPTION = "Rewrite the Transformers 4.x names of shardcompat's legacy table to today's spelling."
    RULES = (TodaysHomes, TransformersLegacy, TargetTokenizer, TrainerOverrides, ModelFolderResume)
    LEGACY = False

    def __init__(self, context: CodemodContext, **kwargs: Any) -> None:
        super().__init__(context, **kwargs)
        self.settings = Settings(legacy=False, transformers_legacy=True)
