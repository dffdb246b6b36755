"""An unmodified legacy Trainer script across two torchrun agents (2x2) with ``shardcompat run``,
and the same job surviving a killed worker: the Trainer's own ``resume_from_checkpoint``
(the script's ``get_last_checkpoint``) picks up checkpoint-2 in the restarted group."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests._agents import run_agents

pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]

HERE = Path(__file__).parent
SCRIPT = HERE.parent / "transformers" / "scripts" / "run_clm_legacy.py"
ARGS = ["--do_train", "--max_steps", "4", "--save_steps", "2", "--per_device_train_batch_size", "2",
        "--logging_steps", "1", "--learning_rate", "5e-3", "--report_to", "none", "--disable_tqdm", "true",
        "--sharded_ddp", "zero_dp_3"]


def test_a_killed_trainer_job_on_2x2_restarts_from_the_trainers_last_checkpoint(tmp_path: Path) -> None:
    """Global rank 3 (second node) dies before step 3; both agents restart the group once."""
    out = tmp_path / "out"
    (tmp_path / "marks").mkdir()
    results = run_agents(
        [2, 2], [str(HERE / "chaos_trainer.py"), str(SCRIPT), "--output_dir", str(out), *ARGS], max_restarts=1,
        # Accelerate sets up this group, not shardcompat: torch's own remedy for the shared store.
        env={"SHARDCOMPAT_CHAOS": f"{tmp_path / 'marks'};kill@3:3", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        timeout=800,
    )
    output = "\n".join(r.stdout + r.stderr for r in results)
    assert (tmp_path / "marks" / "trainer-kill-at-3-step-3").exists()
    # Four processes share the agents' streams, and two lines can meet in one: count every mention.
    starts = sorted(re.findall(r" starts at step (\d+)", output))
    assert starts == ["1"] * 4 + ["3"] * 4, (starts, output[-5000:])  # every rank, then every rank resumed
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert [e["step"] for e in state["log_history"] if "loss" in e][-2:] == [3, 4]
    manifest = json.loads((out / "checkpoint-4" / "shardcompat" / "manifest.json").read_text())
    assert (manifest["world_size"], manifest["options"]) == (4, "zero_dp_3")
