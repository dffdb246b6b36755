"""A DCP checkpoint from elsewhere is read without running anything it holds.

Real DCP folders written by ``torch.distributed.checkpoint.save`` in this process (no process
group needed); hostile ones are those with a ``.metadata`` or a bytes entry whose pickle calls
``os.system``: they must be refused before the call runs (the marker file never appears).
"""

from __future__ import annotations

import os
import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from shardcompat.checkpoint import CheckpointError
from shardcompat.checkpoint._dcp_metadata import allowed_globals, read_metadata


class _Hostile:
    """Unpickling this runs ``touch MARKER``: what an attacker's pickle does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _save(folder: Path, state: dict[str, Any]) -> Path:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "assuming the intent is to save in a single process"
        dcp.save(state, checkpoint_id=folder, no_dist=True)
    return folder


def _state() -> dict[str, Any]:
    return {
        "model": {"w": torch.randn(3, 4), "b": torch.zeros(4, dtype=torch.bfloat16)},
        "optimizer": {"param_groups": [{"lr": 0.1, "params": ["w"]}], "state": {"w": {"step": torch.tensor(2.0)}}},
    }


def _read_all(folder: Path) -> dict[str, Any]:
    """Every entry of ``folder``, read the way ``checkpoint consolidate`` reads shards."""
    from shardcompat.checkpoint._sharded import _read

    return _read(folder)


def test_what_torch_writes_reads_back(tmp_path: Path) -> None:
    saved = _state()
    folder = _save(tmp_path / "c", saved)
    assert set(read_metadata(folder).state_dict_metadata) >= {"model.w", "model.b", "optimizer.param_groups.0.lr"}
    state = _read_all(folder)
    assert torch.equal(state["model"]["w"], saved["model"]["w"])
    assert state["optimizer"]["param_groups"] == saved["optimizer"]["param_groups"]


def test_the_allowed_classes_are_torchs_metadata_classes() -> None:
    names = {f"{m}.{n}" for m, n in allowed_globals()}
    for cls in ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "MetadataIndex"):
        assert f"torch.distributed.checkpoint.metadata.{cls}" in names
    assert "torch.distributed.checkpoint.filesystem._StorageInfo" in names
    assert not any(m in ("os", "posix", "builtins", "subprocess") for m, _ in allowed_globals())


def test_a_hostile_metadata_is_refused_unexecuted(tmp_path: Path) -> None:
    folder = _save(tmp_path / "c", _state())
    marker = tmp_path / "PWNED"
    (folder / ".metadata").write_bytes(pickle.dumps(_Hostile(marker)))
    with pytest.raises(CheckpointError, match=r"\.metadata cannot be read as DCP metadata: it names posix\.system"):
        read_metadata(folder)
    with pytest.raises(CheckpointError, match=r"it names posix\.system"):
        _read_all(folder)
    assert not marker.exists()


def test_a_hostile_bytes_entry_is_refused_unexecuted(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    folder = _save(tmp_path / "c", {"model": {"w": torch.zeros(2)}, "optimizer": {"param_groups": _Hostile(marker)}})
    with pytest.raises(CheckpointError, match=r"'optimizer\.param_groups' cannot be read safely"):
        _read_all(folder)
    assert not marker.exists()


@pytest.mark.parametrize("where", ["outside", "link"])
def test_a_shard_file_outside_the_folder_is_refused(tmp_path: Path, where: str) -> None:
    folder = _save(tmp_path / "c", _state())
    metadata = read_metadata(folder)
    (tmp_path / "elsewhere.distcp").write_bytes(b"")
    for info in metadata.storage_data.values():
        if where == "outside":
            info.relative_path = "../elsewhere.distcp"
        else:
            shutil.move(folder / info.relative_path, tmp_path / "real.distcp")
            (folder / info.relative_path).symlink_to(tmp_path / "real.distcp")
            break
    metadata.storage_meta = None
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match=r"not a path inside the directory|is a symbolic link"):
        read_metadata(folder)
