"""Checkpoints never destroy what they did not write, and a broken one changes nothing.

One spawn of 2 gloo ranks runs every backend that can run here (the others skip by probe):

* ``save_checkpoint`` into a run's output folder keeps the user's files and folders
  byte-identical, saving again (full, then sharded where the backend writes it) replaces the
  earlier checkpoint's files and nothing else, and a user's own ``model.pt`` is refused before
  anything is written;
* a truncated, corrupted or foreign file, a manifest that does not match, a checkpoint of a
  different model (names or shapes): one line naming the file and what is wrong, and the model,
  the optimizer (a trained one, and a fresh one that DCP would otherwise give state), the step
  and the scheduler exactly as before the call.

``consolidate`` runs in this process: every overlap of SRC and DST is refused (exit 2 from the
CLI) before anything is written.  Kills of real saves at many points: tests/reliability.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from shardcompat._atomic import file_digests
from shardcompat.checkpoint import CheckpointError, WriteRefused, consolidate, read_manifest
from shardcompat.launch import spawn
from shardcompat.prepared import _local_optimizer
from tests._parity import build_model
from tests.test_checkpoint import (
    AVAILABLE,
    BACKENDS,
    SHARDED_WRITERS,
    UNAVAILABLE,
    _prepare,
    _skip_unavailable,
    _train,
    _WideMLP,
)

pytestmark = pytest.mark.slow

USER = {
    "notes.txt": b"the user's notes",
    "logs/run.log": b"step 1 loss 0.5\n",
    "rng/mine.txt": b"the user's file in a folder the checkpoint also uses",
}

# label: (checkpoint kind it damages, what the one-line message must contain)
DAMAGE = {
    "truncated": ("full", "model.pt: "),
    "flipped": ("full", "optimizer.pt: sha256 differs from the manifest (corrupted)"),
    "foreign-model": ("full", "model.pt does not match its manifest.json: shapes differ: "),
    "not-torch": ("full", "optimizer.pt cannot be read"),
    "foreign-trainer": ("full", "trainer.pt is not a trainer state"),
    "manifest-kind": ("full", "manifest.json lists no .metadata, which a sharded checkpoint has"),
    "manifest-json": ("full", "manifest.json is not valid JSON"),
    "wrong-model": ("full", "manifest.json: the checkpoint is of a different model: missing from the checkpoint: blocks."),
    "wrong-shape": ("full", "net.2.weight: checkpoint (32, 32), model (24, 32)"),
    "shard-truncated": ("sharded", "__0_0.distcp: "),
    "foreign-shards": ("sharded", ".metadata does not match its manifest.json: shapes differ: "),
    "wrong-shape-sharded": ("sharded", "net.2.weight: checkpoint (32, 32), model (24, 32)"),
}


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _rehash(path: Path, **changes: Any) -> None:
    """Rewrite a checkpoint's manifest so that its checksums fit the files as they are now:
    what a foreign file that a careless copy brought along with its own manifest looks like."""
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(files=file_digests(path), **changes)
    (path / "manifest.json").write_text(json.dumps(manifest))


def _damage(root: Path, full: Path, sharded: Path | None, wide_full: Path, wide_sharded: Path | None) -> dict[str, Path]:
    """Rank 0 makes damaged copies; the label's kind says which good checkpoint it starts from."""
    import shutil

    cases: dict[str, Path] = {}
    for label, (kind, _) in DAMAGE.items():
        source = full if kind == "full" else sharded
        if source is None:
            continue
        copy = root / f"bad-{label}"
        shutil.copytree(source, copy)
        cases[label] = copy
    if "truncated" in cases:
        model = cases["truncated"] / "model.pt"
        model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
        optim = cases["flipped"] / "optimizer.pt"
        data = bytearray(optim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        optim.write_bytes(bytes(data))
        shutil.copy(wide_full / "model.pt", cases["foreign-model"] / "model.pt")
        _rehash(cases["foreign-model"])
        (cases["not-torch"] / "optimizer.pt").write_bytes(b"not a torch file at all\n")
        _rehash(cases["not-torch"])
        torch.save([1, 2, 3], cases["foreign-trainer"] / "trainer.pt")
        _rehash(cases["foreign-trainer"])
        _rehash(cases["manifest-kind"], kind="sharded")
        (cases["manifest-json"] / "manifest.json").write_text('{"format": "shardcompat-checkpoint", "files"')
    if "shard-truncated" in cases and wide_sharded is not None:
        shard = cases["shard-truncated"] / "__0_0.distcp"
        shard.write_bytes(shard.read_bytes()[:100])
        table = json.loads((cases["foreign-shards"] / "manifest.json").read_text())["model"]
        shutil.rmtree(cases["foreign-shards"])
        shutil.copytree(wide_sharded, cases["foreign-shards"])
        _rehash(cases["foreign-shards"], model=table)  # the MLP's table over the wide model's shards
    return cases


def _snapshot(prepared: Any, scheduler: Any, optimizer: bool) -> dict[str, Any]:
    """Model, step, scheduler and the optimizer: its consolidated state, or (``optimizer``
    False, for a fresh one: asking for its state dict gives it state) how many entries it has."""
    out = {"optimizer": prepared.optimizer_state_dict(rank0_only=False)} if optimizer else {}
    out["local_state"] = len(_local_optimizer(prepared.optimizer).state)
    return {**out, "model": prepared.full_state_dict(rank0_only=False), "step": prepared.step_count,
            "lr": scheduler.get_last_lr()}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _writers(rank: int, name: str, root: Path) -> dict[str, Any]:
    """Save into a folder with the user's files: full, again, then sharded where served."""
    out: dict[str, Any] = {}
    folder = root / "out"
    if rank == 0:
        for rel, data in USER.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        (root / "taken").mkdir()
        (root / "taken" / "model.pt").write_bytes(b"the user's own model.pt")
        (root / "taken-sharded").mkdir()  # a sharded save writes no model.pt, but a manifest
        (root / "taken-sharded" / "manifest.json").write_bytes(b"the user's own manifest.json")
    dist.barrier()
    prepared, scheduler = _prepare(name)
    _train(prepared, scheduler, 0, 1)
    prepared.save_checkpoint(folder, step=1, scheduler=scheduler)
    out["after_first"] = _tree(folder) if rank == 0 else None
    _train(prepared, scheduler, 1, 2)
    prepared.save_checkpoint(folder, step=2, scheduler=scheduler)
    out["after_second"] = _tree(folder) if rank == 0 else None
    if name in SHARDED_WRITERS:
        prepared.save_checkpoint(folder, step=3, scheduler=scheduler, sharded=True)
        out["after_sharded"] = _tree(folder) if rank == 0 else None
    for key, sharded in [("taken", False), ("taken_sharded", True)][: 2 if name in SHARDED_WRITERS else 1]:
        try:
            prepared.save_checkpoint(root / key.replace("_", "-"), scheduler=scheduler, sharded=sharded)
            out[key] = "(no error)"
        except CheckpointError as error:
            out[key] = f"{type(error).__name__}: {error}"
    out["taken_tree"] = _tree(root / "taken") if rank == 0 else None
    again, again_sched = _prepare(name, seed=1)
    out["loaded"] = again.load_checkpoint(folder, scheduler=again_sched)
    return out


def _breakage(rank: int, name: str, root: Path) -> dict[tuple[str, bool], Any]:
    out: dict[tuple[str, bool], Any] = {}
    prepared, scheduler = _prepare(name)
    _train(prepared, scheduler, 0, 1)
    full, sharded = root / "good-full", root / "good-sharded"
    prepared.save_checkpoint(full, scheduler=scheduler)
    wide, wide_sched = _prepare(name, model=_WideMLP())
    _train(wide, wide_sched, 0, 1)
    wide.save_checkpoint(root / "wide-full", scheduler=wide_sched)
    if name in SHARDED_WRITERS:
        prepared.save_checkpoint(sharded, sharded=True, scheduler=scheduler)
        wide.save_checkpoint(root / "wide-sharded", sharded=True, scheduler=wide_sched)
    has_sharded = name in SHARDED_WRITERS
    cases = _damage(
        root, full, sharded if has_sharded else None, root / "wide-full", root / "wide-sharded" if has_sharded else None
    ) if rank == 0 else {}
    box = [cases]
    dist.broadcast_object_list(box)
    cases = box[0]
    for label, path in cases.items():
        for fresh in (False, True):  # a trained optimizer, and one without state yet
            model = _WideMLP() if label.startswith("wrong-shape") else build_model("blocks") if label == "wrong-model" else None
            target, target_sched = _prepare(name, model=model)
            if not fresh and label != "wrong-model":  # (the blocks model takes tokens, not the MLP's data)
                _train(target, target_sched, 0, 2)
            before = _snapshot(target, target_sched, optimizer=not fresh)
            try:
                target.load_checkpoint(path, scheduler=target_sched)
                message = "(no error)"
            except CheckpointError as error:
                message = str(error)
            after = _snapshot(target, target_sched, optimizer=not fresh)
            out[(label, fresh)] = {"message": message, "unchanged": _same(before, after)}
    return out


def _phase(rank: int, world: int, root: str, names: list[str]) -> dict[str, Any]:
    torch.manual_seed(0)
    out: dict[str, Any] = {}
    for name in names:
        base = Path(root, name)
        out[name] = {"writers": _writers(rank, name, base / "writers"), "broken": _breakage(rank, name, base / "broken")}
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not AVAILABLE:
        pytest.skip(f"no backend can run here: {UNAVAILABLE}")
    root = tmp_path_factory.mktemp("safety")
    for name in AVAILABLE:
        (root / name / "writers").mkdir(parents=True)
        (root / name / "broken").mkdir(parents=True)
    results = spawn(_phase, 2, (str(root), AVAILABLE), timeout=420)
    return {"root": root, "ranks": results}


_EACH = [pytest.param(n, marks=_skip_unavailable(n)) for n in BACKENDS]


@pytest.mark.parametrize("name", _EACH)
def test_saving_into_a_folder_keeps_the_users_files(runs: dict[str, Any], name: str) -> None:
    got = runs["ranks"][0][name]["writers"]
    keys = ["after_first", "after_second"] + (["after_sharded"] if name in SHARDED_WRITERS else [])
    for key in keys:
        tree = got[key]
        assert {rel: tree.get(rel) for rel in USER} == USER, f"{key}: the user's files changed"
        assert not [rel for rel in tree if rel.startswith(".shardcompat-")], f"{key}: leftovers"
    assert got["after_first"]["model.pt"] != got["after_second"]["model.pt"], "the second save did not replace"
    ours = {rel for rel in got["after_second"] if rel not in USER}
    assert ours == {"manifest.json", "model.pt", "optimizer.pt", "trainer.pt", "rng/rank-00000.pt", "rng/rank-00001.pt"}
    if name in SHARDED_WRITERS:  # the sharded save replaced the full checkpoint's files, only those
        after = got["after_sharded"]
        assert "model.pt" not in after and "optimizer.pt" not in after and ".metadata" in after
        assert got["loaded"]["step"] == 3
    else:
        assert got["loaded"]["step"] == 2


@pytest.mark.parametrize("name", _EACH)
def test_a_users_file_where_the_checkpoint_goes_is_refused_before_anything_is_written(
    runs: dict[str, Any], name: str
) -> None:
    """Every rank raises WriteRefused with rank 0's message (the others prefix "on rank 0:"):
    ``except WriteRefused`` must work on every rank, not on rank 0 alone."""
    for key in ("taken", "taken_sharded") if name in SHARDED_WRITERS else ("taken",):
        first, second = (result[name]["writers"][key] for result in runs["ranks"])
        assert first.startswith("WriteRefused: ") and "\n" not in first, first
        says = ("manifest.json exists and is not the manifest of an earlier" if key == "taken_sharded"
                else "model.pt exists and was not written by the earlier write")
        assert says in first, first
        assert second == first.replace("WriteRefused: ", "WriteRefused: on rank 0: ", 1), (key, second)
    assert runs["ranks"][0][name]["writers"]["taken_tree"] == {"model.pt": b"the user's own model.pt"}


def _damage_params() -> list[Any]:
    return [
        pytest.param(name, label, id=f"{name}-{label}", marks=_skip_unavailable(name))
        for name in BACKENDS
        for label, (kind, _) in DAMAGE.items()
        if kind == "full" or name in SHARDED_WRITERS
    ]


@pytest.mark.parametrize(("name", "label"), _damage_params())
def test_a_broken_checkpoint_is_refused_on_one_line_and_changes_nothing(
    runs: dict[str, Any], name: str, label: str
) -> None:
    expected = DAMAGE[label][1]
    for rank, result in enumerate(runs["ranks"]):
        for fresh in (False, True):
            got = result[name]["broken"][(label, fresh)]
            message = got["message"]
            assert expected in message, f"rank {rank}: {message}"
            assert "\n" not in message, f"rank {rank}: not one line: {message!r}"
            if rank == 0:
                assert f"bad-{label}" in message, f"the message does not name the checkpoint's file: {message}"
            state = "a fresh" if fresh else "a trained"
            assert got["unchanged"], f"rank {rank}: {label} changed {state} model/optimizer/step/scheduler"


# ------------------------------------------------------------------ consolidate, in this process
@pytest.fixture(scope="module")
def sharded_source(runs: dict[str, Any]) -> Path:
    writers = [n for n in AVAILABLE if n in SHARDED_WRITERS]
    if not writers:
        pytest.skip("no backend here writes sharded checkpoints")
    return Path(runs["root"], writers[0], "broken", "good-sharded")


def _overlaps(src: Path, tmp: Path) -> dict[str, tuple[Path, Path, str]]:
    import shutil

    parent = tmp / "par"
    shutil.copytree(src, parent / "src")
    (parent / "user.txt").write_text("the user's")
    (tmp / "link").symlink_to(parent / "src")
    return {
        "same": (parent / "src", parent / "src", "is the source"),
        "dst-inside-src": (parent / "src", parent / "src" / "full", "is inside the source"),
        "src-inside-dst": (parent / "src", parent, "holds the source"),
        "dst-links-to-src": (parent / "src", tmp / "link", "is the source"),
        "dst-inside-linked-src": (tmp / "link", parent / "src" / "x", "is inside the source"),
    }


@pytest.mark.parametrize("case", ["same", "dst-inside-src", "src-inside-dst", "dst-links-to-src", "dst-inside-linked-src"])
def test_consolidate_refuses_every_overlap_before_writing(
    sharded_source: Path, tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardcompat import cli

    src, dst, why = _overlaps(sharded_source, tmp_path)[case]
    before = _tree(tmp_path)
    with pytest.raises(WriteRefused, match=why):
        consolidate(src, dst)
    assert cli.main(["checkpoint", "consolidate", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert why in err and "choose a destination outside" in err and err.count("\n") == 1, err
    assert _tree(tmp_path) == before, "a refused consolidate wrote something"
    assert not (tmp_path / "par" / "src" / "full").exists()


def test_consolidate_into_a_folder_keeps_the_users_files(sharded_source: Path, tmp_path: Path) -> None:
    dst = tmp_path / "exports"
    (dst / "README").parent.mkdir()
    (dst / "README").write_text("the user's")
    consolidate(sharded_source, dst)
    consolidate(sharded_source, dst)  # again: replaces its own files only
    assert (dst / "README").read_text() == "the user's"
    assert read_manifest(dst)["kind"] == "full"
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "manifest.json").write_text("{}")
    with pytest.raises(WriteRefused, match=r"manifest\.json exists and is not the manifest"):
        consolidate(sharded_source, tmp_path / "taken")
    assert os.listdir(tmp_path / "taken") == ["manifest.json"]


