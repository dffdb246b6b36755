"""shardcompat-migrate speed, measured side by side in one run.

1. A tree with a few dozen files holding legacy usage: ``shardcompat-migrate --check`` against
   libcst's stock runner (``python -m libcst.tool codemod``) applying the same codemod
   (``python_legacy.MigrateShardedDDP``) to every file.  Target: at least 20x faster.
2. The same tree with no legacy usage at all: ``shardcompat-migrate --check`` against a plain
   Python byte scan of the same files.  Target: within 3x (start-up stays light).

The trees are built in a temporary folder from real-world Python files of the installed
packages; nothing is written into the repository.  Every command runs as a subprocess, so
interpreter start-up is counted on both sides.

    python benchmarks/migrate_speed.py            # >= 5,000 files
    python benchmarks/migrate_speed.py --quick    # 1,000 files, fewer repeats
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LEGACY = (
    '\n_legacy_args = TrainingArguments(output_dir="out", sharded_ddp=True)\n'
    '_legacy_cmd = "python train.py --fp16 --sharded_ddp --do_train"\n'
)
SCAN = """
import os, sys
hits = 0
for dirpath, dirnames, filenames in os.walk(sys.argv[1]):
    for name in filenames:
        with open(os.path.join(dirpath, name), "rb") as handle:
            if b"sharded_ddp" in handle.read():
                hits += 1
print(hits)
"""


def build_tree(target: Path, count: int, legacy: int) -> int:
    """Copy ``count`` .py files (< 200 KB each) from site-packages; inject usage into ``legacy``."""
    site = Path(sysconfig.get_paths()["purelib"])
    copied = 0
    for path in sorted(site.rglob("*.py")):
        if copied >= count:
            break
        try:
            size = path.stat().st_size
            data = path.read_bytes()
        except OSError:
            continue
        if not 200 < size < 200_000 or b"sharded_ddp" in data:
            continue
        rel = path.relative_to(site)
        if rel.parts[0] in ("site-packages", "__pycache__") or any(p.startswith(".") for p in rel.parts):
            continue
        out = target / "src" / rel.parent.as_posix().replace("site-packages", "sp") / rel.name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        copied += 1
    (target / "requirements.txt").write_text("transformers>=4.3\n")
    files = sorted((target / "src").rglob("*.py"))
    step = max(1, len(files) // max(1, legacy))
    for path in files[::step][:legacy]:
        with path.open("a", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(LEGACY)
    return copied


def timed(cmd: list[str], repeats: int, ok: tuple[int, ...]) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode not in ok:
            raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
        best = min(best, elapsed)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 files, one libcst run")
    parser.add_argument("--files", type=int, default=None, help="number of Python files (default 5,000)")
    parser.add_argument("--legacy", type=int, default=40, help="files that get legacy usage injected")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the generated trees")
    args = parser.parse_args()
    count = args.files or (1000 if args.quick else 5000)
    repeats = args.repeats or (2 if args.quick else 3)
    python = sys.executable
    work = Path(tempfile.mkdtemp(prefix="shardcompat-bench-"))
    try:
        dirty, clean = work / "legacy", work / "clean"
        copied = build_tree(dirty, count, args.legacy)
        copied_clean = build_tree(clean, count, 0)
        if copied < 5000 and not args.quick and args.files is None:
            print(f"note: only {copied} files available in site-packages", file=sys.stderr)
        migrate = [python, "-m", "codemods.cli", "--check", "--no-progress", "--jobs", str(args.jobs)]
        ours_dirty = timed([*migrate, str(dirty)], repeats, (1,))
        stock = [python, "-m", "libcst.tool", "codemod", "python_legacy.MigrateShardedDDP", "--no-format",
                 "--hide-progress", "-u", "1", "-j", str(args.jobs), str(dirty / "src")]
        libcst_time = timed(stock, 1, (0, 1))
        ours_clean = timed([*migrate, str(clean)], repeats, (0,))
        scan = timed([python, "-c", SCAN, str(clean)], repeats, (0,))
        print(f"tree: {copied} Python files ({args.legacy} with legacy usage); clean tree: {copied_clean} files; "
              f"jobs={args.jobs}")
        print(f"{'case':<44}{'seconds':>10}")
        print(f"{'shardcompat-migrate --check (legacy tree)':<44}{ours_dirty:>10.2f}")
        print(f"{'libcst.tool codemod, same codemod':<44}{libcst_time:>10.2f}")
        print(f"{'shardcompat-migrate --check (clean tree)':<44}{ours_clean:>10.2f}")
        print(f"{'plain Python byte scan (clean tree)':<44}{scan:>10.2f}")
        speedup = libcst_time / ours_dirty
        overhead = ours_clean / scan
        print(f"speed-up over libcst's runner: {speedup:.1f}x (target >= 20x) "
              f"{'OK' if speedup >= 20 else 'MISSED'}")
        print(f"clean tree vs byte scan: {overhead:.2f}x (target <= 3x) {'OK' if overhead <= 3 else 'MISSED'}")
        return 0
    finally:
        if args.keep:
            print(f"trees kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
