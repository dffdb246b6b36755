"""Migration tools for legacy ``--sharded_ddp`` usage (and, opt-in, fairscale imports).

``shardcompat-migrate`` (:mod:`codemods.cli`) walks a repository and rewrites every legacy
boolean ``--sharded_ddp`` usage to the list syntax (or, with ``--to fsdp``, to Transformers'
``fsdp=True`` + ``fsdp_config``), in three layers: :mod:`.run` is the run (walk, evidence, one
file per worker, report, atomic write) that :mod:`.cli` drives; :mod:`.formats` holds the
per-format readers and writers (Python, shell, Markdown/RST, configs, notebooks) and the text
machinery they share (spans, JSON spans, argv lists); :mod:`.rules` holds the rule tables
(``--sharded_ddp``, fairscale imports, and any new table beside them), each as a table every
format asks, libcst rules for Python and libcst codemod commands for
``python -m libcst.tool codemod`` (see ``.libcst.codemod.yaml``).  Importing this package is
cheap: no libcst, no torch.
"""
