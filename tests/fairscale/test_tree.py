"""The facade's module tree: every fairscale path, what it serves and how it refuses.

A fresh interpreter imports every mirrored path the way fairscale code does (``import m``,
``from m import X``, ``import m as alias``) and checks that each name is the one object the
flat facade serves; every unserved name and module is asked for in every import form and must
explain itself (an ``ImportError``, never a ``ModuleNotFoundError``; an ``AttributeError`` on
attribute access, so ``hasattr`` stays false); typos get a did-you-mean.  With fairscale
installed, the table must cover fairscale's own tree.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import shardcompat.fairscale as facade
from shardcompat.backends._fairscale_common import import_fairscale
from shardcompat.fairscale import _tree, _unserved

ROOT = Path(__file__).parents[2]
PACKAGE = "shardcompat.fairscale"
MIRRORED = [path for path in _tree.TREE if path]


def _module(path: str) -> str:
    return f"{PACKAGE}.{path}" if path else PACKAGE


def test_every_mirrored_path_serves_the_flat_facades_objects_in_a_fresh_process() -> None:
    """Run as fairscale code would, in a clean interpreter: importing the tree loads neither
    fairscale nor torch.distributed's FSDP; each served name is the flat facade's object."""
    script = textwrap.dedent("""
        import importlib, json, sys
        from shardcompat.fairscale import _tree
        paths = [p for p in _tree.TREE if p]
        for path in paths:
            importlib.import_module("shardcompat.fairscale." + path)
        loaded = sorted(m for m in sys.modules if m == "fairscale" or m.startswith(("fairscale.",
                        "torch.distributed.fsdp")))
        import shardcompat.fairscale as flat
        same, checked, refused = [], 0, {}
        for path in paths:
            node = _tree.TREE[path]
            for name in node.served:
                scope = {}
                try:
                    exec(f"from shardcompat.fairscale.{path} import {name} as got", scope)
                except ImportError as error:  # the installed fairscale predates it: said so
                    refused[f"{path}.{name}"] = str(error)
                    continue
                module = importlib.import_module("shardcompat.fairscale." + path)
                reference = getattr(flat, name) if name in _tree.TREE[""].served else getattr(module, name)
                checked += 1
                if scope["got"] is not reference or getattr(module, name) is not reference:
                    same.append(f"{path}.{name}")
        scope = {}
        exec("import shardcompat.fairscale.nn.data_parallel as dp", scope)
        import shardcompat.fairscale.nn.wrap.auto_wrap  # a submodule named like a function nn.wrap serves
        print(json.dumps({"loaded": loaded, "differ": same, "checked": checked, "refused": refused,
                          "alias": scope["dp"].FullyShardedDataParallel is flat.FullyShardedDataParallel,
                          "attr": [sys.modules["shardcompat.fairscale.nn.wrap"].auto_wrap is flat.auto_wrap,
                                   flat.nn.wrap is flat.wrap]}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["loaded"] == [], f"importing the tree loaded {got['loaded']}: the names must resolve lazily"
    assert got["differ"] == [], f"these paths serve another object than the flat facade: {got['differ']}"
    assert got["checked"] + len(got["refused"]) == sum(len(node.served) for path, node in _tree.TREE.items() if path)
    for where, why in got["refused"].items():  # only where a real, older fairscale serves the family
        assert "upgrade fairscale" in why and "SHARDCOMPAT_FAIRSCALE=native" in why, f"{where}: {why}"
    assert got["alias"]
    # As in fairscale, a package's served function wins over its submodule of the same name.
    assert got["attr"] == [True, True]


def _raises_explained(statement: str, text: str, kind: type[BaseException]) -> BaseException:
    with pytest.raises(kind) as caught:
        exec(statement, {})
    assert not isinstance(caught.value, ModuleNotFoundError), f"{statement}: a bare ModuleNotFoundError"
    assert text in str(caught.value), f"{statement}: {caught.value}"
    return caught.value


@pytest.mark.parametrize("path", ["", *MIRRORED])
def test_every_unserved_name_explains_itself_on_every_import_form(path: str) -> None:
    module = importlib.import_module(_module(path))
    for name in _tree.TREE[path].unserved:
        why = _unserved.UNSERVED[name].why
        _raises_explained(f"from {_module(path)} import {name}", why, ImportError)
        _raises_explained(f"from {_module(path)} import {name} as alias", why, ImportError)
        _raises_explained(f"import {_module(path)}.{name}", why, ImportError)
        error = _raises_explained(f"import {_module(path)} as m\nm.{name}", why, AttributeError)
        assert isinstance(error, _unserved.UnservedAttribute)
        assert not hasattr(module, name) and getattr(module, name, None) is None
        assert name not in dir(module) and name not in module.__all__


@pytest.mark.parametrize("path", list(_unserved.UNSERVED_MODULES))
def test_every_unserved_module_keeps_its_path_and_explains_itself(path: str) -> None:
    why = _unserved.UNSERVED_MODULES[path].why
    parent, _, last = f"{PACKAGE}.{path}".rpartition(".")
    _raises_explained(f"import {PACKAGE}.{path}", why, ImportError)
    _raises_explained(f"import {PACKAGE}.{path} as alias", why, ImportError)
    _raises_explained(f"from {PACKAGE}.{path} import anything", why, ImportError)
    _raises_explained(f"import {PACKAGE}.{path}.deeper.module", why, ImportError)
    if parent.removeprefix(f"{PACKAGE}.") in _tree.TREE or parent == PACKAGE:
        _raises_explained(f"from {parent} import {last}", why, ImportError)
        _raises_explained(f"import {parent} as m\nm.{last}", why, AttributeError)
        assert not hasattr(importlib.import_module(parent), last)


def test_typos_of_served_names_fail_with_a_did_you_mean() -> None:
    _raises_explained(f"from {PACKAGE}.nn.wrap import auto_wrapp", "did you mean 'auto_wrap'?", ImportError)
    _raises_explained(f"from {PACKAGE}.optim.oss import OSs", "did you mean 'OSS'?", ImportError)
    _raises_explained(f"import {PACKAGE}.nn.data_paralel", "did you mean 'data_parallel'?", ImportError)
    _raises_explained(f"import {PACKAGE}.nn as m\nm.FullyShardedDataParalel",
                      "did you mean 'FullyShardedDataParallel'?", AttributeError)
    _raises_explained(f"import {PACKAGE} as m\nm.ShardedGradScalar", "did you mean 'ShardedGradScaler'?",
                      AttributeError)
    # Something unrelated is Python's ordinary error, and private names are not second-guessed.
    with pytest.raises(ImportError, match="cannot import name 'Unrelated'"):
        exec(f"from {PACKAGE}.optim import Unrelated", {})
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{PACKAGE}._no_such_private_module")
    assert not hasattr(facade.nn, "__wrapped__")


def test_a_failing_served_name_is_not_hidden_behind_a_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real bug while resolving a served name surfaces as itself, not as 'not served'."""
    from shardcompat.fairscale import _classes

    def broken(name: str) -> object:
        raise RuntimeError(f"resolving {name} broke")

    monkeypatch.setattr(_classes, "implementation", broken)
    with pytest.raises(RuntimeError, match="resolving OSS broke"):
        exec(f"from {PACKAGE}.optim.oss import OSS", {})


def test_a_served_name_this_backing_cannot_serve_explains_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older real fairscale may lack a served name (disable_checkpointing before 0.4.3): the
    loader's explanation reaches every import form, not a did-you-mean naming the name itself."""
    from shardcompat.fairscale import _classes

    def too_old(name: str) -> object:
        raise _unserved.UnservedAttribute(f"{name}: this fairscale predates it; upgrade fairscale")

    monkeypatch.setattr(_classes, "implementation", too_old)
    error = _raises_explained(f"from {PACKAGE}.nn.checkpoint.checkpoint_activations import disable_checkpointing",
                              "predates it", ImportError)
    assert "did you mean" not in str(error)
    _raises_explained(f"import {PACKAGE}.nn.checkpoint.checkpoint_activations as m\nm.disable_checkpointing",
                      "predates it", AttributeError)


def test_the_docs_list_every_mirrored_path_from_the_code() -> None:
    text = (ROOT / "docs" / "fairscale-facade.md").read_text()
    for table in (_tree.markdown_table(), _tree.unserved_modules_table(), _tree.unserved_names_table()):
        assert table in text, "regenerate the tables in docs/fairscale-facade.md from shardcompat.fairscale._tree"
    for path in MIRRORED:
        assert f"`{PACKAGE}.{path}`" in text


@pytest.mark.parametrize("path", MIRRORED)
def test_type_checkers_see_what_each_module_serves(path: str) -> None:
    """Each module's ``if TYPE_CHECKING:`` imports (what mypy reads) name exactly its served row."""
    source = Path(importlib.import_module(_module(path)).__file__ or "").read_text()
    typed = {alias.asname or alias.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.If)
             for stmt in node.body if isinstance(stmt, ast.ImportFrom) for alias in stmt.names}
    assert typed == set(_tree.TREE[path].served)


def test_the_flat_facade_exports_its_tree_row() -> None:
    public = [name for name in _tree.TREE[""].served if not name.startswith("_")]
    assert sorted(facade.__all__) == sorted([*public, "describe"])


def test_every_unserved_name_is_offered_somewhere_and_served_names_resolve() -> None:
    offered = {name for path, node in _tree.TREE.items() if path for name in node.unserved}
    assert offered == set(_unserved.UNSERVED), "an unserved name no mirrored path lists"
    from shardcompat.fairscale._classes import OWN
    from shardcompat.fairscale._select import FAMILIES

    served = {name for node in _tree.TREE.values() for name in node.served}
    assert served <= set(FAMILIES) | set(OWN), "a served name with nothing to resolve it"
    overlap = {name for node in _tree.TREE.values() for name in set(node.served) & set(node.unserved)}
    assert not overlap


def _fairscale_files() -> list[str]:
    found, why = import_fairscale(["fairscale"])
    if not found:
        pytest.skip(why)
    files = importlib.metadata.files("fairscale") or []
    return [str(f) for f in files if str(f).startswith("fairscale/") and str(f).endswith(".py")]


@pytest.mark.fairscale
def test_every_module_of_the_installed_fairscale_is_mirrored_or_refused() -> None:
    missing = []
    for file in _fairscale_files():
        parts = file[len("fairscale/"):-len(".py")].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        path = ".".join(parts)
        if not path or any(p.startswith("_") for p in parts) or path in _tree.TREE:
            continue
        if not any(path == refused or path.startswith(f"{refused}.") for refused in _unserved.UNSERVED_MODULES):
            missing.append(f"fairscale.{path}")
    assert not missing, f"neither mirrored (_tree.TREE) nor refused (_unserved.UNSERVED_MODULES): {missing}"


def _offered(module: types.ModuleType) -> list[str]:
    """What a fairscale module offers: a package, the fairscale names it gathers (its modules'
    ``__all__`` are empty); any module, the public functions, classes and objects it defines."""
    package = hasattr(module, "__path__")
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
            and (getattr(value, "__module__", None) == module.__name__
                 or (package and str(getattr(value, "__module__", "")).startswith("fairscale")))]


