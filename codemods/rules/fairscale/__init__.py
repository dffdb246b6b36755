"""The fairscale-imports table (``shardcompat-migrate --fairscale-imports``): fairscale imports
and module uses to the ``shardcompat.fairscale`` facade.

:mod:`.python` is the libcst rule, a prefix swap (``fairscale.`` -> ``shardcompat.fairscale.``;
what it may move comes from the whole-file facts of :mod:`codemods.formats.pyscan` and the
facade's own table of what each mirrored path serves); :mod:`.commands` wraps it as a
libcst codemod command for ``python -m libcst.tool codemod fairscale.commands.FairscaleImportsCommand``.
"""
