"""The option reference, generated from the vocabulary tables (the docs include it)."""

from __future__ import annotations

from .options import RULES, TOKENS, TUNABLES, ShardingOptionsError, parse_options

__all__ = ["options_reference"]


def _error_for(example: str) -> str:
    try:
        parse_options(example)
    except ShardingOptionsError as error:
        return str(error)
    raise AssertionError(f"rule example {example!r} parses; the table is wrong")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def options_reference() -> str:
    """Markdown: every token, alias, tunable and combination rule with its exact error."""
    out = [
        "# Option reference",
        "",
        "Generated from `shardcompat.options` (the tables `TOKENS`, `TUNABLES` and `RULES`); "
        "do not edit by hand: `python -m shardcompat.reference > docs/options.md` (or a docs "
        "build) regenerates it, and a test fails while it is stale. Words are separated by spaces, `,` or `;`, case does not "
        "matter and `-` may stand for `_`. `str(parse_options(x))` is the canonical form.",
        "",
        "## Words",
        "",
        "| word | canonical form | where it comes from | meaning |",
        "|---|---|---|---|",
    ]
    for token in TOKENS.values():
        out.append(f"| `{token.name}` | `{token.canonical}` | {token.origin} | {_cell(token.help)} |")
    out += [
        "",
        "The legacy boolean (`True`, `False`, and the strings `true/false/1/0/yes/no` in any case) "
        "is accepted alone: a true value means `simple` and emits a `FutureWarning` naming the "
        "new spelling (`--sharded_ddp simple`); a false value, `\"\"` and `None` mean off.",
        "",
        "### Empty and repeated options",
        "",
        "- `\"\"` means off (plain DDP), silently, as `None` does: it is Transformers' own default "
        "for `sharded_ddp` and what `shardcompat-migrate` writes for `False`, so a warning would "
        "fire on every default. Text that holds only separators (`\" , \"`) also means off, with "
        "a `ShardingOptionsWarning` that says so.",
        "- A word that repeats what an earlier one said (`zero_dp_2 zero_dp_2`, `offload offload`, "
        "`zero_dp_3 full_shard`, the same `key=value` twice) is accepted once, with a "
        "`ShardingOptionsWarning` naming the repeated words and the canonical form they became. "
        "Two different stages, or one setting with two values, are refused (see the rules below).",
        "- Words split by the shell (`--sharded_ddp zero_dp_3 wrap=A, B`) are read as the same "
        "text quoted: every entry point (`parse_options`, `prepare()`, `shardcompat explain`, the "
        "`--sharded_ddp` flag, the Transformers `TrainingArguments`) gives the same answer and the "
        "same warnings; `tests/test_entry_points.py` checks it.",
        "",
        "## Settings (`key=value`)",
        "",
        "| setting | values | FSDP modes only | meaning |",
        "|---|---|---|---|",
    ]
    for tunable in TUNABLES.values():
        only = "yes" if tunable.fsdp_only else ""
        out.append(f"| `{tunable.key}=` | {_cell(tunable.values)} | {only} | {_cell(tunable.help)} |")
    out += [
        "",
        "## Combination rules",
        "",
        "Each rule with an input that breaks it and the exact error you get "
        "(`ShardingOptionsConflict`, a `ValueError`).",
        "",
        "| rule | example | error |",
        "|---|---|---|",
    ]
    for rule in RULES:
        out.append(f"| {_cell(rule.summary)} | `{rule.example}` | {_cell(_error_for(rule.example))} |")
    out += [
        "",
        "An unknown word names the closest valid one, e.g. `zero_dp3`:",
        "",
        "```text",
        _error_for("zero_dp3"),
        "```",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    print(options_reference(), end="")
