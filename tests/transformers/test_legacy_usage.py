"""``python -m shardcompat.transformers.legacy_usage``: the removed 4.x names a tree of scripts
uses, ranked by use, with the legacy table's row for each; an unlisted one fails the command."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers", reason="compares against the installed Transformers")

from shardcompat.transformers.legacy_survey import Name  # noqa: E402
from shardcompat.transformers.legacy_usage import names_used, usage  # noqa: E402

SCRIPTS = Path(__file__).parent / "scripts"
# What a name counts as depends on the installed release: one that still has the 4.x API removed
# none of these names (the tool then rightly finds nothing to list).
on_a_5x_release = pytest.mark.skipif(
    "evaluation_strategy" in {f.name for f in dataclasses.fields(transformers.TrainingArguments)},
    reason="this Transformers has the 4.30 API itself: nothing the scripts use is removed",
)


def test_the_uses_it_counts_are_the_ones_shardcompat_run_serves() -> None:
    code = ("import transformers\nfrom transformers.trainer import ALL_LAYERNORM_LAYERS\n"
            "from transformers import AdamW as A\nx = transformers.is_torch_tpu_available()\n"
            "args = TrainingArguments('o', evaluation_strategy='steps')\nprint(training_args.no_cuda, self.name)\n")
    found = names_used(code)
    assert {Name("transformers.trainer", "ALL_LAYERNORM_LAYERS"), Name("transformers", "AdamW"),
            Name("transformers", "is_torch_tpu_available"),
            Name("TrainingArguments", "__init__(evaluation_strategy)", "keyword"),
            Name("TrainingArguments", "__init__(no_cuda)", "keyword")} <= found
    assert not any(n.name == "name" or "(name)" in n.name for n in found)  # self.name is no arguments read


@on_a_5x_release
def test_every_removed_name_the_era_scripts_here_use_is_served() -> None:
    uses = usage([SCRIPTS])
    spellings = {u.name.spelling for u in uses}
    assert {"transformers.utils.is_offline_mode", "transformers.utils.send_example_telemetry",
            "transformers.trainer_utils.ShardedDDPOption"} <= spellings, spellings
    assert all(u.row is not None and u.served != "refused" for u in uses), [(u.name.spelling, u.served) for u in uses]
    by_name = {u.name.spelling: u for u in uses}
    assert len(by_name["transformers.utils.send_example_telemetry"].files) >= 3  # ranked by the files using it


@on_a_5x_release
def test_a_name_no_row_covers_fails_the_command_and_refused_ones_name_the_replacement(tmp_path: Path) -> None:
    (tmp_path / "old.py").write_text("from transformers.file_utils import cached_path\n"
                                     "from transformers import TFBertModel\n"
                                     "from transformers.trainer import no_such_name_of_4x\n")
    (tmp_path / "broken.py").write_text("def (:\n")  # skipped: the migration reports such files
    done = subprocess.run([sys.executable, "-m", "shardcompat.transformers.legacy_usage", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any("refused" in ln and "file_utils.cached_path" in ln and "cached_file" in ln for ln in lines), lines
    assert any("refused" in ln and "transformers.TFBertModel" in ln for ln in lines), lines
    assert any("unlisted" in ln and "no_such_name_of_4x" in ln for ln in lines), lines
    assert lines[-1].endswith("(3 removed names used)") and "1 unlisted" in lines[-1]
    missing = subprocess.run([sys.executable, "-m", "shardcompat.transformers.legacy_usage", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr and "Traceback" not in missing.stderr
