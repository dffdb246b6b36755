"""Per-format readers and writers: decoded text in, span edits out, bytes outside the spans untouched.

One module per file format: :mod:`.python` (the fast ``ast`` path over :mod:`.pyscan`'s units
with the libcst rules, or the whole module), :mod:`.shell` (shell scripts, Makefiles,
Dockerfiles), :mod:`.markdown` (Markdown, reStructuredText), :mod:`.config` (JSON, YAML, TOML,
INI) and :mod:`.notebook` (Jupyter); :mod:`.kinds` tells which format a file is.  The text
machinery they share: :mod:`.spans` (span edits and the rewrites and issues that carry them,
line numbers, skip markers, byte-faithful decoding), :mod:`.commands` (command lines inside
text: segments, quoting, what a dropped flag leaves), :mod:`.jsonspan` (a JSON reader that keeps
every value's span) and :mod:`.argv` (argv lists by span, in every written form).  What to
change comes from :mod:`codemods.rules`, whose tables build on this machinery, never on each other.
"""
