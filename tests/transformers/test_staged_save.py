"""Under ``shardcompat run`` a Trainer's ``checkpoint-N`` appears only complete (issue 29 §3).

The stock Trainer writes into ``checkpoint-N`` directly and a restarted 4.x script's
``get_last_checkpoint`` takes the highest-numbered folder, half-written or not.  This test
watches the output folder of an unmodified legacy script on 2 ranks saving every step: the
listing taken the moment each checkpoint appears must already be its whole final content, the
model loads from it, and no staging folder is left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_legacy_scripts import SCRIPT_ASSETS, SCRIPTS, _clm_assets

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
pytestmark = [
    pytest.mark.skipif("run_clm_datasets_legacy.py" not in SCRIPT_ASSETS, reason="the script needs `datasets`"),
    pytest.mark.slow, pytest.mark.timeout(600),
]

STEPS = 3


def _listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_each_trainer_checkpoint_appears_with_every_rank_s_files_in_it(tmp_path: Path) -> None:
    data = _clm_assets(tmp_path)
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "shardcompat", "run", "--nproc", "2", str(SCRIPTS / "run_clm_datasets_legacy.py"),
        *data, "--do_train", "--per_device_train_batch_size", "2", "--learning_rate", "5e-3", "--report_to", "none",
        "--disable_tqdm", "true", "--seed", "0", "--save_strategy", "steps", "--save_steps", "1", "--no_cuda",
        "--max_steps", str(STEPS), "--output_dir", str(out), "--sharded_ddp", "zero_dp_3 auto_wrap",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    seen: dict[str, dict[str, int]] = {}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as job:
        deadline = time.monotonic() + 540
        while job.poll() is None and time.monotonic() < deadline:
            if out.is_dir():
                for entry in out.iterdir():
                    if entry.name.startswith("checkpoint-") and entry.name not in seen:
                        seen[entry.name] = _listing(entry)  # at once: what a restarted job would find now
            time.sleep(0.002)
        if job.poll() is None:
            job.kill()
        output = job.communicate()[0]
    assert job.returncode == 0, output[-4000:]
    assert sorted(seen) == [f"checkpoint-{n}" for n in range(1, STEPS + 1)], output[-2000:]
    for name, at_appearance in seen.items():
        final = _listing(out / name)
        assert {"trainer_state.json", "rng_state_0.pth", "rng_state_1.pth"} <= final.keys(), final
        assert any(k.startswith("shardcompat/") for k in final), final  # the portable checkpoint, both ranks
        assert at_appearance == final, f"{name} appeared before it was complete"
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no staging left
    transformers.AutoModelForCausalLM.from_pretrained(out / f"checkpoint-{STEPS}")


def _folder(path: Path, content: str) -> Path:
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(content)
    return path


@pytest.mark.parametrize("stale", [False, True], ids=["fresh", "stale-folder-there"])
def test_two_nodes_committing_one_shared_folder_leave_the_checkpoint_in_place(tmp_path: Path, stale: bool) -> None:
    """Each node's first process commits; on a shared filesystem the second finds the staging
    folder already renamed (seen in the 2x2 multinode test: the checkpoint ended up moved aside)."""
    from shardcompat.transformers._staged_save import _commit

    new, final = tmp_path / ".checkpoint-4.staging" / "checkpoint-4", tmp_path / "checkpoint-4"
    _folder(new, "new")
    if stale:  # an earlier run's folder for the same step: replaced by the commit
        _folder(final, "stale")
    _commit(str(new), str(final))  # node A
    _commit(str(new), str(final))  # node B, after A: its staging folder is A's, already renamed
    assert (final / "trainer_state.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".checkpoint-4.staging", "checkpoint-4"]

