"""``--fairscale-imports``: its own evidence, module bindings, unserved names, and the served
names read from the facade itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemods.cli import main
from codemods.formats import pyscan
from codemods.formats.python import migrate_source
from codemods.run.context import Settings

FAIRSCALE = Settings(fairscale_imports=True, legacy=False)


def test_served_names_are_the_facades_own() -> None:
    import shardcompat.fairscale

    assert pyscan.facade_names() == frozenset(shardcompat.fairscale.__all__)


def test_a_name_the_facade_starts_serving_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "from fairscale.nn.misc import not_yet_served\n"
    result = migrate_source(source, FAIRSCALE)
    assert result.code == source and [w.rule for w in result.warnings] == ["fairscale-unsupported"]
    assert "not_yet_served is not served by shardcompat.fairscale" in result.warnings[0].message
    served = pyscan.facade_names() | {"not_yet_served"}
    monkeypatch.setattr(pyscan, "facade_names", lambda: served)
    result = migrate_source(source, FAIRSCALE)
    assert result.code == "from shardcompat.fairscale import not_yet_served\n" and not result.warnings


def test_module_alias_with_many_uses() -> None:
    uses = "".join(f"    opt{i} = optim.OSS(params, lr=0.{i + 1})\n" for i in range(27))
    source = f"import fairscale.optim as optim\n\n\ndef test(params):\n{uses}"
    result = migrate_source(source, FAIRSCALE)
    assert result.code == source.replace("import fairscale.optim as optim", "import shardcompat.fairscale as optim")
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
    assert (root / "test_oss.py").read_text().startswith("import shardcompat.fairscale as optim\n")
    assert (root / "test_both.py").read_text() == ("from shardcompat.fairscale import OSS\n"
                                                   "cmd = 'python t.py --sharded_ddp'\n")
    assert main([str(root), "--check", "--fairscale-imports"]) == 1, "the held --sharded_ddp is still there"
    assert main([str(root), "--check", "--fairscale-imports", "--no-legacy"]) == 0
