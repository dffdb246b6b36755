"""Serve the removed 4.x module names and class members of :data:`.legacy_table.SURFACE`.

Under ``shardcompat run`` (and after :func:`shardcompat.transformers.install`):

- each 4.x module that lost names (``transformers.trainer``, ``transformers.utils``, the top
  level, ...) gets a module ``__getattr__`` that is asked only for names the module lacks: a
  served row resolves its target (``from transformers.trainer import ShardedDDPOption`` is
  shardcompat's enum, ``transformers.utils.is_offline_mode`` the hub's) and warns once with a
  ``FutureWarning`` naming today's spelling; a refused row raises an error naming the
  replacement (an ``ImportError``, so ``from ... import`` shows it; for a top-level family such
  as ``TF*`` an ``AttributeError``, so ``hasattr(transformers, ...)`` probes keep answering False
  and the top level's own "has no attribute" error is what a script sees);
- modules not imported yet get the same hook when they are, by an import finder, and
  ``transformers.deepspeed`` (gone in 5.x) is a module of forwarding names again;
- the class members with a ``class member`` home are added to the installed classes
  (``tokenizer.as_target_tokenizer()``, ``model.framework``).

Everything is probed: a name the installed release has is never shadowed, so on releases that
still have the 4.x names nothing here acts.  :func:`._legacy.uninstall` takes it all away again.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

from .legacy_table import (
    GONE_MODULES,
    SURFACE,
    SURVEYED_MODULES,
    Home,
    Removed,
    Served,
    reexport_row,
)

__all__ = ["LegacyNameGone", "LegacyNameRefused", "install", "refusal", "resolve", "row_for"]

MIGRATE_HINT = "shardcompat-migrate --transformers-legacy PATH writes the new spelling for good"
DOCS = "docs/transformers-legacy.md"
_ABSENT: Any = object()
_warned: set[str] = set()


class LegacyNameRefused(ImportError):
    """A removed 4.x name with no honest mapping on the installed Transformers."""


class LegacyNameGone(AttributeError):
    """A name of a removed 4.x family (TensorFlow and Flax classes, archive maps, ...)."""


def _module_rows() -> dict[str, list[Removed]]:
    """The rows for module names, by module (``transformers.trainer``); families at the end."""
    out: dict[str, list[Removed]] = {}
    for r in SURFACE:
        if not r.pattern.startswith("transformers.") or r.origin or r.backend or r.gone_model:
            continue  # a class member, or a family the name alone cannot tell
        module = r.pattern.rsplit(".", 1)[0]
        if "*" in module:
            for m in SURVEYED_MODULES:
                if fnmatch.fnmatchcase(m, module):
                    out.setdefault(m, []).append(r)
        else:
            out.setdefault(module, []).append(r)
            if r.pattern.endswith(".*"):  # ``transformers.data.processors.*``: its submodules' names too
                for m in SURVEYED_MODULES:
                    if m.startswith(module + "."):
                        out.setdefault(m, []).append(r)
    return out


#: Every module hooked: the surveyed ones, and those of the served rows beyond them
#: (``transformers.models.gpt2.tokenization_gpt2.bytes_to_unicode``, ``transformers.generation_utils``).
_MODULES_SURVEYED = tuple(dict.fromkeys(SURVEYED_MODULES + tuple(
    r.pattern.rsplit(".", 1)[0] for r in SURFACE
    if r.pattern.startswith("transformers.") and r.served is not Served.REFUSED and "*" not in r.pattern)))
_HOOKED = frozenset(_MODULES_SURVEYED)


@functools.cache
def _rows() -> dict[str, list[Removed]]:
    return _module_rows()


def row_for(module: str, name: str) -> Removed | None:
    """The row serving ``module.name`` (the first match), or None."""
    spelling = f"{module}.{name}"
    for r in _rows().get(module, ()):
        if fnmatch.fnmatchcase(spelling, r.pattern):
            if r.alias is not None:
                return row_for(r.alias, name)
            return r
    return None


def resolve(target: str) -> Any:
    """``"module:attribute"`` -> the object."""
    module, _, attr = target.partition(":")
    value: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        value = getattr(value, part)
    return value


def _warn(spelling: str, r: Removed, stacklevel: int = 3) -> None:
    if spelling in _warned:
        return
    _warned.add(spelling)
    if r.served is Served.NO_OP:
        how = f"it has no effect here ({r.reason}); drop it"
    else:
        how = f"shardcompat serves it as {r.replacement} ({r.reason}); write that"
    removed = "after 4.30" if r.removed.startswith(">") else f"in {r.removed}"
    warnings.warn(f"{spelling} is Transformers 4.x API (removed {removed}); {how} "
                  f"({MIGRATE_HINT}; every name: {DOCS}).", FutureWarning, stacklevel=stacklevel)


def refusal(spelling: str, r: Removed) -> Exception:
    """The error a refused row raises: what, why, and what to write instead."""
    import transformers

    top_family = r.family and spelling.count(".") == 1  # a top-level family: keep hasattr's False
    cls = LegacyNameGone if top_family else LegacyNameRefused
    what = "nothing replaces it" if r.replacement.startswith("none") else f"use {r.replacement} instead"
    return cls(f"{spelling} is Transformers 4.x API that Transformers {transformers.__version__} removed "
               f"({r.reason}); {what} (every name: {DOCS}).")


def _at_origin(spelling: str) -> Any:
    """A name a gone module re-exported, read where 4.30 imported it from (that module's own
    legacy rows included); ``_ABSENT`` if it is not such a name or its origin no longer has it."""
    r = reexport_row(spelling)
    if r is None or r.target is None:
        return _ABSENT
    try:
        value = resolve(r.target)
    except (AttributeError, ImportError):  # gone at the origin too: the module's own row answers
        return _ABSENT
    _warn(spelling, r, stacklevel=4)
    return value


def _hook(module_name: str, module: types.ModuleType, previous: Callable[[str], Any] | None,
          served: bool) -> Callable[[str], Any]:
    """The module's ``__getattr__`` for the names it lacks; ``served``: the module is one the release
    no longer has, served here (there a whole-module family such as ``transformers.data.metrics.*``
    answers any other name with its refusal; in a module the release still has, such a name is
    just missing, as it always was)."""
    lazy = type(module) is not types.ModuleType  # 5.x's top level: the class loads its own names

    @functools.cache
    def known() -> frozenset[str]:
        return frozenset(dir(module)) if lazy else frozenset()

    def __getattr__(name: str) -> Any:
        if previous is not None:
            try:
                return previous(name)
            except AttributeError:
                pass
        r = None if name.startswith("__") or name in known() else row_for(module_name, name)
        spelling = f"{module_name}.{name}"
        if r is None or r.served is Served.REFUSED:
            value = _at_origin(spelling)
            if value is not _ABSENT:
                return value
        if r is None or r.home not in (Home.IMPORT, Home.NONE) or (r.pattern.endswith(".*") and not served):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        if r.served is Served.REFUSED:
            raise refusal(spelling, r)
        target = r.target_for(spelling)
        assert target is not None, r
        value = resolve(target)
        _warn(spelling, r)
        return value

    __getattr__.__shardcompat_legacy__ = True  # type: ignore[attr-defined]
    return __getattr__


class _Installed:
    """What :func:`install` changed, undone by deleting ``state`` (how :func:`._legacy.uninstall`
    undoes an entry it did not add itself)."""

    def __init__(self) -> None:
        self.hooked: list[tuple[types.ModuleType, Any]] = []
        self.members: list[tuple[type, str]] = []
        self.gone: list[str] = []
        self.finder: _Finder | None = None
        self.state = True

    def hook(self, module_name: str, module: types.ModuleType, served: bool = False) -> None:
        current = vars(module).get("__getattr__")
        if getattr(current, "__shardcompat_legacy__", False):
            return
        module.__getattr__ = _hook(module_name, module, current, served)  # type: ignore[attr-defined,method-assign]
        self.hooked.append((module, current if current is not None else _ABSENT))

    def __delattr__(self, name: str) -> None:
        if name != "state":
            raise AttributeError(name)
        if self.finder is not None and self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        for module, previous in reversed(self.hooked):
            if previous is _ABSENT:
                vars(module).pop("__getattr__", None)
            else:
                module.__getattr__ = previous  # type: ignore[attr-defined,method-assign]
        for cls, member in reversed(self.members):
            if member in vars(cls):
                delattr(cls, member)
        for gone in self.gone:
            sys.modules.pop(gone, None)
            parent, _, child = gone.rpartition(".")
            package = sys.modules.get(parent)
            if package is not None and isinstance(vars(package).get(child), types.ModuleType):
                vars(package).pop(child, None)
        self.hooked, self.members, self.gone = [], [], []
        object.__delattr__(self, "state")


class _Loader(importlib.abc.Loader):
    def __init__(self, installed: _Installed, name: str, inner: importlib.abc.Loader | None) -> None:
        self._installed, self._name, self._inner = installed, name, inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._inner.create_module(spec) if self._inner is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        if self._inner is not None:
            self._inner.exec_module(module)
        else:
            module.__doc__ = f"Transformers 4.x's {self._name}, served by shardcompat (see {DOCS})."
        self._installed.hook(self._name, module, served=self._inner is None)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ... of the real loader
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Hooks the surveyed modules when they are imported, and serves the gone ones."""

    def __init__(self, installed: _Installed) -> None:
        self._installed = installed
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _HOOKED or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        except (ImportError, ValueError):
            spec = None
        finally:
            self._busy.discard(fullname)
        if spec is None:
            if fullname not in GONE_MODULES:
                return None
            self._installed.gone.append(fullname)
            package = any(m.startswith(fullname + ".") for m in GONE_MODULES)
            return importlib.machinery.ModuleSpec(fullname, _Loader(self._installed, fullname, None),
                                                  is_package=package)
        if spec.loader is None:
            return None
        spec.loader = _Loader(self._installed, fullname, spec.loader)
        return spec


