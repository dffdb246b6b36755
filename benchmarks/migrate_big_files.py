"""shardcompat-migrate on long Python files: time and peak memory against file size.

For each size, a generated module (small functions, like generated or vendored code) with one
legacy ``sharded_ddp=True`` at the end: ``shardcompat-migrate --check -j 1`` on it, beside a
plain ``ast.parse`` of the same file (what reading it as one tree costs; the migration used to
pay that twice).  Each command runs as a subprocess; peak RSS is that process's own
(``os.wait4``).  Linear and bounded means: seconds per MB stay flat as the size grows, and the
migration's RSS stays a small multiple of the file, far below the tree's.

    python benchmarks/migrate_big_files.py                 # 1, 4, 16 MB
    python benchmarks/migrate_big_files.py --sizes 1 2 --edits 1000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FUNCTION = "def f{i}(x):\n    return x + {i}\n\n"
LEGACY = "args{i} = TrainingArguments(output_dir='o', sharded_ddp=True)\n"


def make(path: Path, size: int, edits: int) -> None:
    """A module of ``size`` bytes with ``edits`` legacy usages spread evenly."""
    parts, total, i = ["from transformers import TrainingArguments\n"], 0, 0
    every = max(1, size // (len(FUNCTION) + 8) // max(edits, 1))
    placed = 0
    while total < size:
        chunk = FUNCTION.format(i=i)
        if placed < edits and i % every == every - 1:
            chunk += LEGACY.format(i=i)
            placed += 1
        parts.append(chunk)
        total += len(chunk)
        i += 1
    if placed < edits:
        parts.append(LEGACY.format(i=i))
    path.write_text("".join(parts))


def measure(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one subprocess."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {code}")
    return elapsed, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 4, 16], help="file sizes in MB")
    parser.add_argument("--edits", type=int, default=1, help="legacy usages per file")
    args = parser.parse_args()
    py = sys.executable
    print(f"{'size':>7} {'edits':>6} | {'migrate s':>9} {'s/MB':>5} {'RSS MB':>7} | "
          f"{'ast.parse s':>11} {'s/MB':>5} {'RSS MB':>7} | {'time ratio':>10} {'RSS ratio':>9}")
    with tempfile.TemporaryDirectory() as folder:
        for mb in args.sizes:
            path = Path(folder) / f"big_{mb:g}.py"
            make(path, int(mb * (1 << 20)), args.edits)
            real = path.stat().st_size / (1 << 20)
            mig_s, mig_rss = measure([py, "-m", "codemods.cli", "--check", "-j", "1", "--no-progress", str(path)])
            ast_s, ast_rss = measure([py, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())", str(path)])
            print(f"{real:6.1f}M {args.edits:>6} | {mig_s:9.2f} {mig_s / real:5.2f} {mig_rss:7.0f} | "
                  f"{ast_s:11.2f} {ast_s / real:5.2f} {ast_rss:7.0f} | {mig_s / ast_s:10.2f} {mig_rss / ast_rss:9.2f}")


if __name__ == "__main__":
    main()
