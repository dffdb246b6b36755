"""A checkpoint someone hands you cannot act outside itself: attacks that must fail.

Real checkpoints (torch-fsdp2, full and sharded, 2 gloo ranks) are copied and turned into
attacks beside an ``outside`` folder that stands for the rest of the machine:

* a recovery journal that plants and deletes files through a symlinked folder, stages an
  outside folder (whose removal would delete it whole), or stages through a link;
* files and folders of the checkpoint that are links to files outside (``model.pt``, ``rng``,
  ``manifest.json``, a shard);
* a sharded checkpoint whose ``.metadata`` is a pickle calling ``os.system`` (its checksum
  rewritten, so only the unpickler stands between it and the shell).

Every entry point is tried: ``load_checkpoint`` on both ranks, a save into the folder (the only
caller allowed to finish a journal), ``checkpoint verify`` and ``checkpoint consolidate``, and
``--resume auto`` over a folder of such step-N checkpoints.  Each must refuse with one line
naming the file, and afterwards ``outside`` is byte-identical and nothing ran.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from shardcompat import cli
from shardcompat.checkpoint import CheckpointError
from shardcompat.launch import spawn
from shardcompat.train.resume import complete_checkpoints
from tests.test_checkpoint import _prepare, _skip_unavailable, _train
from tests.test_checkpoint_safety import _rehash, _tree

pytestmark = [pytest.mark.slow, *_skip_unavailable("torch-fsdp2")]

STAGING = ".shardcompat-staging-0123456789ab"  # a name of the kind the writer stages under
OUTSIDE = {"important.txt": b"the user's file outside", "victimdir/keep.txt": b"a folder outside", "model.pt": b""}


class _Hostile:
    """Unpickling this runs ``touch MARKER``: what an attacker's pickle does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _journal(folder: Path, journal: dict[str, Any]) -> None:
    (folder / ".shardcompat-commit.json").write_text(json.dumps(journal))


def _craft(root: Path) -> dict[str, Path]:
    """The attacked copies of ``root/full`` and ``root/sharded``, by label (rank 0)."""
    outside = root / "outside"
    for rel, data in OUTSIDE.items():
        (outside / rel).parent.mkdir(parents=True, exist_ok=True)
        (outside / rel).write_bytes(data)
    shutil.copy2(root / "full" / "model.pt", outside / "model.pt")  # the same bytes: checksums pass
    attacks: dict[str, Path] = {}

    def copy(label: str, kind: str = "full") -> Path:
        folder = root / "attacks" / label
        shutil.copytree(root / kind, folder, symlinks=True)
        attacks[label] = folder
        return folder

    for label, staging in (("journal-link", "stg"), ("journal-link-ours", STAGING)):
        folder = copy(label)  # the attack: plant out/planted.sh, delete out/important.txt
        (folder / "out").symlink_to(outside, target_is_directory=True)
        (folder / staging / "out").mkdir(parents=True)
        (folder / staging / "out" / "planted.sh").write_text("echo owned\n")
        _journal(folder, {"staging": staging, "add": ["out/planted.sh"], "remove": ["out/important.txt"]})
    folder = copy("journal-stages-outside")  # finishing it would remove outside/victimdir whole
    (folder / "out").symlink_to(outside, target_is_directory=True)
    _journal(folder, {"staging": "out/victimdir", "add": [], "remove": []})
    folder = copy("journal-staging-link")  # our staging name, but a link to the outside folder
    (folder / STAGING).symlink_to(outside / "victimdir", target_is_directory=True)
    _journal(folder, {"staging": STAGING, "add": ["keep.txt"], "remove": []})
    folder = copy("journal-removes-users-file")  # inside the folder, but not a file the checkpoint owns
    (folder / "notes.txt").write_text("the user's notes")
    (folder / STAGING).mkdir()
    _journal(folder, {"staging": STAGING, "add": [], "remove": ["notes.txt"]})

    folder = copy("model-link")
    (folder / "model.pt").unlink()
    (folder / "model.pt").symlink_to(outside / "model.pt")
    folder = copy("rng-link")
    shutil.move(folder / "rng", outside / "rng")
    (folder / "rng").symlink_to(outside / "rng", target_is_directory=True)
    folder = copy("manifest-link")
    shutil.move(folder / "manifest.json", outside / "manifest.json")
    (folder / "manifest.json").symlink_to(outside / "manifest.json")

    folder = copy("metadata-hostile", "sharded")
    (folder / ".metadata").write_bytes(pickle.dumps(_Hostile(root / "PWNED")))
    _rehash(folder)
    folder = copy("shard-link", "sharded")
    shard = next(folder.glob("*.distcp"))
    shutil.move(shard, outside / shard.name)
    shard.symlink_to(outside / shard.name)
    return attacks


