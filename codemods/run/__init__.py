"""The run: one ``shardcompat-migrate`` invocation from the paths given to the report.

:mod:`codemods.cli` (arguments, exit codes, the worker pool) drives it: :mod:`.walk` finds the
files (git-aware, ``--exclude``), :mod:`.scope` decides per repository and file whether the
usage is Transformers' (evidence) and so may be edited, :mod:`.engine` rewrites one file in a
worker by handing its text to the format's reader in :mod:`codemods.formats`, :mod:`.report`
holds the edit and warning records and renders them (human or JSON), :mod:`.write` replaces a
file atomically, and :mod:`.context` carries the :class:`~.context.Settings` every layer reads.
How a format is read and what a rule changes live in :mod:`codemods.formats` and
:mod:`codemods.rules`, not here.
"""
