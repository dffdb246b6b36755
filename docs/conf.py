"""Sphinx configuration; the option reference and the Transformers legacy-names table (both
committed, so a clone shows them) are regenerated from the code at build time."""

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
    """Refresh docs/options.md and docs/transformers-legacy.md from the code's tables."""
    from shardcompat.reference import options_reference

    from shardcompat.transformers.legacy_reference import legacy_reference

    for target, text in ((HERE / "options.md", options_reference()),
                         (HERE / "transformers-legacy.md", legacy_reference())):
        if not target.exists() or target.read_text() != text:
            target.write_text(text)


def setup(app: object) -> None:
    app.connect("builder-inited", _generate)  # type: ignore[attr-defined]
