"""``shardcompat-migrate``: move a repository off the legacy boolean ``--sharded_ddp`` (and, on
request, off fairscale imports and the Transformers 4.x names ``shardcompat run`` serves).

    shardcompat-migrate PATH... [--check | --diff | --write] [--to list|fsdp]
                        [--transformers VERSION] [--jobs N] [--exclude GLOB]...
                        [--scope evidence|all] [--fairscale-imports] [--transformers-legacy]
                        [--no-legacy] [--json] [--no-progress]

Default: print a unified diff and a summary, write nothing.  Exit codes: 0 clean (nothing
found, or only what this run wrote), 1 ``--check`` found legacy usage (to change, held for
review, or warned about), 2 a file or folder could not be read, or a file could not be parsed
or written.

Start-up stays light: this module imports neither torch nor libcst; libcst is loaded only for
the Python statements that need a rewrite.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from .formats.kinds import detect_kind
from .run.context import Settings, fsdp_form_for, needles
from .run.report import FileReport, RunReport
from .run.walk import iter_files, why_unreadable

if TYPE_CHECKING:  # the rewriters and the evidence rules load only when a file matches
    from .run.engine import Job
    from .run.scope import Evidence

__all__ = ["build_parser", "main", "pool_size", "run"]

#: Files to parse per worker before a process pool pays for its start-up (each worker imports
#: the rewriters and libcst again, about a second on a busy 2-core machine, while the fast
#: Python path costs ~35 ms a file): below ``2 * _PER_WORKER`` files the run stays in this
#: process.  On a shared 2-core machine even 200 files ran faster in one process (7.7 s against
#: 9.7 s with two workers), so the bar is high.
_PER_WORKER = 64
_PARSED = frozenset({"python", "notebook", "markdown", "rst"})
#: A file of this many characters shows its own progress (about a second to parse).
_LONG = 1 << 20


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shardcompat-migrate",
        description="Rewrite legacy boolean --sharded_ddp usage (Python, shell, Markdown, configs, "
        "notebooks) to the list syntax, or to modern --fsdp.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to migrate")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", dest="mode", action="store_const", const="check",
                      help="write nothing; exit 1 if any legacy usage is found (to change, held for "
                      "review or warned about)")
    mode.add_argument("--diff", dest="mode", action="store_const", const="diff",
                      help="print a unified diff (the default)")
    mode.add_argument("--write", dest="mode", action="store_const", const="write",
                      help="apply the changes (atomic writes keeping owner, group and mode; hard-linked "
                      "files are written in place; read-only files and links out of the tree are "
                      "reported and left alone)")
    parser.set_defaults(mode="diff")
    parser.add_argument("--to", choices=("list", "fsdp"), default="list",
                        help="target: the list syntax (default) or Transformers' FSDP arguments")
    parser.add_argument("--transformers", metavar="VERSION", default=None,
                        help="with --to fsdp, the Transformers release to write for: 4.x gets the "
                        "--fsdp 'full_shard offload' words; default: fsdp=True plus fsdp_config, the "
                        "form current releases take")
    parser.add_argument("--scope", choices=("evidence", "all"), default="evidence",
                        help="edit only where the tree shows Transformers usage (default) or everywhere")
    parser.add_argument("--fairscale-imports", action="store_true",
                        help="also rewrite fairscale imports to shardcompat.fairscale")
    parser.add_argument("--transformers-legacy", action="store_true",
                        help="also rewrite the Transformers 4.x names shardcompat run serves (TrainingArguments "
                        "keywords and flags such as --evaluation_strategy, Trainer(tokenizer=), "
                        "from_pretrained(use_auth_token=), is_torch_tpu_available, send_example_telemetry) to "
                        "today's spelling; what has no exact rewrite is reported (docs/transformers-legacy.md)")
    parser.add_argument("--no-legacy", dest="legacy", action="store_false",
                        help="skip the --sharded_ddp rules (with --fairscale-imports or --transformers-legacy)")
    parser.add_argument("--jobs", "-j", type=int, default=0, metavar="N",
                        help="at most N worker processes (default: CPU count; 1: no pool); a pool "
                        "is used only when there are enough files to parse")
    parser.add_argument("--follow-links", action="store_true",
                        help="with --write, rewrite the file a symbolic link points to even when it is "
                        "not among the files migrated (outside the paths given); the link stays a link")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="skip paths matching GLOB (repeatable)")
    parser.add_argument("--json", action="store_true", help="print a machine-readable report on stdout")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    return parser


class _Progress:
    """A one-line progress counter on stderr, only on a terminal; a long file (at least
    :data:`_LONG` characters, parsed in this process) shows how far its parse is."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done = total, 0
        self.enabled = enabled and total > 0 and sys.stderr.isatty()
        self.width = 0

    def _show(self, line: str) -> None:
        sys.stderr.write("\r" + line.ljust(self.width))
        sys.stderr.flush()
        self.width = len(line)

    def step(self) -> None:
        self.done += 1
        if self.enabled:
            self._show(f"shardcompat-migrate: {self.done}/{self.total} files")

    def within(self, name: str) -> Callable[[int, int], None] | None:
        """The callback that shows the parse of file ``name`` (``None`` when off)."""
        if not self.enabled:
            return None
        shown = [-1]

        def update(done: int, total: int) -> None:
            percent = 100 * done // total
            if total >= _LONG and percent != shown[0]:
                shown[0] = percent
                self._show(f"shardcompat-migrate: {self.done}/{self.total} files, {name} {percent}%")

        return update

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * max(60, self.width) + "\r")


