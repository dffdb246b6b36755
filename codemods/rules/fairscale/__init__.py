"""The fairscale-imports table (``shardcompat-migrate --fairscale-imports``): fairscale imports
and module uses to the ``shardcompat.fairscale`` facade.

:mod:`.python` is the libcst rule (what it may rewrite comes from the whole-file facts of
:mod:`codemods.formats.pyscan` and the facade's own ``__all__``); :mod:`.commands` wraps it as a
libcst codemod command for ``python -m libcst.tool codemod fairscale.commands.FairscaleImportsCommand``.
"""
