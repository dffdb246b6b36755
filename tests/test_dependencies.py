"""Every third-party import in the packages is a declared dependency, or optional done right.

The test environment installs the test extras, which could hide a missing dependency (numpy
and tqdm once were); this reads the imports from the source instead.  A module of a required
dependency may be imported anywhere.  A module of an optional extra only inside a function,
a ``try:`` block or the subpackage that belongs to the extra, so a bare install imports cleanly.
CI's newcomer job (.ci/newcomer) proves the same by running the README in a bare venv.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shardcompat", "codemods")
# Subpackages that are an extra's own and may import it at the top.
EXTRA_HOMES = {"transformers": ("shardcompat/transformers",)}


def _normalise(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _project() -> tuple[set[str], dict[str, set[str]]]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {_normalise(d) for d in meta["dependencies"]}
    extras = {name: {_normalise(d) for d in deps} for name, deps in meta["optional-dependencies"].items()}
    return required, extras


@functools.cache
def _distribution(module: str) -> str:
    found = packages_distributions().get(module)
    name = found[0] if found else {"yaml": "pyyaml"}.get(module, module)
    return name.lower().replace("_", "-")


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(top-level module, line, guarded) for each absolute import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name.split(".")[0], node.lineno, guarded) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno, guarded))
        inner = guarded or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Try))
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inner = True
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def test_every_third_party_import_is_declared_and_optional_ones_are_guarded() -> None:
    required, extras = _project()
    local = {p.name for p in ROOT.iterdir() if p.is_dir()}
    problems = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            for module, line, guarded in _imports(path):
                if module in sys.stdlib_module_names or module in local or module == "__future__":
                    continue
                dist = _distribution(module)
                if dist in required:
                    continue
                owners = [name for name, deps in extras.items() if dist in deps]
                if not owners:
                    problems.append(f"{relative}:{line}: imports {module} ({dist}), declared nowhere")
                elif not guarded and not any(relative.startswith(home)
                                             for owner in owners for home in EXTRA_HOMES.get(owner, ())):
                    problems.append(f"{relative}:{line}: imports {module} from the optional extra(s) "
                                    f"{', '.join(owners)} at module level, so a bare install fails")
    assert not problems, "\n".join(problems)


def test_the_check_sees_an_undeclared_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import tqdm\nimport fairscale\ndef f():\n    import transformers\n")
    assert [(m, guarded) for m, _, guarded in _imports(module)] == [
        ("tqdm", False), ("fairscale", False), ("transformers", True)]
