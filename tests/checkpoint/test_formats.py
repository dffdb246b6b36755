"""The format readers on checkpoints the real tools wrote at test time (tests/checkpoint/_artifacts.py).

Each description is checked against what the writer itself held (names, shapes, dtypes and
bytes of the real model), and each format is then attacked: a hostile pickle, a corrupted, a
truncated and a foreign file, paths out of the folder, declared sizes larger than the files.
Every refusal is one line naming the file, and the hostile payload (which would create a
marker folder) never runs.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

from shardcompat.checkpoint import CheckpointError
from shardcompat.checkpoint.formats import FormatError, describe, detect, names_for_indices, tensors
from shardcompat.cli import main
from tests.checkpoint._artifacts import build

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("formats")
    return root, build(root)


def _copy(art: tuple[Path, dict[str, Any]], name: str, tmp_path: Path) -> Path:
    src = art[0] / name
    dst = Path(tempfile.mkdtemp(dir=tmp_path)) / Path(name).name
    (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    return dst


class _Payload:
    """Unpickled by a full unpickler, this would create the marker folder."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return os.mkdir, (str(self.marker),)


def _refused(path: Path, file: str, marker: Path | None = None) -> str:
    with pytest.raises(CheckpointError) as caught:
        describe(path)
    text = str(caught.value)
    assert "\n" not in text and file in text, text
    if marker is not None:
        assert not marker.exists(), "the hostile pickle ran"
    return text


# ---------------------------------------------------------------------- what each format holds
def test_dcp_written_by_fsdp2(art: tuple[Path, dict[str, Any]]) -> None:
    root, seen = art
    found = describe(root / "dcp")
    assert found.format == "torch-dcp" and found.world_size == 2
    table = {n: [list(e.shape), e.dtype] for n, e in found.parameters.items()}
    assert table == seen["params"]
    weights = torch.load(root / "dcp-weights.pt", weights_only=True)
    assert {n: e.nbytes for n, e in found.parameters.items()} == {n: t.nbytes for n, t in weights.items()}
    assert found.optimizer is not None and found.optimizer_keys == "name" and found.optimizer_groups == 1
    for name, (shape, _) in seen["params"].items():
        state = found.optimizer[name]
        assert sorted(state) == ["exp_avg", "exp_avg_sq", "step"]
        assert list(state["exp_avg"].shape) == shape and state["step"].shape == ()
    assert not found.missing and not found.inconsistent
    assert found.total_bytes == sum(t.nbytes for t in weights.values()) * 3 + 4 * len(weights)
    # The tensors DCP resharded into whole ones are the weights FSDP2 held, exactly.
    read = dict(tensors(root / "dcp"))
    assert read.keys() == weights.keys() and all(torch.equal(read[n], weights[n]) for n in weights)


def test_shardcompat_full_and_sharded(art: tuple[Path, dict[str, Any]]) -> None:
    root, seen = art
    for name, kind, options in (("own-full", "full", "zero_dp_2"), ("own-sharded", "sharded", "zero_dp_3")):
        found = describe(root / name)
        assert found.format == "shardcompat" and kind in found.title
        assert (found.world_size, found.backend, found.step) == (2, "torch-fsdp2", 1)
        assert options in found.backend_from
        assert {n: [list(e.shape), e.dtype] for n, e in found.parameters.items()} == seen["params"]
        assert found.optimizer is not None and set(found.optimizer) == set(seen["params"])
        assert not found.missing and not found.inconsistent, (found.missing, found.inconsistent)
    full, sharded = dict(tensors(root / "own-full")), dict(tensors(root / "own-sharded"))
    assert full.keys() == sharded.keys() == seen["params"].keys()


def _hf_table(seen: dict[str, Any]) -> dict[str, list[Any]]:
    return {n: v for n, v in seen["hf"]["state"].items() if n not in seen["hf"]["tied"]}


def test_trainer_checkpoint(art: tuple[Path, dict[str, Any]]) -> None:
    root, seen = art
    [folder] = (root / "trainer").glob("checkpoint-*")
    found = describe(folder)
    assert found.format == "huggingface" and found.step == 1 and found.world_size == 1
    assert {n: [list(e.shape), e.dtype, e.nbytes] for n, e in found.parameters.items()} == _hf_table(seen)
    assert found.optimizer is not None and found.optimizer_keys == "index" and found.optimizer_groups == 2
    assert len(found.optimizer) == len(seen["hf"]["params"])
    assert found.scalars["scheduler"] == "scheduler.pt" and found.scalars["rng"] == "rng_state.pth"
    assert any("training_args.bin not read" in n for n in found.notes)
    assert not found.missing and not found.inconsistent


