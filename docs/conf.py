"""Sphinx configuration; the option reference (docs/options.md, committed) is regenerated from the
vocabulary at build time."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

project = "shardcompat"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
suppress_warnings = ["myst.xref_missing"]
html_theme = "alabaster"


def _generate(_app: object) -> None:
    """Refresh docs/options.md (committed, so that a clone shows it) from the vocabulary."""
    from shardcompat.reference import options_reference

    text = options_reference()
    target = HERE / "options.md"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)


def setup(app: object) -> None:
    app.connect("builder-inited", _generate)  # type: ignore[attr-defined]