def _scan(paths: Sequence[str], excludes: Sequence[str], wanted: tuple[bytes, ...],
          report: RunReport) -> list[tuple[str, str, str]]:
    """Read every file once for the byte prefilter: ``(root, path, kind)`` of the matches."""
    matched: list[tuple[str, str, str]] = []
    names: dict[tuple[int, int], str] = {}  # (device, inode) -> the first name of a hard-linked file
    single = wanted[0] if len(wanted) == 1 else None

    def unreadable(path: str, reason: str) -> None:
        report.files.append(FileReport(_display(path), "unknown", error=reason))

    for root, path in iter_files(paths, excludes, unreadable):
        report.scanned += 1
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            unreadable(path, why_unreadable(error))
            continue
        if (single in data) if single is not None else any(n in data for n in wanted):
            kind = detect_kind(path, data[:200])
            if kind is None:
                continue
            first = _first_name(path, names)
            if first is not None:
                report.files.append(FileReport(_display(path), kind, skipped=(
                    f"another name (hard link) of {_display(first)}, which is migrated as itself; "
                    "one file, rewritten once")))
                continue
            matched.append((root, path, kind))
    return matched


def _first_name(path: str, names: dict[tuple[int, int], str]) -> str | None:
    """The name a hard-linked ``path`` was first met by in this run (``None`` for a first
    name, a file with one name or a symbolic link); remembers ``path`` in ``names``."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if info.st_nlink < 2 or not stat.S_ISREG(info.st_mode):
        return None
    key = (info.st_dev, info.st_ino)
    if key in names:
        return names[key]
    names[key] = path
    return None


def _evidence(roots: set[str]) -> dict[str, Evidence]:
    """Scope evidence, gathered only when something matched: every file of each root."""
    from .run.scope import Evidence

    found: dict[str, Evidence] = {}
    for root in roots:
        evidence = found[root] = Evidence()
        for _, path in iter_files([root]):
            try:
                with open(path, "rb") as handle:
                    evidence.observe(path, handle.read())
            except OSError:
                continue
    return found


def _display(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _jobs(matched: list[tuple[str, str, str]], evidence: dict[str, Evidence], args: argparse.Namespace) -> list[Job]:
    from .run.engine import Job
    from .run.scope import decide, is_output

    jobs = []
    form = fsdp_form_for(args.transformers)
    for root, path, kind in matched:
        if is_output(os.path.relpath(path, root)):
            continue
        found = evidence[root]
        settings = Settings(to=args.to, fsdp_form=form,
                            local_scripts=frozenset() if args.scope == "all" else found.local_scripts,
                            fairscale_imports=args.fairscale_imports, legacy=args.legacy,
                            transformers_legacy=args.transformers_legacy)
        # the evidence rules are about --sharded_ddp; fairscale imports and Transformers' own
        # names are their own evidence
        edit_all = args.scope == "all" or not args.legacy
        scope, reason = ("edit", "") if edit_all else decide(path, kind, _read(path), found)
        jobs.append(Job(path, _display(path), kind, settings, scope, reason))
    return jobs


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def pool_size(jobs: Sequence[Job], limit: int) -> int:
    """Worker processes for ``jobs``: by the number of files to parse (Python, notebooks,
    docs), at most ``limit``; 1 (this process) unless each worker gets ``_PER_WORKER`` of them."""
    parsed = sum(job.kind in _PARSED for job in jobs)
    return max(1, min(limit, parsed // _PER_WORKER))


def _run_jobs(jobs: list[Job], workers: int, progress: _Progress) -> Iterator[FileReport]:
    from .run.engine import process_file

    if workers <= 1:
        for job in jobs:
            yield process_file(job, progress.within(job.display))
            progress.step()
        return
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        for result in pool.map(process_file, jobs, chunksize=max(1, len(jobs) // (workers * 4))):
            yield result
            progress.step()


def run(args: argparse.Namespace) -> RunReport:
    """Scan, rewrite, and (with ``--write``) apply; returns the report."""
    report = RunReport(mode=args.mode)
    probe = Settings(fairscale_imports=args.fairscale_imports, legacy=args.legacy,
                     transformers_legacy=args.transformers_legacy)
    matched = _scan(args.paths, args.exclude, needles(probe), report)
    if not matched:
        return report
    jobs = _jobs(matched, _evidence({root for root, _, _ in matched}), args)
    workers = pool_size(jobs, args.jobs or os.cpu_count() or 1)
    progress = _Progress(len(jobs), not args.no_progress and not args.json)
    for result in _run_jobs(jobs, workers, progress):
        if result.edits or result.review or result.warnings or result.error:
            report.files.append(result)
    progress.close()
    if args.mode == "write":
        _apply(report, {job.display: job.path for job in jobs}, args.follow_links)
    return report


def _apply(report: RunReport, paths: dict[str, str], follow_links: bool) -> None:
    """Write every changed file that may be written (see :mod:`codemods.run.write`)."""
    from .run.write import atomic_write, where_to_write

    changed = report.changed
    migrated = {os.path.realpath(paths[r.path]) for r in changed if not os.path.islink(paths[r.path])}
    for result in changed:
        assert result.new_data is not None
        try:
            target, why = where_to_write(paths[result.path], migrated, follow_links)
            if target is None:
                if why:
                    result.error = why
                else:
                    result.skipped = "a symbolic link to a file migrated as itself: the link is left as it is"
                continue
            result.written = atomic_write(target, result.new_data) or "atomic"
        except OSError as error:
            result.error = f"cannot write: {error.strerror or error}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.legacy and not args.fairscale_imports and not args.transformers_legacy:
        build_parser().error("--no-legacy needs --fairscale-imports or --transformers-legacy")
    if args.transformers is not None:
        if args.to != "fsdp":
            build_parser().error("--transformers goes with --to fsdp (it picks the form of --fsdp to write)")
        try:
            fsdp_form_for(args.transformers)
        except ValueError as error:
            build_parser().error(str(error))
    for path in args.paths:
        try:
            os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            build_parser().error(f"no such file or folder: {path}")
        except OSError:
            pass  # it exists but cannot be looked up: the run reports it ("permission denied"), exit 2
    report = run(args)
    out = sys.stdout
    if args.json:
        out.write(report.to_json() + "\n")
    else:
        if args.mode == "diff":
            for result in sorted(report.changed, key=lambda r: r.path):
                out.write(result.diff)
        print(report.summary(), file=sys.stderr)
    out.flush()
    return report.exit_code()


if __name__ == "__main__":
    sys.exit(main())
