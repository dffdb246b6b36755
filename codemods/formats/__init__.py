"""One module per file format, each turning decoded text into span edits by the shared flag
rules of :mod:`codemods.flags`: :mod:`.python` (libcst), :mod:`.shell` (shell scripts,
Makefiles, Dockerfiles), :mod:`.markdown` (Markdown, reStructuredText), :mod:`.config` (JSON,
YAML, TOML, INI) and :mod:`.notebook` (Jupyter)."""
