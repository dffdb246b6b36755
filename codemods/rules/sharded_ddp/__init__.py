"""The ``--sharded_ddp`` table: legacy boolean usage to the list syntax (or Transformers' FSDP).

:mod:`.flags` is the one place the flag's rules live (what a value means and becomes, argv
plans, command-line span edits) and every format asks it; :mod:`.python` applies them to Python
as libcst rules (keywords, assignments, comparisons, declarations, strings holding command
lines); :mod:`.commands` wraps those rules as libcst codemod commands for
``python -m libcst.tool codemod sharded_ddp.commands.MigrateShardedDDP``.
"""
