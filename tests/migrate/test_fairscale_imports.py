"""``--fairscale-imports``: a prefix swap (``fairscale.`` -> ``shardcompat.fairscale.``) for what
the facade serves at each path, read from the facade's own table; its own evidence, module
bindings, unserved names reported with the facade's reason, and rewritten imports that import."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codemods.cli import main
from codemods.formats import pyscan
from codemods.formats.python import migrate_source
from codemods.run.context import Settings

FAIRSCALE = Settings(fairscale_imports=True, legacy=False)


def test_what_may_move_is_the_facades_own_table() -> None:
    from shardcompat.fairscale import _tree

    for dotted in ("fairscale.optim.oss.OSS", "fairscale.nn.model_parallel", "fairscale.optim.AdaScale",
                   "fairscale.nn.nothing"):
        assert pyscan.facade_resolve(dotted) == tuple(_tree.resolve(dotted))


def test_a_name_the_facade_starts_serving_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardcompat.fairscale import _tree

    source = "from fairscale.nn.misc import not_yet_served\n"
    result = migrate_source(source, FAIRSCALE)
    assert result.code == source and [w.rule for w in result.warnings] == ["fairscale-unsupported"]
    assert "fairscale.nn.misc.not_yet_served is not served by shardcompat.fairscale" in result.warnings[0].message
    row = _tree.TREE["nn.misc"]
    monkeypatch.setitem(_tree.TREE, "nn.misc", row._replace(served=(*row.served, "not_yet_served")))
    result = migrate_source(source, FAIRSCALE)
    assert result.code == "from shardcompat.fairscale.nn.misc import not_yet_served\n" and not result.warnings


def test_an_unserved_name_is_reported_with_the_facades_reason() -> None:
    source = "from fairscale.optim import OSS as O, AdaScale\n"
    result = migrate_source(source, FAIRSCALE)
    assert result.code == "from shardcompat.fairscale.optim import OSS as O\nfrom fairscale.optim import AdaScale\n"
    (warning,) = result.warnings
    assert "adapts the learning rate" in warning.message and "keep importing it from fairscale" in warning.message


def test_rewritten_fixtures_import_for_real() -> None:
    """Every import the rule wrote into a fixture's ``after`` runs (fairscale need not be
    installed): the prefix swap only moves what the facade serves at that path."""
    import ast
    import subprocess
    import sys

    from .fixtures import ROOT

    statements = []
    for after in sorted(ROOT.glob("*fairscale*/after.py")):
        for node in ast.walk(ast.parse(after.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and "shardcompat.fairscale" in ast.unparse(node):
                statements.append(ast.unparse(node))
    assert len(statements) >= 20
    script = "\n".join(statements) + "\nprint('imported', len(dir()))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_migrated_trainer_version_gate_runs_without_fairscale() -> None:
    """The Transformers 4.x Trainer's ``import fairscale`` + ``fairscale.__version__`` gate moves
    whole, and, run where fairscale is not installed, takes the FSDP branch on the facade."""
    import subprocess
    import sys

    from .fixtures import ROOT

    folder = ROOT / "py_fairscale_version_gate"
    result = migrate_source((folder / "before.py").read_text(), FAIRSCALE)
    assert result.code == (folder / "after.py").read_text() and "import fairscale\n" not in result.code
    script = (result.code + "\nimport shardcompat.fairscale as facade\n"
              "assert sharding_classes() == (facade.ShardedDataParallel, facade.OSS, facade.ShardedGradScaler, "
              "facade.FullyShardedDataParallel, facade.auto_wrap)\nprint('ok')\n")
    env = {**os.environ, "SHARDCOMPAT_FAIRSCALE": "native"}  # as if fairscale were not installed
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_an_installed_fairscale_check_is_reported_only_where_imports_move() -> None:
    """``is_fairscale_available()`` would skip the facade imports it guards where fairscale is
    missing: reported (not rewritten: it may guard real fairscale too) once an import moves."""
    guarded = ("from transformers.utils import is_fairscale_available\n"
               "if is_fairscale_available():\n    from fairscale.optim import OSS\n")
    result = migrate_source(guarded, FAIRSCALE)
    assert "from shardcompat.fairscale.optim import OSS" in result.code and "if is_fairscale_available():" in result.code
    (warning,) = result.warnings
    assert (warning.line, warning.rule) == (2, "fairscale-guard") and "always importable" in warning.hint
    staying = guarded.replace("import OSS", "import AdaScale")
    assert [w.rule for w in migrate_source(staying, FAIRSCALE).warnings] == ["fairscale-unsupported"]
    unrelated = "from transformers.utils import is_fairscale_available\nok = is_fairscale_available()\n"
    assert not migrate_source(unrelated, FAIRSCALE).warnings


def test_module_alias_with_many_uses() -> None:
    uses = "".join(f"    opt{i} = optim.OSS(params, lr=0.{i + 1})\n" for i in range(27))
    source = f"import fairscale.optim as optim\n\n\ndef test(params):\n{uses}"
    result = migrate_source(source, FAIRSCALE)
    assert result.code == source.replace("import fairscale.optim as optim", "import shardcompat.fairscale.optim as optim")
    assert [e.rule for e in result.edits] == ["fairscale-import"] and not result.warnings


def test_module_alias_with_an_unserved_use_is_reported_not_skipped() -> None:
    source = ("import fairscale.optim as optim\n"
              "opt = optim.OSS(params)\n"
              "scaler = optim.AdaScale(opt)\n")
    result = migrate_source(source, FAIRSCALE)
    assert result.code == source
    (warning,) = result.warnings
    assert warning.line == 1 and "optim.AdaScale not served" in warning.message and "line 3" in warning.message


def test_fairscale_imports_are_their_own_evidence(tmp_path: Path) -> None:
    """fairscale's own test tree has no Transformers anywhere: its imports are still rewritten,
    and a --sharded_ddp usage next to them is still held."""
    root = tmp_path / "fairscale-tests"
    root.mkdir()
    (root / "test_oss.py").write_text("import fairscale.optim as optim\n\n\ndef test(p):\n    return optim.OSS(p)\n")
    (root / "test_both.py").write_text("from fairscale.optim import OSS\ncmd = 'python t.py --sharded_ddp'\n")
    assert main([str(root), "--write", "--fairscale-imports"]) == 0
    assert (root / "test_oss.py").read_text().startswith("import shardcompat.fairscale.optim as optim\n")
    assert (root / "test_both.py").read_text() == ("from shardcompat.fairscale.optim import OSS\n"
                                                   "cmd = 'python t.py --sharded_ddp'\n")
    assert main([str(root), "--check", "--fairscale-imports"]) == 1, "the held --sharded_ddp is still there"
    assert main([str(root), "--check", "--fairscale-imports", "--no-legacy"]) == 0
