"""The Transformers-legacy table (``shardcompat-migrate --transformers-legacy``): the 4.x
Trainer-script names of :mod:`shardcompat.transformers.legacy_table` to today's spelling.

:mod:`.plans` decides, from the table's own rows, what each use becomes (shared by every
format); :mod:`.python` is the libcst rule (keywords, imports, attribute reads); :mod:`.flags`
the command-line rule (shell, Markdown, notebooks); :mod:`.resume` a local model folder passed
as ``resume_from_checkpoint``; :mod:`.commands` the libcst codemod command.
The table is imported, never copied, so what ``shardcompat run`` serves and what migrates
cannot disagree.
"""

#: The rule name of every edit, and of every use left for a person.
RULE = "transformers-legacy"
UNMIGRATED = "transformers-legacy-unmigrated"