def test_sharded_index_and_bin(art: tuple[Path, dict[str, Any]]) -> None:
    root, seen = art
    sharded, legacy, legacy_sharded = (describe(root / n) for n in ("hf-sharded", "hf-bin", "hf-bin-sharded"))
    index = json.loads((root / "hf-sharded" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 2
    assert sharded.parameter_bytes == index["metadata"]["total_size"]
    assert legacy_sharded.files[0] == "pytorch_model.bin.index.json" and len(legacy_sharded.files) == 3
    for found in (sharded, legacy, legacy_sharded):
        assert {n: [list(e.shape), e.dtype, e.nbytes] for n, e in found.parameters.items()} == _hf_table(seen)
        assert found.optimizer is None and not found.missing and not found.inconsistent
    state = dict(tensors(root / "hf-bin"))
    for folder in ("hf-sharded", "hf-bin-sharded"):
        read = dict(tensors(root / folder))
        assert read.keys() == state.keys() and all(torch.equal(read[n], state[n]) for n in state), folder


def test_zero_consolidated_optimizer(art: tuple[Path, dict[str, Any]]) -> None:
    root, seen = art
    file = root / "zero-optimizer.pt"
    found = describe(file)
    assert found.format == "torch-optimizer" and found.optimizer_keys == "index" and not found.parameters
    shapes = {n: s for n, (s, _) in seen["params"].items()}
    order = seen["order"]
    assert [list(found.optimizer[str(i)]["exp_avg"].shape) for i in range(len(order))] == [shapes[n] for n in order]
    assert any("keys its state by parameter index" in n for n in found.notes)
    state = torch.load(file, weights_only=True)
    named = names_for_indices(state, [order], shapes)
    assert list(named["state"]) == order and named["param_groups"][0]["params"] == order
    with pytest.raises(FormatError, match="parameter order is not the one"):
        names_for_indices(state, [order[::-1]], shapes)


def test_cli_inspect(art: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    root, seen = art
    assert main(["checkpoint", "inspect", str(root / "dcp"), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["format"] == "torch-dcp" and body["world_size"] == 2 and set(body["parameters"]) == set(seen["params"])
    assert main(["checkpoint", "inspect", str(root / "own-full")]) == 0
    out = capsys.readouterr().out
    assert "world size: 2" in out and "backend: torch-fsdp2" in out and "inp.weight" in out
    assert main(["checkpoint", "inspect", str(root)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a checkpoint of a format shardcompat reads" in err


def test_detection_reads_files_not_folder_names(art: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    root, _ = art
    misleading = tmp_path / "checkpoint-500"
    shutil.copytree(root / "dcp", misleading)
    assert detect(misleading).name == "torch-dcp"
    shutil.copytree(root / "hf-sharded", tmp_path / "pytorch_model_fsdp_0")
    assert detect(tmp_path / "pytorch_model_fsdp_0").name == "huggingface"


# ---------------------------------------------------------------------- hostile and damaged files
def test_hostile_pickles_never_run(art: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hf = _copy(art, "hf-bin", tmp_path)
    torch.save({"w": _Payload(marker)}, hf / "pytorch_model.bin")
    assert "cannot be read safely" in _refused(hf, "pytorch_model.bin", marker)
    [folder] = (art[0] / "trainer").glob("checkpoint-*")
    for name in ("optimizer.pt", "scheduler.pt"):
        trainer = tmp_path / f"trainer-{name}"
        shutil.copytree(folder, trainer)
        torch.save(_Payload(marker), trainer / name)
        _refused(trainer, name, marker)
    zero = _copy(art, "zero-optimizer.pt", tmp_path)
    torch.save({"state": {0: _Payload(marker)}, "param_groups": []}, zero)
    with pytest.raises(CheckpointError) as caught:  # not even recognised: nothing ran to find out
        describe(zero)
    assert str(zero) in str(caught.value) and not marker.exists()
    dcp = _copy(art, "dcp", tmp_path)
    (dcp / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    assert "which torch does not write" in _refused(dcp, ".metadata", marker)


def test_safetensors_damaged(art: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    folder = _copy(art, "hf-sharded", tmp_path)
    shard = folder / "model-00002-of-00002.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])  # truncated
    assert "truncated" in _refused(folder, shard.name)
    length = int.from_bytes(data[:8], "little")
    head = json.loads(data[8 : 8 + length])
    name = next(k for k in head if k != "__metadata__")
    head[name]["shape"] = [1 << 40, 1 << 20]  # declared far beyond its bytes: refused before allocating
    raw = json.dumps(head).encode()
    shard.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + length :])
    assert "declares shape" in _refused(folder, shard.name)
    shard.write_bytes(data[:8] + b"\xff" * length + data[8 + length :])  # corrupted header
    assert "not a readable safetensors file" in _refused(folder, shard.name)
    shard.write_bytes(b"just some text that is not a checkpoint\n" * 4)  # foreign
    assert "not a readable safetensors file" in _refused(folder, shard.name)


def test_index_paths_stay_in_the_folder(art: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    folder = _copy(art, "hf-sharded", tmp_path)
    index = folder / "model.safetensors.index.json"
    body = json.loads(index.read_text())
    outside = tmp_path / "outside.safetensors"
    shutil.copy2(folder / "model-00001-of-00002.safetensors", outside)
    for target in ("../outside.safetensors", str(outside)):
        changed = {**body, "weight_map": {k: target for k in body["weight_map"]}}
        index.write_text(json.dumps(changed))
        assert "not a path inside the directory" in _refused(folder, repr(target))
    index.write_text(json.dumps(body))
    shard = folder / "model-00001-of-00002.safetensors"
    shard.unlink()
    shard.symlink_to(outside)
    assert "symbolic link" in _refused(folder, shard.name)
    shard.unlink()
    found = describe(folder)  # a shard gone: named once, with what it held
    assert [m for m in found.missing if shard.name in m] == [
        f"{shard.name}: a shard model.safetensors.index.json names "
        f"({sum(v == shard.name for v in body['weight_map'].values())} tensors) is not in the folder"
    ]
    index.write_text("{not json")
    assert "cannot be read as JSON" in _refused(folder, index.name)


def test_torch_files_damaged(art: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    hf = _copy(art, "hf-bin", tmp_path)
    weights = hf / "pytorch_model.bin"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    _refused(hf, weights.name)
    weights.write_bytes(data[:64] + bytes(b ^ 0x5A for b in data[64:]))
    _refused(hf, weights.name)
    weights.write_bytes(b"PK\x03\x04 a zip header and nothing of torch's")
    _refused(hf, weights.name)
    [folder] = (art[0] / "trainer").glob("checkpoint-*")
    trainer = tmp_path / "trainer"
    shutil.copytree(folder, trainer)
    optimizer = trainer / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])
    _refused(trainer, "optimizer.pt")
    torch.save({"weights": torch.zeros(3)}, optimizer)  # a foreign torch file where the optimizer goes
    assert "is not an optimizer state" in _refused(trainer, "optimizer.pt")
    (trainer / "trainer_state.json").write_text('{"global_step": "many"}')
    assert "not a Trainer state" in _refused(trainer, "trainer_state.json")


def test_dcp_damaged(art: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    from shardcompat.checkpoint._dcp_metadata import read_metadata

    dcp = _copy(art, "dcp", tmp_path)
    metadata = (dcp / ".metadata").read_bytes()
    shard = dcp / "__1_0.distcp"
    whole = shard.read_bytes()
    shard.write_bytes(whole[: len(whole) // 2])  # truncated: reported per chunk, and reading refuses
    found = describe(dcp)
    assert found.inconsistent and all("__1_0.distcp" in line and "truncated" in line for line in found.inconsistent)
    with pytest.raises(FormatError, match=r"__1_0\.distcp"):
        dict(tensors(dcp))
    assert main(["checkpoint", "inspect", str(dcp)]) == 1
    shard.write_bytes(whole)
    meta = read_metadata(dcp)
    entry = meta.state_dict_metadata["model.inp.weight"]
    entry.size = torch.Size([1 << 30, 1 << 10])  # declared larger than its shards
    entry.chunks[0].sizes = torch.Size([1 << 29, 1 << 10])
    (dcp / ".metadata").write_bytes(pickle.dumps(meta))
    found = describe(dcp)
    assert any("'model.inp.weight' declares" in line for line in found.inconsistent)
    with pytest.raises(FormatError, match="declares"):
        dict(tensors(dcp))
    (dcp / ".metadata").write_bytes(metadata[:40] + bytes(b ^ 0x33 for b in metadata[40:]))  # corrupted
    _refused(dcp, ".metadata")
    (dcp / ".metadata").write_bytes(metadata[: len(metadata) // 3])  # truncated
    _refused(dcp, ".metadata")
    (dcp / ".metadata").write_bytes(pickle.dumps({"not": "metadata"}))  # foreign
    assert "not DCP's Metadata" in _refused(dcp, ".metadata")
    (dcp / ".metadata").unlink()
    (tmp_path / "elsewhere").write_bytes(metadata)
    (dcp / ".metadata").symlink_to(tmp_path / "elsewhere")
    assert "symbolic link" in _refused(dcp, ".metadata")


def test_own_format_damaged(art: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    own = _copy(art, "own-full", tmp_path)
    model = own / "model.pt"
    data = model.read_bytes()
    model.write_bytes(data[: len(data) // 2])
    assert "truncated" in _refused(own, "model.pt")
    model.write_bytes(data[:-10] + bytes(b ^ 1 for b in data[-10:]))
    assert "corrupted" in _refused(own, "model.pt")


# ---------------------------------------------------------------------- loading foreign weights
OPTIONS = {"torch-fsdp2": "zero_dp_3", "torch-zero": "zero_dp_1"}  # sharded parameters; plain DDP + ZeRO

def _load_ranks(rank: int, world: int, root: str, backends: dict[str, list[str]]) -> dict[str, Any]:
    """Each backend loads the Hugging Face folders and the DCP folder into a model built from
    another seed; the full state afterwards is returned for the parent to compare exactly."""
    import functools
    import warnings

    from transformers import GPT2Config, GPT2LMHeadModel

    import shardcompat
    from tests.checkpoint._artifacts import Net

    base = Path(root)
    [trainer] = (base / "trainer").glob("checkpoint-*")
    out: dict[str, Any] = {}
    adam = functools.partial(torch.optim.AdamW, lr=1e-3)
    folders = {"hf-sharded": base / "hf-sharded", "hf-bin": base / "hf-bin", "trainer": trainer}
    for backend, names in backends.items():
        options = OPTIONS[backend]
        for name in names:
            folder = folders[name]
            torch.manual_seed(1234 + rank)
            model = GPT2LMHeadModel(GPT2Config.from_pretrained(base / "hf-sharded"))
            prepared = shardcompat.prepare(model, optimizer=adam, options=options, backend=backend)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = prepared.load_checkpoint(folder)
            said = [str(w.message) for w in caught if "restored the model weights" in str(w.message)]
            out[f"{backend}/{name}"] = (prepared.full_state_dict(), result, said)
        torch.manual_seed(99)
        prepared = shardcompat.prepare(Net(), optimizer=adam, options=options, backend=backend)
        before = prepared.full_state_dict()
        try:  # another model's weights: refused, the model unchanged
            prepared.load_checkpoint(base / "hf-sharded")
            refused = ""
        except CheckpointError as error:
            refused = str(error)
        after = prepared.full_state_dict()  # collective; rank 0 gets the state
        unchanged = all(torch.equal(before[k], v) for k, v in after.items())
        out[f"{backend}/refused"] = (refused, unchanged)
        prepared.load_checkpoint(base / "dcp")
        out[f"{backend}/dcp"] = (prepared.full_state_dict(), None, [])
    return out if rank == 0 else {}


def test_load_checkpoint_of_other_formats(art: tuple[Path, dict[str, Any]]) -> None:
    from shardcompat.launch import spawn

    root, _ = art
    backends = {"torch-fsdp2": ["hf-sharded", "hf-bin", "trainer"], "torch-zero": ["trainer"]}
    got = spawn(_load_ranks, 2, (str(root), backends), timeout=200)[0]
    source = torch.load(root / "hf-bin" / "pytorch_model.bin", weights_only=True)
    source["lm_head.weight"] = source["transformer.wte.weight"]  # tied: save_pretrained writes it once
    dcp = torch.load(root / "dcp-weights.pt", weights_only=True)
    for backend, names in backends.items():
        for name in names:
            state, result, said = got[f"{backend}/{name}"]
            assert state.keys() == source.keys()
            assert all(torch.equal(state[k], source[k]) for k in source), (backend, name)
            assert result["restored"] == ["model"] and result["format"] == "huggingface"
            if name == "trainer":  # what it holds beyond the weights is named, not restored silently
                assert len(said) == 1 and all(w in said[0] for w in ("optimizer state", "step 1", "scheduler", "rng"))
                assert result["step"] == 0 and len(result["not_restored"]) == 4
            else:
                assert not said and result["not_restored"] == []
        state, _, _ = got[f"{backend}/dcp"]
        assert state.keys() == dcp.keys() and all(torch.equal(state[k], dcp[k]) for k in dcp), backend
        refused, unchanged = got[f"{backend}/refused"]
        assert "different model" in refused and "hf-sharded" in refused and "\n" not in refused and unchanged