@pytest.mark.fairscale
def test_every_name_a_fairscale_module_offers_is_served_or_refused_at_the_same_path() -> None:
    _fairscale_files()
    unknown, checked = [], 0
    for path in MIRRORED:
        try:
            module = importlib.import_module(f"fairscale.{path}")
        except ImportError:
            continue  # this release predates the path; the facade still offers it
        checked += 1
        node = _tree.TREE[path]
        unknown += [f"fairscale.{path}.{name}" for name in _offered(module)
                    if name not in node.served and name not in node.unserved]
    assert checked, "no mirrored module of the installed fairscale was importable"
    assert not unknown, f"offered by fairscale but neither served nor refused there: {unknown}"


@pytest.mark.parametrize("dotted, kind", [
    ("fairscale", "module"),
    ("fairscale.nn.data_parallel", "module"),
    ("fairscale.optim.oss.OSS", "served"),
    ("fairscale.optim.OSS.step", "served"),
    ("fairscale.nn.wrap", "served"),  # as an attribute, the function nn serves wins, as in fairscale
    ("fairscale.nn.wrap.auto_wrap", "served"),
    ("fairscale.optim.AdaScale", "unserved"),
    ("fairscale.nn.model_parallel.initialize.initialize_model_parallel", "unserved"),
    ("fairscale.experimental", "unserved"),
    ("fairscale.optim.NoSuchThing", "unknown"),
    ("fairscale.__version__", "served"),
    ("fairscale.__file__", "unknown"),
    ("torch.nn", "unknown"),
])
def test_resolve_says_what_the_migration_may_move(dotted: str, kind: str) -> None:
    verdict = _tree.resolve(dotted)
    assert verdict.kind == kind
    assert bool(verdict.reason) == (kind == "unserved")


def test_resolve_reads_an_imports_module_path_as_modules() -> None:
    assert _tree.resolve("fairscale.nn.wrap", module=True).kind == "module"
    assert _tree.resolve("fairscale.nn.wrap.auto_wrap", module=True).kind == "module"
    assert _tree.resolve("fairscale.nn.pipe", module=True).kind == "unserved"
