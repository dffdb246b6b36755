"""Which removed Transformers 4.x names a tree of scripts uses, and how each is served.

    python -m shardcompat.transformers.legacy_usage PATH... [--wheel transformers-4.30.2-...whl] [--json]

Ranks the legacy table by real use: point it at the example scripts of a 4.x release (or your
own code) and it lists every name they use that the installed release lacks, by how many files
use it, with the table's row for it: *served*, *refused* (the replacement is named), or
*unlisted* (a name the table misses: a gap to fix).  The files are read with :mod:`ast`, never
imported; what counts as a use is what ``shardcompat run`` serves: ``from transformers... import
NAME``, ``transformers.NAME``, ``TrainingArguments(FIELD=...)`` and a read of ``args.FIELD`` on an
arguments object; and of ``datasets``, which every 4.x example script calls: ``from datasets import
NAME``, ``datasets.NAME``, and a keyword of the table's (``use_auth_token=``) in a call of its
loaders (``load_dataset``), compared against the installed ``datasets``.  ``--wheel`` (the old
release's wheel) names where 4.x defined each top-level name, which some family rows (removed
models, classes that needed TensorFlow) are matched by; without it only the families a pattern
alone decides match (:func:`.legacy_table.precise_family`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import fnmatch
import importlib
import inspect
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .legacy_survey import (
    Name,
    Wheel,
    _installed_has,
    installed_surface,
    module_names,
    old_surface,
    served_at_origin,
)

__all__ = ["Use", "main", "names_used", "usage"]

_SKIP_DIRS = {".git", "__pycache__", ".venv", "node_modules", ".tox", ".nox"}
_LIBRARIES = ("transformers", "datasets")


@dataclasses.dataclass
class Use:
    """One removed name, the files that use it, and the table's row for it (None: unlisted)."""

    name: Name
    files: list[str]
    row: Any

    @property
    def served(self) -> str:
        return "unlisted" if self.row is None else str(self.row.served)


def _python_files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_file():
            yield path
            continue
        for found in sorted(path.rglob("*.py")):
            if not _SKIP_DIRS & set(found.relative_to(path).parts):
                yield found


def names_used(code: str) -> set[Name]:
    """The Transformers and ``datasets`` names ``code`` uses where ``shardcompat run`` serves them."""
    tree = ast.parse(code)
    modules = _imported_libraries(tree)
    found: set[Name] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and (node.module in _LIBRARIES or node.module.startswith("transformers.")):
            found |= {Name(node.module, a.name) for a in node.names if a.name != "*"}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            found.add(Name(node.value.id, node.attr))
        elif isinstance(node, ast.Attribute) and "args" in ast.unparse(node.value).rsplit(".", 1)[-1]:
            found.add(Name("TrainingArguments", f"__init__({node.attr})", "keyword"))
        elif isinstance(node, ast.Call):
            func = node.func
            callee = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if callee.endswith("TrainingArguments"):
                found |= {Name("TrainingArguments", f"__init__({k.arg})", "keyword") for k in node.keywords if k.arg}
    return found | _loader_keywords(tree, modules)


def _imported_libraries(tree: ast.AST) -> set[str]:
    """The libraries whose name the file binds to the library alone (``import datasets``), never to
    anything else: 4.x scripts call their loaded data ``datasets``, and ``datasets.map`` is no API."""
    imported: set[str] = set()
    other: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                (imported if a.asname is None else other).add(top if a.asname is None else a.asname)
        elif isinstance(node, ast.ImportFrom):
            other |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            other.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            other.add(node.name)
        elif isinstance(node, ast.arg):
            other.add(node.arg)
    return {name for name in _LIBRARIES if name in imported and name not in other}


def _loader_keywords(tree: ast.AST, modules: set[str]) -> set[Name]:
    """The table's ``datasets`` keywords in calls of its loaders (:func:`.legacy_table.loader_callees`);
    ``datasets.load_dataset`` only where the file binds ``datasets`` to the library alone."""
    from .legacy_table import Kind, by_kind, loader_callees

    keywords = {r.name for r in by_kind(Kind.DATASETS)}
    callees = {c: f for c, f in loader_callees(tree).items() if not c.startswith("datasets.") or "datasets" in modules}
    found: set[Name] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            loader = callees.get(ast.unparse(node.func))
            if loader:
                found |= {Name("datasets", f"{loader}({k.arg})", "keyword") for k in node.keywords if k.arg in keywords}
    return found


def _family(name: Name) -> Any:
    """Without the wheel: the first family row whose pattern alone names only removed names, else
    for a top-level name the first whose pattern matches (where 4.x defined the name, which
    narrows those families, unchecked)."""
    from .legacy_table import SURFACE, precise_family

    families = [r for r in SURFACE if r.family and fnmatch.fnmatchcase(name.spelling, r.pattern)]
    loose = [r for r in families if name.where == "transformers"]  # the top level's model families
    return next((r for r in families if precise_family(r)), loose[0] if loose else None)


