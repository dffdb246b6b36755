"""Migration tools for legacy ``--sharded_ddp`` usage (and, opt-in, fairscale imports).

``shardcompat-migrate`` (:mod:`codemods.cli`) walks a repository and rewrites every legacy
boolean ``--sharded_ddp`` usage to the list syntax (or, with ``--to fsdp``, to Transformers'
``fsdp=True`` + ``fsdp_config``).  The layout:

- the driver: :mod:`.cli` (arguments, exit codes), :mod:`.walk` (git-aware discovery),
  :mod:`.scope` (evidence), :mod:`.engine` (one file), :mod:`.report`, :mod:`.write`;
- :mod:`.flags`: the one table of flag rules every format asks (values, argv lists, command
  lines); :mod:`.argv` applies its argv plan to spans;
- :mod:`.formats`: one module per file format (Python, shell, Markdown/RST, configs, notebooks);
- :mod:`.pyscan` and :mod:`.pyrules`: the Python path (``ast`` finds the statements, libcst
  rules rewrite them);
- :mod:`.python_legacy` and :mod:`.fairscale_imports`: the same rules as libcst codemod
  commands, for ``python -m libcst.tool codemod`` (see ``.libcst.codemod.yaml``).

Importing this package is cheap: no libcst, no torch.
"""
