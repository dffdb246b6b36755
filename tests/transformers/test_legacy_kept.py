"""The 4.x data layers Transformers dropped without a successor (GLUE, SQuAD, XNLI, the
language-modelling datasets) are kept in public shardcompat modules: under the layer every 4.x
home of each name (the table's ``KEPT``, from the survey of 4.30.2) is that module's object, and a
name of those modules that is not served is refused naming what replaces it."""

from __future__ import annotations

import importlib
import sys

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
if importlib.util.find_spec("transformers.data.processors") is not None:
    pytest.skip("this Transformers ships the 4.x data layers itself: nothing is served", allow_module_level=True)

import shardcompat.transformers as sct  # noqa: E402
from shardcompat.transformers._legacy_imports import LegacyNameRefused  # noqa: E402
from shardcompat.transformers.legacy_table import KEPT  # noqa: E402

HOMES = [(kept, module, name) for kept, (homes, _) in KEPT.items() for module, names in homes.items()
         for name in names]


@pytest.mark.parametrize("kept", sorted(KEPT))
def test_every_4x_home_of_a_kept_name_is_the_kept_modules_object(kept: str) -> None:
    ours = importlib.import_module(kept)
    with sct.dropins():
        for where, module, name in HOMES:
            if where == kept:
                assert getattr(importlib.import_module(module), name) is getattr(ours, name), f"{module}.{name}"
    assert "transformers.data.processors" not in sys.modules  # taken away again


@pytest.mark.parametrize(("module", "name", "replacement"), [
    ("transformers.data.datasets.squad", "MODEL_TYPES", "the datasets library"),
    ("transformers.data.datasets.language_modeling", "DEPRECATION_WARNING", "the datasets library"),
])
def test_what_is_not_served_is_refused_with_its_replacement(module: str, name: str, replacement: str) -> None:
    with sct.dropins():
        where = importlib.import_module(module)
        with pytest.raises(LegacyNameRefused, match=f"{name} is Transformers 4\\.x API.*{replacement}"):
            getattr(where, name)