def usage(paths: Iterable[Path], wheel: Wheel | None = None) -> list[Use]:
    """Every name the files use that the installed release lacks, most used first."""
    from .legacy_table import Served, lookup

    installed = installed_surface()
    origins = {(n.where, n.name): n for n in old_surface(wheel)} if wheel is not None else {}
    files: dict[Name, list[str]] = {}
    for path in _python_files(paths):
        try:
            used = names_used(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError, RecursionError):
            continue  # not Python this interpreter reads: the migration reports such files
        for name in used:
            files.setdefault(origins.get((name.where, name.name), name), []).append(str(path))
    out = []
    for name, where in files.items():
        if name.what == "keyword" and name.where == "TrainingArguments" and not _declared_field(name, installed):
            continue  # an attribute of the script's own arguments, not a TrainingArguments field
        if _has(installed, name):
            continue
        row = lookup(name)
        if row is None or row.served is Served.REFUSED:
            row = served_at_origin(name, installed) or row  # what a removed module re-exported
        out.append(Use(name, sorted(where), row if row is not None or wheel is not None else _family(name)))
    return sorted(out, key=lambda u: (-len(u.files), u.name.spelling))


def _has(installed: dict[str, Any], name: Name) -> bool:
    """Whether the installed release has ``name``: from the survey's cache for its modules and
    classes, by importing the module for any other (``transformers.utils.versions``)."""
    if name.where == "datasets":
        return _datasets_has(name)
    if _installed_has(installed, name):
        return True
    if not name.where.startswith("transformers"):
        return False
    try:
        module = importlib.import_module(name.where)
    except ModuleNotFoundError as error:  # gone, or there but needing a package not installed here
        return not (error.name or "").startswith("transformers")
    except Exception:  # a module that fails to import here is not one a script can use
        return False
    return hasattr(module, name.name) or _defines(module, name.name)


def _defines(module: Any, name: str) -> bool:
    """Whether the module's source binds ``name`` at its top level, under a condition this machine
    does not meet (``image_utils.PILImageResampling`` needs Pillow, in 4.30 as today): the
    survey's own reading of a module (:func:`.legacy_survey.module_names`)."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return False
    return name in module_names(tree, module.__name__.removeprefix("transformers").lstrip("."))


def _datasets_has(name: Name) -> bool:
    """Whether the installed ``datasets`` has the name, by the probe ``shardcompat run`` serves it
    by (no ``datasets`` here: nothing to compare against, so nothing counts as removed)."""
    from ._legacy import _mentions

    try:
        datasets = importlib.import_module("datasets")
    except ImportError:
        return True
    if name.what != "keyword":
        return hasattr(datasets, name.name)
    loader, keyword = name.name.rstrip(")").split("(")
    fn = getattr(datasets, loader, None)
    return fn is None or _mentions(sys.modules[fn.__module__], keyword)


def _declared_field(name: Name, installed: dict[str, Any]) -> bool:
    """Whether a read ``args.X`` names a TrainingArguments field of 4.x (a row of the table) or today."""
    from .legacy_table import Kind, row

    field = name.name[len("__init__("):-1]
    try:
        row(field, Kind.FIELD)
        return True
    except KeyError:
        return _installed_has(installed, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shardcompat.transformers.legacy_usage",
        description="The removed Transformers 4.x names a tree of scripts uses, by how many files use each, "
                    "and how the legacy table serves them.")
    parser.add_argument("paths", nargs="+", type=Path, help="files or folders of Python scripts")
    parser.add_argument("--wheel", help="the old release's wheel, for where it defined each top-level name")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        parser.error(f"no such file or folder: {', '.join(missing)}")
    uses = usage(args.paths, Wheel(args.wheel) if args.wheel else None)
    counts = {s: sum(1 for u in uses if u.served == s) for s in ("renamed", "mapped", "no-op", "refused", "unlisted")}
    if args.json:
        print(json.dumps({"counts": counts, "names": [
            {"name": u.name.spelling, "files": len(u.files), "served": u.served,
             "replacement": getattr(u.row, "replacement", "")} for u in uses]}, indent=1))
    else:
        for u in uses:
            print(f"{len(u.files):5}  {u.served:9} {u.name.spelling}  -> {getattr(u.row, 'replacement', '') or '-'}")
        print(", ".join(f"{n} {s}" for s, n in counts.items()) + f" ({len(uses)} removed names used)")
    return 1 if counts["unlisted"] else 0


if __name__ == "__main__":
    sys.exit(main())
