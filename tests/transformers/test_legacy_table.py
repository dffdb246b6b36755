"""The legacy-names table as data and as the docs page generated from it (no Transformers needed)."""

from __future__ import annotations

from shardcompat.transformers.legacy_reference import legacy_reference
from shardcompat.transformers.legacy_table import ROWS, Kind, Served


def test_names_are_unique_per_kind() -> None:
    keys = [(r.kind, r.name) for r in ROWS]
    assert len(keys) == len(set(keys))


def test_the_docs_page_shows_every_row_with_how_it_is_served() -> None:
    page = legacy_reference()
    for r in ROWS:
        spelling = f"`--{r.name}`" if r.kind is Kind.FIELD else f"`{r.name}`"
        reason = r.reason.split(";")[0].replace("|", "\\|")
        assert any(ln.startswith(f"| {spelling} |") and f"| {r.removed} | {r.served} |" in ln and reason in ln
                   for ln in page.splitlines()), r  # one name may be a row of two kinds (use_auth_token)
    for kind in {r.kind for r in ROWS}:
        assert f"## {kind.value[0].upper()}{kind.value[1:]}s" in page
    assert all(f"**{served}**" in page for served in Served)


def test_refused_values_are_listed() -> None:
    page = legacy_reference()
    assert "Refused: `'apex'`." in page and "Refused: any value." in page


def test_the_page_opens_with_the_coverage_and_shows_every_surface_row_and_hook() -> None:
    from shardcompat.transformers._overrides import PROTOCOL
    from shardcompat.transformers.legacy_table import COVERAGE, SURFACE

    page = legacy_reference()
    sections = [ln for ln in page.splitlines() if ln.startswith("## ")]
    assert sections[0] == "## Coverage" and "## Every other removed name" in sections and "## Trainer hooks" in sections
    counts = COVERAGE["by_where"].values()
    assert all(c[3] == 0 for c in counts)  # unlisted: none
    total = [sum(c[i] for c in counts) for i in range(4)]
    assert total[0] == total[1] + total[2] and f"| **total** | {total[0]} | {total[1]} | {total[2]} | 0 |" in page
    lines = page.splitlines()
    for r in SURFACE:
        assert any(ln.startswith(f"| `{r.pattern}`") and f"| {r.served} |" in ln for ln in lines), r
    for c in PROTOCOL:
        assert any(ln.startswith(f"| `{c.owner}.{c.method}` |") and f"| {c.served} |" in ln for ln in lines), c


def test_each_row_names_the_api_it_was_and_the_release_that_dropped_it() -> None:
    for r in ROWS:
        assert r.removed_in.split()[0] == r.library and r.removed_in.endswith(r.removed.split()[-1]), r
        assert r.api == "Transformers 4.x" or r.library == "datasets", r
    by_name = {r.name: r for r in ROWS if r.library == "datasets"}
    # the last major release that had it: the top-level ArrowWriter went in 2.0, load_metric in 3.0
    assert (by_name["ArrowWriter"].api, by_name["load_metric"].api) == ("datasets 1.x", "datasets 2.x")
    assert by_name["load_metric"].removed_in == "datasets 3.0"