def _phase(rank: int, world: int, root_arg: str) -> dict[str, Any]:
    root = Path(root_arg)
    prepared, scheduler = _prepare("torch-fsdp2")
    _train(prepared, scheduler, 0, 1)
    prepared.save_checkpoint(root / "full", step=1)
    prepared.save_checkpoint(root / "sharded", step=1, sharded=True)
    labels: list[Any] = [None]
    if rank == 0:
        labels = [sorted(_craft(root))]
        (root / "outside.json").write_text(json.dumps({k: v.hex() for k, v in _tree(root / "outside").items()}))
    dist.broadcast_object_list(labels, src=0)
    out: dict[str, Any] = {}
    for label in labels[0]:
        folder = root / "attacks" / label
        for action in ("load", "save"):
            try:
                if action == "load":
                    prepared.load_checkpoint(folder)
                elif label.startswith("journal"):  # a writer may finish a journal: only a sound one
                    prepared.save_checkpoint(folder, step=1)
                else:
                    continue
                out[label, action] = "(no error)"
            except CheckpointError as error:
                out[label, action] = f"{type(error).__name__}: {error}"
    return out


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("attacks")
    ranks = spawn(_phase, 2, (str(root),), timeout=300)
    before = {k: bytes.fromhex(v) for k, v in json.loads((root / "outside.json").read_text()).items()}
    return {"root": root, "ranks": ranks, "before": before}


# label: what the one-line refusal says
REFUSAL = {
    "journal-link": "stopped while moving its files into place",
    "journal-link-ours": "stopped while moving its files into place",
    "journal-stages-outside": "stopped while moving its files into place",
    "journal-staging-link": "stopped while moving its files into place",
    "journal-removes-users-file": "stopped while moving its files into place",
    "model-link": "model.pt is a symbolic link",
    "rng-link": "rng is a symbolic link",
    "manifest-link": "manifest.json is not a regular file",
    "metadata-hostile": ".metadata cannot be read as DCP metadata: it names posix.system",
    "shard-link": ".distcp is a symbolic link",
}
# what the writer (save into the folder) says of each journal: it refuses to finish it
WRITER = {
    "journal-link": "its staging 'stg' is not a staging folder of this writer",
    "journal-link-ours": "out is a symbolic link",
    "journal-stages-outside": "its staging 'out/victimdir' is not a staging folder of this writer",
    "journal-staging-link": f"{STAGING} is a symbolic link",
    "journal-removes-users-file": "it removes ['notes.txt'], which the old manifest does not list",
}


def _assert_untouched(attacked: dict[str, Any]) -> None:
    root = attacked["root"]
    assert _tree(root / "outside") == attacked["before"], "a file outside the checkpoint changed"
    assert not (root / "PWNED").exists(), "the hostile pickle ran"


@pytest.mark.parametrize("label", sorted(REFUSAL))
def test_load_refuses_the_attack_on_every_rank(attacked: dict[str, Any], label: str) -> None:
    for rank, result in enumerate(attacked["ranks"]):
        message = result[label, "load"]
        assert message.startswith("CheckpointError: ") and REFUSAL[label] in message, f"rank {rank}: {message}"
        assert "\n" not in message
    _assert_untouched(attacked)


@pytest.mark.parametrize("label", sorted(WRITER))
def test_a_save_into_the_folder_does_not_finish_a_journal_it_could_not_have_written(
    attacked: dict[str, Any], label: str
) -> None:
    message = attacked["ranks"][0][label, "save"]
    assert message.startswith("WriteRefused: ") and WRITER[label] in message, message
    assert attacked["ranks"][1][label, "save"] == message.replace(": ", ": on rank 0: ", 1)
    folder = attacked["root"] / "attacks" / label
    assert (folder / ".shardcompat-commit.json").exists(), "the refused journal was removed"
    if label == "journal-removes-users-file":
        assert (folder / "notes.txt").read_text() == "the user's notes"
    _assert_untouched(attacked)


@pytest.mark.parametrize("label", sorted(REFUSAL))
def test_checkpoint_verify_refuses_what_load_refuses(
    attacked: dict[str, Any], label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = attacked["root"] / "attacks" / label
    assert cli.main(["checkpoint", "verify", str(folder)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and REFUSAL[label] in err, err
    _assert_untouched(attacked)


@pytest.mark.parametrize("label", ["metadata-hostile", "shard-link"])
def test_consolidate_refuses_hostile_shards_unexecuted(
    attacked: dict[str, Any], label: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = attacked["root"] / "attacks" / label
    assert cli.main(["checkpoint", "consolidate", str(folder), str(tmp_path / "full")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and REFUSAL[label] in err, err
    assert not (tmp_path / "full").exists() and not list(tmp_path.iterdir()), "consolidate wrote something"
    _assert_untouched(attacked)


def test_resume_auto_skips_every_attack_for_the_newest_sound_checkpoint(attacked: dict[str, Any], tmp_path: Path) -> None:
    """The attacks as step-2 ... step-N of a run, newer than its sound step-1: all passed over."""
    attacks = sorted(REFUSAL)
    shutil.copytree(attacked["root"] / "full", tmp_path / "step-1", symlinks=True)
    for n, label in enumerate(attacks, start=2):
        shutil.copytree(attacked["root"] / "attacks" / label, tmp_path / f"step-{n}", symlinks=True)
    assert complete_checkpoints(tmp_path) == [(1, tmp_path / "step-1")]
    for n, label in enumerate(attacks, start=2):  # reading changed none of them
        assert _tree(tmp_path / f"step-{n}") == _tree(attacked["root"] / "attacks" / label), label
    _assert_untouched(attacked)