def _class_members(installed: _Installed) -> None:
    import transformers

    for r in SURFACE:
        if r.home is not Home.CLASS or r.served is Served.REFUSED or r.target is None:
            continue
        where, member = r.pattern.split(".", 1)
        found = getattr(transformers, where, None)
        if not isinstance(found, type):
            continue
        cls = next((c for c in found.__mro__ if c.__module__.split(".")[0] == "transformers"), found)
        if hasattr(cls, member):
            continue
        value = resolve(r.target)
        spelling = r.pattern
        if isinstance(value, property):  # an attribute read on the instance (tokenizer.max_len)
            def read(self: Any, _p: property = value, _r: Removed = r, _s: str = spelling) -> Any:
                _warn(_s, _r)
                assert _p.fget is not None
                return _p.fget(self)

            setattr(cls, member, property(read, doc=f"Transformers 4.x's {spelling}: {r.reason}."))
        elif callable(value):
            def method(self: Any, *args: Any, _v: Any = value, _r: Removed = r, _s: str = spelling,
                       **kwargs: Any) -> Any:
                _warn(_s, _r)
                return _v(self, *args, **kwargs)

            functools.update_wrapper(method, value)
            setattr(cls, member, method)
        else:
            def get(self: Any, _v: Any = value, _r: Removed = r, _s: str = spelling) -> Any:
                _warn(_s, _r)
                return _v

            setattr(cls, member, property(get, doc=f"Transformers 4.x's {spelling}: {r.reason}."))
        installed.members.append((cls, member))


def install(packages: list[Any]) -> _Installed:
    """Hook the modules (``packages``: every ``transformers`` package object in play); deleting
    the result's ``state`` undoes it all (what :func:`._legacy.uninstall` does)."""
    installed = _Installed()
    for package in packages:
        installed.hook("transformers", package)
    for name in _MODULES_SURVEYED[1:]:
        module = sys.modules.get(name)
        if module is not None:
            installed.hook(name, module)
    installed.finder = _Finder(installed)
    sys.meta_path.insert(0, installed.finder)
    _class_members(installed)
    return installed
