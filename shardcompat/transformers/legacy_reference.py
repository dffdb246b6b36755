"""The docs page of the legacy-names table, ``docs/transformers-legacy.md``: committed so a clone shows it,
generated so it cannot drift (a test compares them)."""

from __future__ import annotations

from ._overrides import PROTOCOL, signature_text
from .legacy_table import COVERAGE, REEXPORTS, ROWS, SURFACE, Kind, LegacyName, Removed, Served

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
    code = (text.startswith(("--", "TENSORBOARD")) or text.endswith(("=", ")")) or text in ("True", "False")
            or text.replace(".", "").replace("_", "").isalnum())  # a dotted name
    return _cell(f"`{text}`" if code else text)


def _spelling(r: LegacyName) -> str:
    return f"`{r.flag}`" if r.kind is Kind.FIELD else f"`{r.name}`"


def _coverage() -> list[str]:
    rows = COVERAGE["by_where"]
    totals = [sum(c[i] for c in rows.values()) for i in range(4)]
    out = [
        "## Coverage",
        "",
        f"`python -m shardcompat.transformers.legacy_survey` read the public API of Transformers "
        f"{COVERAGE['old']} from its wheel (the modules and classes below, their names, methods, "
        f"attributes and keywords) and found **{totals[0]}** that Transformers {COVERAGE['installed']} "
        f"lacks: **{totals[1]}** served, **{totals[2]}** refused with the replacement named, "
        f"**{totals[3]}** unlisted (a test over the wheel fails on an unlisted one). Most refused names are "
        "families of one row each: TensorFlow and Flax classes, per-model archive maps, models 5.x removed. "
        "Beyond the survey's modules, `python -m shardcompat.transformers.legacy_usage PATH` lists the removed "
        "names a tree of scripts uses, by how many files use each, with its row here (it exits 1 on an "
        "unlisted one); the rows its scan of the 4.20-4.30 example scripts and of copied 4.27 Trainers "
        "added are in the last part of the table below.",
        "",
        f"The modules 5.x removed are served whole. What one of them imported from a module that still "
        f"exists ({len(REEXPORTS)} names, read from the wheel: `legacy_survey WHEEL --reexports`, e.g. "
        "`from transformers.data.processors.squad import PreTrainedTokenizerBase`) resolves where 4.30 imported "
        "it from, with a FutureWarning naming that import; only where that module no longer has it either "
        "does the removed module's own row answer.",
        "",
        "| module or class | removed | served | refused | unlisted |",
        "|---|---|---|---|---|",
        *(f"| `{where}` | {c[0]} | {c[1]} | {c[2]} | {c[3]} |" for where, c in rows.items()),
        f"| **total** | {totals[0]} | {totals[1]} | {totals[2]} | {totals[3]} |",
    ]
    return out


def _protocol() -> list[str]:
    out = [
        "",
        "## Trainer hooks",
        "",
        "Every overridable `Trainer`/`Seq2SeqTrainer` method whose parameters differ between 4.30.2 and "
        "today's release, and the hooks checked unchanged. Under `shardcompat run` a 4.x override is "
        "called in the form it declares and its `super()` call in the 4.x form is completed; "
        "`shardcompat-migrate --transformers-legacy` writes today's form.",
        "",
        "| hook | 4.x | today | served | how |",
        "|---|---|---|---|---|",
    ]
    for c in PROTOCOL:
        old = f"`{_cell(signature_text(c.parameters('legacy')))}`" if c.legacy is not None else "—"
        new = f"`{_cell(signature_text(c.parameters('today')))}`" if c.today is not None else "—"
        out.append(f"| `{c.owner}.{c.method}` | {old} | {new} | {c.served} | {_cell(c.how)} |")
    return out


def _surface_row(r: Removed) -> str:
    where = [f"defined in `{r.origin}`"] if r.origin else []
    where += [f"needs `{r.backend}`"] if r.backend else []
    where += ["a model 5.x removed"] if r.gone_model else []
    narrowed = f" ({', '.join(where)})" if where else ""
    return (f"| `{_cell(r.pattern)}`{narrowed} | {r.removed} | {r.served} | {r.home} | "
            f"{_cell(r.replacement) or '—'} | {_cell(r.reason)}. |")


def _surface() -> list[str]:
    return [
        "",
        "## Every other removed name",
        "",
        "The rest of the 4.30.2 surface the survey found: one row a name, or with `*` a family (the first "
        "row that matches covers a name). *Home* is what serves it: its 4.x import path put back "
        "(resolving to today's object), a member added to today's class, the Trainer or arguments drop-in, "
        "or nothing (refused). The migration moves an import whose row names a home in Transformers, "
        "torch or the hub, and reports the others.",
        "",
        "| name | removed | served | home | replacement | why |",
        "|---|---|---|---|---|---|",
        *(_surface_row(r) for r in SURFACE),
    ]


def legacy_reference() -> str:
    """Markdown: the survey's coverage, every row of :mod:`shardcompat.transformers.legacy_table`
    grouped by where scripts used it, the rest of the 4.30 surface, and the Trainer hook protocol."""
    out = [
        "# Transformers 4.x names and how they are served",
        "",
        *_coverage(),
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
    out += _surface() + _protocol()
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(legacy_reference(), end="")
