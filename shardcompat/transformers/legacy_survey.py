"""List the public API of an old Transformers release that the installed one lacks.

    python -m shardcompat.transformers.legacy_survey transformers-4.30.2-py3-none-any.whl
    python -m shardcompat.transformers.legacy_survey WHEEL --unlisted   # only what the table lacks
    python -m shardcompat.transformers.legacy_survey WHEEL --json

The old release is read from its wheel with :mod:`ast`, never imported (it would not import next
to today's torch, and importing runs its code): the public names of ``transformers`` (its
``_import_structure``), of the modules in :data:`MODULES`, and the public methods, keywords
and attributes of the classes in :data:`CLASSES`.  The installed release is imported once and
its surface cached per version (``$XDG_CACHE_HOME/shardcompat``), so a second survey takes a
second.  Each removed name is then looked up in :mod:`.legacy_table` (:func:`coverage`): what no
row covers is *unlisted*, and the test over the 4.30.2 wheel fails on it.

Get a wheel with ``pip download transformers==4.30.2 --no-deps -d DIR``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import importlib
import inspect
import json
import os
import sys
import textwrap
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .legacy_table import SURVEYED_MODULES

__all__ = ["CLASSES", "MODULES", "Name", "coverage", "installed_surface", "lm_head_models", "old_surface", "reexports",
           "removed", "served_at_origin"]

#: The modules whose public names are compared (``""`` is ``transformers`` itself).
MODULES = tuple(m.removeprefix("transformers").lstrip(".") for m in SURVEYED_MODULES)
#: The classes whose public methods, keywords and attributes are compared, by 4.30's module.
CLASSES = {
    "Trainer": "trainer",
    "Seq2SeqTrainer": "trainer_seq2seq",
    "TrainingArguments": "training_args",
    "PreTrainedTokenizerBase": "tokenization_utils_base",
    "PreTrainedModel": "modeling_utils",
}
#: The methods whose keywords are compared: the constructor and the calls scripts make.
_KEYWORD_METHODS = ("__init__", "__call__")


@dataclasses.dataclass(frozen=True, order=True)
class Name:
    """One public name: ``where`` is a module (``transformers.utils``) or a class (``Trainer``);
    ``what`` is ``name``, ``method``, ``attribute`` or ``keyword`` (``name`` is then
    ``method(keyword)``); ``origin`` is where 4.30 defined a top-level name (``models.bert``) and
    ``backend`` the optional dependency it needed (``tf``, ``flax``, ...; empty: none)."""

    where: str
    name: str
    what: str = "name"
    origin: str = ""
    backend: str = ""

    @property
    def spelling(self) -> str:
        if self.what == "keyword":
            method, keyword = self.name.rstrip(")").split("(")
            return f"{self.where}.{method}({keyword}=)"
        return f"{self.where}.{self.name}"


# ---------------------------------------------------------------------- reading source with ast
def _public(name: str) -> bool:
    return not name.startswith("_")


def _guards(test: ast.AST) -> set[str]:
    """The backends an ``is_X_available()`` guard names (``tf``, ``flax``, ``torch``...)."""
    return {n.id[3:-len("_available")] for n in ast.walk(test)
            if isinstance(n, ast.Name) and n.id.startswith("is_") and n.id.endswith("_available")}


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _key(node: ast.AST) -> str | None:
    """``"models.bert"`` of ``_import_structure["models.bert"]``."""
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id == "_import_structure" and isinstance(node.slice, ast.Constant)):
        return str(node.slice.value)
    return None


def import_structure(tree: ast.Module) -> Iterator[tuple[str, str, str]]:
    """``(name, module, backend)`` for every name a lazy ``__init__`` lists in ``_import_structure``,
    with the backend of the ``try: if not is_X_available()`` block around it."""

    def walk(body: list[ast.stmt], backend: str) -> Iterator[tuple[str, str, str]]:
        for stmt in body:
            if isinstance(stmt, ast.Try):
                guard = "+".join(sorted(set().union(*(_guards(s) for s in stmt.body)))) or backend
                yield from walk(stmt.orelse, guard)
                continue
            if isinstance(stmt, ast.If):
                if not (isinstance(stmt.test, ast.Name) and stmt.test.id == "TYPE_CHECKING"):
                    yield from walk(stmt.body, backend)
                    yield from walk(stmt.orelse, backend)
                continue
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) \
                    and stmt.targets[0].id == "_import_structure" and isinstance(stmt.value, ast.Dict):
                for k, v in zip(stmt.value.keys, stmt.value.values):
                    if isinstance(k, ast.Constant):
                        yield from ((n, str(k.value), backend) for n in _strings(v))
            elif isinstance(stmt, ast.Assign) and (key := _key(stmt.targets[0])) is not None:
                yield from ((n, key, backend) for n in _strings(stmt.value))
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                    and isinstance(stmt.value.func, ast.Attribute) \
                    and (key := _key(stmt.value.func.value)) is not None and stmt.value.args:
                arg = stmt.value.args[0]
                if stmt.value.func.attr == "extend":
                    yield from ((n, key, backend) for n in _strings(arg))
                elif stmt.value.func.attr == "append" and isinstance(arg, ast.Constant):
                    yield (str(arg.value), key, backend)

    yield from walk(tree.body, "")


def module_names(tree: ast.Module, module: str = "", package: str = "transformers",
                 init: bool = False) -> dict[str, str]:
    """The public names a module binds at its top level (in ``if``/``try`` blocks too), each with
    where it comes from: ``""`` for what the module defines, the module (below ``transformers``)
    for what it imports from Transformers itself (a relative or ``transformers.`` import;
    ``from typing import Dict`` is no API of the module)."""
    names: dict[str, str] = {}

    def walk(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[stmt.name] = ""
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    names.update((n.id, "") for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(stmt, ast.ImportFrom):
                if stmt.level or (stmt.module or "").split(".")[0] == package:
                    origin = _absolute(module, stmt, "__init__.py" if init else "")
                    names.update(((a.asname or a.name), origin) for a in stmt.names if a.name != "*")
            elif isinstance(stmt, ast.If):
                walk(stmt.body)
                walk(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                walk(stmt.body)
                walk(stmt.orelse)
                walk(stmt.finalbody)
                for handler in stmt.handlers:
                    walk(handler.body)

    walk(tree.body)
    return {n: o for n, o in names.items() if _public(n)}


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """A method's keywords: its parameters and what it pops or gets from ``**kwargs``."""
    a = fn.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} - {"self", "cls"}
    if a.kwarg is not None:
        kw = a.kwarg.arg
        for n in ast.walk(fn):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("pop", "get")
                    and isinstance(n.func.value, ast.Name) and n.func.value.id == kw
                    and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)):
                names.add(n.args[0].value)
    return {n for n in names if _public(n)}


