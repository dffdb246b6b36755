"""shardcompat-migrate speed, measured side by side in one run.

1. A tree with a few dozen files holding legacy usage: ``shardcompat-migrate --check`` against
   libcst's stock runner (``python -m libcst.tool codemod``) applying the same codemod
   (``sharded_ddp.commands.MigrateShardedDDP``) to every file.  Target: at least 20x faster.
2. The same tree with no legacy usage at all: ``shardcompat-migrate --check`` against a plain
   Python byte scan of the same files.  Target: within 3x (start-up stays light).
3. The Python path: ``shardcompat-migrate --check -j 1`` over a few large Python files against
   importing libcst and ``libcst.parse_module`` of the same files, once on files that need
   edits and once on files that only mention the flag.  Target: within 2x of that parse.

The corpus of 3 is the files given with ``--corpus`` (for example Transformers 4.3.3's
``src/transformers/trainer.py`` and a fine-tuning script from a checkout of that release);
without it, the installed Python files nearest 84 KB and 10 KB in size.  Each is copied twice:
with a block that only mentions the flag (comments, a docstring, attribute reads) unless it
mentions it already, and with legacy usages that need edits as well.

The trees are built in a temporary folder; nothing is written into the repository.  Every
command runs as a subprocess, so interpreter start-up and imports are counted on both sides.

    python benchmarks/migrate_speed.py                    # >= 5,000 files
    python benchmarks/migrate_speed.py --quick            # 1,000 files, fewer repeats
    python benchmarks/migrate_speed.py --only python --corpus ~/transformers/src/transformers/trainer.py
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
MENTION = '''


# --sharded_ddp: the legacy flag, only mentioned here
def _mentions_sharded_ddp(args, logger):
    """Whether --sharded_ddp was given (a docstring: never edited)."""
    if args.sharded_ddp:
        logger.info("running with --sharded_ddp %s", args.sharded_ddp)
    return bool(args.sharded_ddp)
'''
NEEDS_EDITS = '''

def _legacy_usage(parser):
    parser.add_argument("--sharded_ddp", action="store_true", help="shard with fairscale")
    args = TrainingArguments(output_dir="out", sharded_ddp=True, seed=1)
    cmd = "python train.py --fp16 --sharded_ddp --do_train"
    return args, cmd, {"sharded_ddp": False}
'''
PARSE = """
import sys
import libcst
for path in sys.argv[1:]:
    with open(path, "rb") as handle:
        libcst.parse_module(handle.read())
"""
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


def nearest_files(sizes: tuple[int, ...]) -> list[Path]:
    """Installed Python files nearest each size (real code to stand in for a user's files)."""
    site = Path(sysconfig.get_paths()["purelib"])
    found = [(p.stat().st_size, p) for p in sorted(site.rglob("*.py"))
             if "sharded_ddp" not in p.name and "__pycache__" not in p.parts]
    return [min(found, key=lambda item: (abs(item[0] - size), str(item[1])))[1] for size in sizes]


def build_python_corpus(target: Path, sources: list[Path]) -> tuple[list[Path], list[Path]]:
    """Two copies of each source: only mentioning the flag, and needing edits too."""
    mentions, edits = target / "mentions", target / "edits"
    for folder in (mentions, edits):
        folder.mkdir(parents=True)
        (folder / "requirements.txt").write_text("transformers>=4.3\n")
    out: tuple[list[Path], list[Path]] = ([], [])
    for index, source in enumerate(sources):
        text = source.read_text(encoding="utf-8", errors="surrogateescape")
        if "sharded_ddp" not in text:
            text += MENTION
        name = f"{index}_{source.name}"
        (mentions / name).write_text(text, encoding="utf-8", errors="surrogateescape")
        (edits / name).write_text(text + NEEDS_EDITS, encoding="utf-8", errors="surrogateescape")
        out[0].append(mentions / name)
        out[1].append(edits / name)
    return out


def python_path(python: str, files: list[Path], repeats: int, ok: tuple[int, ...]) -> tuple[float, float]:
    """``(shardcompat-migrate --check -j 1, import libcst + parse_module)`` on ``files``."""
    names = [str(f) for f in files]
    ours = timed([python, "-m", "codemods.cli", "--check", "-j", "1", "--no-progress", *names], repeats, ok)
    floor = timed([python, "-c", PARSE, *names], repeats, (0,))
    return ours, floor


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
    parser.add_argument("--corpus", nargs="+", type=Path, default=None, metavar="FILE",
                        help="Python files for the Python-path comparison (default: installed files "
                        "nearest 84 KB and 10 KB)")
    parser.add_argument("--only", choices=("python", "trees"), default=None,
                        help="run only the Python-path comparison or only the tree comparisons")
    args = parser.parse_args()
    count = args.files or (1000 if args.quick else 5000)
    repeats = args.repeats or (2 if args.quick else 3)
    python = sys.executable
    work = Path(tempfile.mkdtemp(prefix="shardcompat-bench-"))
    try:
        if args.only != "trees":
            python_rows = python_comparison(python, work, args.corpus, max(repeats, 3))
        if args.only == "python":
            print_python(python_rows)
            return 0
        dirty, clean = work / "legacy", work / "clean"
        copied = build_tree(dirty, count, args.legacy)
        copied_clean = build_tree(clean, count, 0)
        if copied < 5000 and not args.quick and args.files is None:
            print(f"note: only {copied} files available in site-packages", file=sys.stderr)
        migrate = [python, "-m", "codemods.cli", "--check", "--no-progress", "--jobs", str(args.jobs)]
        ours_dirty = timed([*migrate, str(dirty)], repeats, (1,))
        stock = [python, "-m", "libcst.tool", "codemod", "sharded_ddp.commands.MigrateShardedDDP", "--no-format",
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
        if args.only is None:
            print_python(python_rows)
        return 0
    finally:
        if args.keep:
            print(f"trees kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


PythonRows = tuple[list[Path], list[tuple[str, float, float]]]


def python_comparison(python: str, work: Path, corpus: list[Path] | None, repeats: int) -> PythonRows:
    sources = corpus or nearest_files((84_000, 10_000))
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        raise SystemExit(f"--corpus: no such file: {', '.join(missing)}")
    mentions, edits = build_python_corpus(work / "python", sources)
    rows = []
    for label, files, ok in (("need edits", edits, (1,)), ("only mention the flag", mentions, (0, 1))):
        ours, floor = python_path(python, files, repeats, ok)
        rows.append((label, ours, floor))
    return sources, rows


def print_python(result: PythonRows) -> None:
    sources, rows = result
    sizes = ", ".join(f"{p.name} ({p.stat().st_size // 1000} KB)" for p in sources)
    print(f"Python path on {sizes}:")
    for label, ours, floor in rows:
        ratio = ours / floor
        print(f"  files that {label:<22} --check -j 1 {ours:6.2f} s, import libcst + parse_module {floor:6.2f} s: "
              f"{ratio:.2f}x (target <= 2x) {'OK' if ratio <= 2 else 'MISSED'}")


if __name__ == "__main__":
    sys.exit(main())
