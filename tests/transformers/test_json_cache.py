"""The kept 4.x datasets' JSON cache (``_json_cache``): a value is read only where it was built for
the same inputs, built once under a lock beside the cache, and a folder that takes no files
(a read-only data set) still gives the value, built, with neither cache nor lock left there."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
pytest.importorskip("filelock", reason="the kept datasets lock with filelock (pip install 'shardcompat[transformers]')")

from shardcompat.transformers import _json_cache


def _once(path: Path, key: dict[str, Any], value: Any, overwrite: bool = False) -> tuple[Any, int]:
    built = []

    def build() -> Any:
        built.append(1)
        return value

    return _json_cache.once(str(path), key, build, lambda v: isinstance(v, list), overwrite), len(built)


def test_built_once_then_read_for_the_same_inputs_only(tmp_path: Path) -> None:
    cache = tmp_path / "cached.json"
    assert _once(cache, {"k": 1}, [1, 2]) == ([1, 2], 1)
    assert _once(cache, {"k": 1}, [3]) == ([1, 2], 0)  # read, not built
    assert _once(cache, {"k": 2}, [3]) == ([3], 1)  # other inputs: built again
    assert _once(cache, {"k": 2}, [4], overwrite=True) == ([4], 1)
    cache.write_text(json.dumps({"key": {"k": 2}, "value": {"not": "a list"}}))
    assert _once(cache, {"k": 2}, [5]) == ([5], 1)  # a value of the wrong shape: built again
    cache.write_text("{torn")
    assert _once(cache, {"k": 2}, [6]) == ([6], 1)
    assert json.loads(cache.read_text()) == {"key": {"k": 2}, "value": [6]}


def test_a_folder_that_takes_no_files_gets_the_value_without_a_cache_or_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a read-only folder, as the data set of another user (root may write anywhere: os.access says no,
    # and creating a file there fails, as it would)
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_json_cache.tempfile, "mkstemp", refused)
    assert _once(tmp_path / "cached.json", {"k": 1}, [1]) == ([1], 1)
    assert list(tmp_path.iterdir()) == []