@dataclasses.dataclass
class ClassSurface:
    methods: set[str] = dataclasses.field(default_factory=set)
    attributes: set[str] = dataclasses.field(default_factory=set)
    keywords: dict[str, set[str]] = dataclasses.field(default_factory=dict)

    def update(self, other: ClassSurface) -> None:
        self.methods |= other.methods
        self.attributes |= other.attributes
        for m, kws in other.keywords.items():
            self.keywords.setdefault(m, set()).update(kws)


def class_surface(node: ast.ClassDef, dataclass_fields_are_keywords: bool = True) -> ClassSurface:
    """One class body's own public methods, attributes (class level and ``self.x = ...``) and the
    keywords of :data:`_KEYWORD_METHODS` (a dataclass's fields are its ``__init__`` keywords)."""
    out = ClassSurface()
    is_dataclass = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _public(stmt.name):
                out.methods.add(stmt.name)
            if stmt.name in _KEYWORD_METHODS or (_public(stmt.name) and stmt.name == "from_pretrained"):
                out.keywords.setdefault(stmt.name, set()).update(_parameters(stmt))
            for n in ast.walk(stmt):
                if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                        and isinstance(n.value, ast.Name) and n.value.id == "self" and _public(n.attr)):
                    out.attributes.add(n.attr)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and _public(stmt.target.id):
            out.attributes.add(stmt.target.id)
            if is_dataclass and dataclass_fields_are_keywords:
                out.keywords.setdefault("__init__", set()).add(stmt.target.id)
        elif isinstance(stmt, ast.Assign):
            out.attributes.update(n.id for t in stmt.targets for n in ast.walk(t)
                                  if isinstance(n, ast.Name) and _public(n.id))
    return out


def _members(where: str, surface: ClassSurface) -> set[Name]:
    out = {Name(where, m, "method") for m in surface.methods}
    out |= {Name(where, a, "attribute") for a in surface.attributes - surface.methods}
    out |= {Name(where, f"{m}({k})", "keyword") for m, kws in surface.keywords.items() for k in kws}
    return out


