"""The docs page of the legacy-names table, ``docs/transformers-legacy.md``: committed so a clone shows it,
generated so it cannot drift (a test compares them)."""

from __future__ import annotations

from .legacy_table import ROWS, Kind, LegacyName, Served

__all__ = ["legacy_reference"]

_HOW = {
    Served.RENAMED: "the value goes to today's name unchanged",
    Served.MAPPED: "becomes the setting that does today what it did then",
    Served.NO_OP: "accepted, nothing to do today (the attribute keeps its value); the reason says why",
    Served.REFUSED: "no honest mapping: refused before training, naming the replacement",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _replacement(r: LegacyName) -> str:
    text = r.replacement
    if not text:
        return "—"
    code = text.startswith(("--", "TENSORBOARD")) or text.endswith(("=", ")")) or text in ("True", "False")
    return _cell(f"`{text}`" if code else text)


def _spelling(r: LegacyName) -> str:
    return f"`{r.flag}`" if r.kind is Kind.FIELD else f"`{r.name}`"


def legacy_reference() -> str:
    """Markdown: every row of :mod:`shardcompat.transformers.legacy_table`, grouped by where scripts used it."""
    out = [
        "# Transformers 4.x names and how they are served",
        "",
        "Generated from `shardcompat.transformers.legacy_table` (the one table that `shardcompat run` "
        "serves and the docs show); do not edit by hand. *Removed* is the first release whose "
        "source lacks the name, *deprecated* the first that warned (`<=4.30`: 4.30.2 already did; "
        "`5.x`: after 5.0). Each name is served only where the installed release lacks it, and "
        "warns once with a `FutureWarning` naming the replacement.",
        "",
        "How a row is served:",
        "",
        *(f"- **{served}**: {how}" for served, how in _HOW.items()),
    ]
    for kind in Kind:
        rows = [r for r in ROWS if r.kind is kind]
        if not rows:
            continue
        out += ["", f"## {kind.value[0].upper()}{kind.value[1:]}s", "",
                "| name | deprecated | removed | served | replacement | why, and what refuses |",
                "|---|---|---|---|---|---|"]
        for r in rows:
            refused = (" Refused: " + ", ".join("any value" if repr(v) == "NOT_GIVEN" else f"`{v!r}`"
                                                 for v in r.refuse) + ".") if r.refuse else ""
            out.append(
                f"| {_spelling(r)} | {r.deprecated or '—'} | {r.removed} | {r.served} | "
                f"{_replacement(r)} | {_cell(r.reason)}.{_cell(refused)} |"
            )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(legacy_reference(), end="")
