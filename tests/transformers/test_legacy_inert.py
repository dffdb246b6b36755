"""The legacy layer serves exactly what the installed release lacks, and nothing on a release that has it all.

Runs on every release; the nox session ``transformers(4.34.1)`` runs it on the last 4.x with
``sharded_ddp``, where only ``xpu_backend`` (removed in 4.32) is served and nothing is patched:
no module name added, no ``from_pretrained`` wrapped, no ``Trainer`` keyword renamed.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

import shardcompat.transformers as sct  # noqa: E402
from shardcompat.transformers import _legacy  # noqa: E402
from shardcompat.transformers.legacy_table import FIELDS, Kind, by_kind  # noqa: E402


def _stock(name: str) -> Any:
    return _legacy._release(name)


def test_the_fields_served_are_the_fields_the_release_lacks() -> None:
    stock = {f.name for f in dataclasses.fields(_stock("TrainingArguments"))}
    assert [r.name for r in _legacy._missing_fields()] == [r.name for r in FIELDS if r.name not in stock]
    ours = {f.name for f in dataclasses.fields(sct.TrainingArguments)}
    assert ours == stock | {"sharded_ddp"} | {r.name for r in _legacy._missing_fields()}


def test_install_patches_only_what_the_release_lacks() -> None:
    lacking = {r.name for r in by_kind(Kind.TOP_LEVEL) if not hasattr(transformers, r.name)}
    release_takes_use_auth_token = "use_auth_token" in inspect.getsource(sys.modules[transformers.PreTrainedModel.__module__])
    done = _legacy.install()
    try:
        added = {name for owner, name, _ in done if owner is sys.modules["transformers"]}
        wrapped = {owner.__name__ for owner, name, _ in done if name == "from_pretrained"}
    finally:
        _legacy.uninstall(done)
    assert added == lacking
    if release_takes_use_auth_token:  # 4.x: from_pretrained still takes use_auth_token
        assert wrapped == set()
    else:
        assert "PreTrainedModel" in wrapped


def test_trainer_keywords_are_left_alone_where_the_release_has_them() -> None:
    has_tokenizer = "tokenizer" in inspect.signature(_stock("Trainer").__init__).parameters
    rows = [r.name for r in _legacy._trainer_rows()]
    assert ("tokenizer" in rows) is not has_tokenizer and "prediction_loss_only" in rows  # 4.0 removed it: no release has it
    expected = {"tokenizer": 1} if has_tokenizer else {"processing_class": 1}
    assert _legacy.trainer_keywords({"tokenizer": 1}) == (expected, {})


def test_a_module_the_release_still_has_keeps_its_own_missing_names() -> None:
    """4.34.1 still has transformers.data.datasets.squad: under the layer its names are the
    release's, and a name it never had is missing as before, not refused (on 5.x, where the layer
    serves the module, any name of it is refused with the replacement)."""
    import importlib

    with sct.dropins():
        squad = importlib.import_module("transformers.data.datasets.squad")
        served = getattr(squad, "__file__", None) is None
        if served:
            with pytest.raises(ImportError, match=r"MODEL_TYPES is Transformers 4\.x API"):
                squad.MODEL_TYPES  # noqa: B018
        else:
            assert squad.SquadDataset.__module__ == "transformers.data.datasets.squad"
            assert not hasattr(squad, "never_a_name")