# ---------------------------------------------------------------------- the old release, from its wheel
class Wheel:
    """The ``transformers`` package inside a wheel, parsed on demand."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._zip = zipfile.ZipFile(self.path)
        self._files = {n for n in self._zip.namelist() if n.endswith(".py")}
        self._trees: dict[str, ast.Module] = {}
        meta = next((n for n in self._zip.namelist() if n.endswith(".dist-info/METADATA")), "")
        self.version = next((ln.split(":", 1)[1].strip() for ln in self._zip.read(meta).decode().splitlines()
                             if ln.startswith("Version:")), "?") if meta else "?"

    def file(self, module: str) -> str | None:
        base = "transformers/" + module.replace(".", "/") if module else "transformers"
        for candidate in (base + ".py", base + "/__init__.py"):
            if candidate in self._files:
                return candidate
        return None

    def tree(self, module: str) -> ast.Module:
        path = self.file(module)
        if path is None:
            raise KeyError(f"the wheel {self.path.name} has no module transformers.{module}")
        if path not in self._trees:
            self._trees[path] = ast.parse(self._zip.read(path).decode("utf-8"))
        return self._trees[path]

    def find_class(self, name: str, module: str) -> tuple[ast.ClassDef, str] | None:
        """The class ``name`` as ``module`` sees it: defined there, or followed through its imports."""
        seen: set[str] = set()
        while module not in seen and self.file(module) is not None:
            seen.add(module)
            tree = self.tree(module)
            for stmt in ast.walk(tree):
                if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                    return stmt, module
            nxt = None
            for stmt in ast.walk(tree):
                if isinstance(stmt, ast.ImportFrom) and any((a.asname or a.name) == name for a in stmt.names):
                    nxt = _absolute(module, stmt, self.file(module) or "")
                    break
            if nxt is None:
                return None
            module = nxt
        return None


def lm_head_models(wheel: Wheel) -> dict[str, str]:
    """The old release's ``MODEL_WITH_LM_HEAD_MAPPING_NAMES`` (model type -> the class its
    ``AutoModelWithLMHead`` loaded), which :data:`.legacy_table.LM_HEAD_MODELS` copies."""
    for stmt in wheel.tree("models.auto.modeling_auto").body:
        if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and stmt.value.args
                and any(getattr(t, "id", "") == "MODEL_WITH_LM_HEAD_MAPPING_NAMES" for t in stmt.targets)):
            return dict(ast.literal_eval(stmt.value.args[0]))
    raise KeyError(f"{wheel.path.name} has no MODEL_WITH_LM_HEAD_MAPPING_NAMES")


def _absolute(module: str, stmt: ast.ImportFrom, path: str) -> str:
    """The module (below ``transformers``) that ``from ... import`` names, seen from ``module``."""
    if not stmt.level:
        return (stmt.module or "").removeprefix("transformers").lstrip(".")
    package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
    if module == "":
        package = []
    package = package[: len(package) - (stmt.level - 1)] if stmt.level > 1 else package
    return ".".join([*package, *(stmt.module.split(".") if stmt.module else [])])


def reexports(wheel: Wheel) -> dict[str, str]:
    """What the old release's gone modules imported from Transformers modules that are not gone,
    ``{spelling: origin module}``: :data:`.legacy_table.REEXPORTS`, which serves each at its origin."""
    from .legacy_table import GONE_MODULES

    gone = {m.removeprefix("transformers.") for m in GONE_MODULES}
    out: dict[str, str] = {}
    for module in sorted(gone):
        path = wheel.file(module)
        if path is None:
            continue
        for name, origin in sorted(module_names(wheel.tree(module), module, init=path.endswith("__init__.py")).items()):
            if origin and origin not in gone:
                out[f"transformers.{module}.{name}"] = _module_name(origin)
    return out


def _wheel_class(wheel: Wheel, name: str, module: str) -> ClassSurface:
    """A class and its bases (those defined in the wheel), merged."""
    out = ClassSurface()
    todo, done = [(name, module)], set()
    while todo:
        cls, mod = todo.pop()
        found = wheel.find_class(cls, mod)
        if found is None or (cls, found[1]) in done:
            continue
        node, where = found
        done.add((cls, where))
        out.update(class_surface(node))
        todo += [(b.id, where) for b in node.bases if isinstance(b, ast.Name)]
    return out


def old_surface(wheel: Wheel) -> set[Name]:
    """The public surface of the wheel's release (see the module's docstring)."""
    out: set[Name] = set()
    for name, origin, backend in import_structure(wheel.tree("")):
        out.add(Name("transformers", name, origin=origin, backend=backend))
    for module in MODULES[1:]:
        init = (wheel.file(module) or "").endswith("__init__.py")
        out |= {Name(f"transformers.{module}", n, origin=o)
                for n, o in module_names(wheel.tree(module), module, init=init).items()}
    for cls, module in CLASSES.items():
        out |= _members(cls, _wheel_class(wheel, cls, module))
    return out


# ---------------------------------------------------------------------- the installed release
def _cache_file(version: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shardcompat"
    return root / f"transformers-surface-{version}.json"


def _installed_class(cls: type) -> ClassSurface:
    out = ClassSurface()
    out.methods = {n for n in dir(cls) if _public(n)}
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] != "transformers":
            continue
        try:
            node = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
        except (OSError, TypeError, SyntaxError):
            continue
        if isinstance(node, ast.ClassDef):
            own = class_surface(node)
            out.attributes |= own.attributes
            for m, kws in own.keywords.items():
                out.keywords.setdefault(m, set()).update(kws)
    for m in (*_KEYWORD_METHODS, "from_pretrained"):
        fn = getattr(cls, m, None)
        if fn is not None and callable(fn):
            with contextlib.suppress(TypeError, ValueError):
                out.keywords.setdefault(m, set()).update(
                    p for p in inspect.signature(fn).parameters if _public(p) and p not in ("self", "cls"))
    return out


def _module_name(module: str) -> str:
    return f"transformers.{module}" if module else "transformers"


def installed_surface(refresh: bool = False) -> dict[str, Any]:
    """``{"version", "modules": {module: [names]}, "classes": {cls: {...}}}`` of the installed
    release, from importing it once per version (then from the cache)."""
    import transformers

    version = str(transformers.__version__)
    cache = _cache_file(version)
    if not refresh and cache.is_file():
        try:
            data: dict[str, Any] = json.loads(cache.read_text())
            if data.get("version") == version and data.get("file") == transformers.__file__ \
                    and sorted(data.get("modules", ())) == sorted(_module_name(m) for m in MODULES):
                return data  # the same release, surveyed over the same modules
        except (OSError, ValueError):
            pass
    modules: dict[str, list[str]] = {}
    for module in MODULES:
        name = _module_name(module)
        try:
            modules[name] = sorted(dir(importlib.import_module(name)))
        except ImportError:
            modules[name] = []  # the module itself is gone
    classes: dict[str, dict[str, Any]] = {}
    for cls_name in CLASSES:
        cls = getattr(transformers, cls_name, None)
        if not isinstance(cls, type):
            continue
        s = _installed_class(cls)
        classes[cls_name] = {"methods": sorted(s.methods), "attributes": sorted(s.attributes),
                             "keywords": {m: sorted(k) for m, k in s.keywords.items()}}
    data = {"version": version, "file": transformers.__file__, "modules": modules, "classes": classes}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(cache)
    except OSError:
        pass  # a read-only home: survey without the cache
    return data


def _installed_has(data: dict[str, Any], name: Name) -> bool:
    if name.where.startswith("transformers"):
        return name.name in data["modules"].get(name.where, ())
    cls = data["classes"].get(name.where)
    if cls is None:
        return False
    if name.what == "keyword":
        method, keyword = name.name.rstrip(")").split("(")
        return keyword in cls["keywords"].get(method, ())
    return name.name in cls["methods"] or name.name in cls["attributes"]


def removed(wheel: Wheel, installed: dict[str, Any] | None = None) -> list[Name]:
    """The old release's public names the installed one lacks.  A keyword of a removed method,
    and a name of a module that is gone altogether, count once, under the method or module."""
    data = installed if installed is not None else installed_surface()
    gone = sorted(n for n in old_surface(wheel) if not _installed_has(data, n))
    methods = {(n.where, n.name) for n in gone if n.what in ("method", "attribute")}
    return [n for n in gone
            if not (n.what == "keyword" and (n.where, n.name.split("(")[0]) in methods
                    and n.name.split("(")[0] != "__init__")]


# ---------------------------------------------------------------------- against the table
@dataclasses.dataclass
class Coverage:
    version: str
    installed: str
    found: list[Name]
    rows: dict[Name, Any]  # the row that covers each found name
    unlisted: list[Name]

    def counts(self) -> dict[str, int]:
        from .legacy_table import Served

        served = sum(1 for r in self.rows.values() if r.served is not Served.REFUSED)
        return {"found": len(self.found), "served": served, "refused": len(self.rows) - served,
                "unlisted": len(self.unlisted)}

    def by_where(self) -> dict[str, tuple[int, int, int, int]]:
        """(found, served, refused, unlisted) for each module or class, as
        :data:`.legacy_table.COVERAGE` records them for the docs page."""
        from .legacy_table import Served

        out: dict[str, list[int]] = {}
        for n in self.found:
            r = self.rows.get(n)
            counts = out.setdefault(n.where, [0, 0, 0, 0])
            counts[0] += 1
            counts[3 if r is None else 2 if r.served is Served.REFUSED else 1] += 1
        return {where: (c[0], c[1], c[2], c[3]) for where, c in sorted(out.items())}


def coverage(wheel: Wheel, installed: dict[str, Any] | None = None) -> Coverage:
    """Every removed name of ``wheel`` with the table's row for it, and those no row covers."""
    from .legacy_table import Served, lookup

    data = installed if installed is not None else installed_surface()
    found = removed(wheel, data)
    rows: dict[Name, Any] = {}
    unlisted: list[Name] = []
    for n in found:
        r = lookup(n)
        if r is None or r.served is Served.REFUSED:
            r = served_at_origin(n, data) or r
        if r is None:
            unlisted.append(n)
        else:
            rows[n] = r
    return Coverage(wheel.version, str(data["version"]), found, rows, unlisted)


