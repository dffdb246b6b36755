"""docs/options.md and docs/transformers-legacy.md are committed (a fresh clone shows them without
building the docs) and are exactly what the code's tables generate."""

from __future__ import annotations

from pathlib import Path

from shardcompat.reference import options_reference
from shardcompat.transformers.legacy_reference import legacy_reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "options.md"
LEGACY = DOC.with_name("transformers-legacy.md")


def test_the_committed_option_reference_is_current() -> None:
    assert DOC.read_text() == options_reference(), (
        "docs/options.md is stale: python -m shardcompat.reference > docs/options.md"
    )


def test_it_is_a_reference_a_reader_can_use() -> None:
    text = DOC.read_text()
    assert "{include}" not in text and text.startswith("# Option reference")
    for word in ("zero_dp_2", "zero_dp_3", "offload", "auto_wrap", "bucket_cap_mb="):
        assert f"`{word}`" in text, word


def test_the_committed_legacy_names_page_is_current() -> None:
    assert LEGACY.read_text() == legacy_reference(), (
        "docs/transformers-legacy.md is stale: "
        "python -m shardcompat.transformers.legacy_reference > docs/transformers-legacy.md"
    )
