"""Print the table of CI's wall times from the lines ``.ci/run`` and ``noxfile.py`` recorded.

Each line of the file is ``SESSION<TAB>PHASE<TAB>SECONDS``: ``total`` is the session's wall time
as ``.ci/run`` measured it around ``nox -s SESSION`` (venv, installs and tests), ``tests`` each
test command inside it; the rest of a session's total is setup (the venv and its installs).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path


def table(lines: list[str]) -> str:
    totals: dict[str, float] = {}
    tests: dict[str, float] = defaultdict(float)
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3:
            continue
        session, phase, seconds = parts
        if phase == "total":
            totals[session] = float(seconds)
        else:
            tests[session] += float(seconds)
    rows = ["| session | setup s | tests s | total s |", "|---|---:|---:|---:|"]
    for session, total in totals.items():
        ran = tests.get(session)
        setup = "" if ran is None else f"{max(total - ran, 0):.0f}"
        rows.append(f"| {session} | {setup} | {'' if ran is None else f'{ran:.0f}'} | {total:.0f} |")
    whole = sum(totals.values())
    ran_all = sum(tests.get(s, 0.0) for s in totals)
    setup_all = sum(max(t - tests[s], 0.0) for s, t in totals.items() if s in tests)
    rows.append(f"| **all** | {setup_all:.0f} | {ran_all:.0f} | {whole:.0f} ({whole / 60:.1f} min) |")
    return "\n".join(rows)


if __name__ == "__main__":
    path = Path(sys.argv[1])
    print(table(path.read_text().splitlines() if path.is_file() else []))