def served_at_origin(n: Name, data: dict[str, Any]) -> Any:
    """The re-export row of a gone module's name whose origin still has it, or serves it by its
    own row (what the legacy layer does at run time), or None."""
    from .legacy_table import REEXPORTS, Served, lookup, reexport_row

    r = reexport_row(n.spelling)
    if r is None:
        return None
    origin = REEXPORTS[n.spelling]
    if origin in data["modules"]:
        has = n.name in data["modules"][origin]
    else:
        try:
            has = hasattr(importlib.import_module(origin), n.name)
        except ImportError:
            has = False
    at = None if has else lookup(Name(origin, n.name))
    return r if has or (at is not None and at.served is not Served.REFUSED) else None


def _lines(names: Iterable[Name]) -> Iterator[str]:
    for n in names:
        extra = f"  [{n.origin}{', ' + n.backend if n.backend else ''}]" if n.origin else ""
        yield f"{n.what:9} {n.spelling}{extra}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shardcompat.transformers.legacy_survey",
        description="The public Transformers names an old release had and the installed one lacks, "
                    "with the legacy table's coverage of them.")
    parser.add_argument("wheel", help="an old release's wheel (pip download transformers==4.30.2 --no-deps -d DIR)")
    parser.add_argument("--unlisted", action="store_true", help="only the removed names no table row covers")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--refresh", action="store_true", help="survey the installed release again (no cache)")
    parser.add_argument("--coverage", action="store_true",
                        help="the counts per module and class, as legacy_table.COVERAGE records them")
    parser.add_argument("--reexports", action="store_true",
                        help="what the gone modules re-exported, as legacy_table.REEXPORTS records it")
    args = parser.parse_args(argv)
    if not Path(args.wheel).is_file():
        parser.error(f"{args.wheel}: no such wheel; get one with "
                     "`pip download transformers==4.30.2 --no-deps -d DIR`")
    wheel = Wheel(args.wheel)
    if args.reexports:
        print("REEXPORTS: dict[str, str] = {" + "".join(f"\n    {k!r}: {v!r}," for k, v in reexports(wheel).items())
              + "\n}")
        return 0
    cov = coverage(wheel, installed_surface(refresh=args.refresh))
    if args.coverage:
        rows = "".join(f"\n        {where!r}: {counts!r}," for where, counts in cov.by_where().items())
        print(f"COVERAGE = {{\n    'old': {cov.version!r},\n    'installed': {cov.installed!r},\n"
              f"    'by_where': {{{rows}\n    }},\n}}")
        return 0
    names = cov.unlisted if args.unlisted else cov.found
    if args.json:
        print(json.dumps({"old": cov.version, "installed": cov.installed, **cov.counts(),
                          "names": [{**dataclasses.asdict(n), "row": getattr(cov.rows.get(n), "name", None)}
                                    for n in names]}, indent=1))
    else:
        print(f"transformers {cov.version} -> {cov.installed}: " +
              ", ".join(f"{k} {v}" for k, v in cov.counts().items()), file=sys.stderr)
        for line in _lines(names):
            print(line)
    return 1 if cov.unlisted else 0


if __name__ == "__main__":
    sys.exit(main())
