"""Migration tools for legacy ``--sharded_ddp`` usage.

``shardcompat-migrate`` (:mod:`codemods.cli`) walks a repository and rewrites every legacy
boolean ``--sharded_ddp`` usage to the list syntax (or, with ``--to fsdp``, to modern
Transformers' ``--fsdp``).  The Python rules are libcst codemod commands that also run under
``python -m libcst.tool codemod`` (see ``.libcst.codemod.yaml``):

- ``python_legacy.MigrateShardedDDP``: all Python rules in one command;
- ``fairscale_imports.FairscaleImportsCommand``: fairscale imports to ``shardcompat.fairscale``.

Importing this package is cheap: no libcst, no torch.
"""
