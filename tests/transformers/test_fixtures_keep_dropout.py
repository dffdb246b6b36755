"""The Trainer fixtures keep each model's default dropout (issue 29: a comparison must pass with it on).

Two checks: the configs ``_runs`` builds its cases from keep every ``*drop*`` setting at the
config class's default; and no test or script under ``tests/transformers`` passes a dropout
keyword (``*drop*=``) a zero or ``False``, so a new fixture cannot switch it off either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

HERE = Path(__file__).parent


@pytest.mark.parametrize("kind", ["gpt2", "t5"])
def test_the_trainer_cases_models_keep_their_default_dropout(kind: str) -> None:
    from tests.transformers._runs import model_config

    config = model_config(kind)
    default = type(config)()
    drops = {k: v for k, v in vars(config).items() if "drop" in k and isinstance(v, (int, float))}
    assert drops, f"{kind}: no dropout setting found in {sorted(vars(config))}"
    for key, value in drops.items():
        assert value == getattr(default, key), (kind, key, value)
    assert any(v > 0 for v in drops.values()), (kind, drops)


def test_no_fixture_switches_dropout_off() -> None:
    found = []
    for path in sorted(HERE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.keyword) and node.arg and "drop" in node.arg.lower():
                value = node.value
                if isinstance(value, ast.Constant) and value.value in (0, 0.0, False):
                    found.append(f"{path.relative_to(HERE)}:{node.lineno} {node.arg}={value.value!r}")
    assert not found, "fixtures switch dropout off (keep each model's default):\n" + "\n".join(found)
