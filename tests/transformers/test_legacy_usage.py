"""``python -m shardcompat.transformers.legacy_usage``: the removed 4.x names a tree of scripts
uses, ranked by use, with the legacy table's row for each; an unlisted one fails the command."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
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


def test_datasets_uses_count_where_the_name_is_the_library_and_the_call_its_loader() -> None:
    code = ("import datasets\nfrom datasets import load_dataset as ld, load_metric\n\n\n"
            "def load_dataset(path, use_auth_token=None):  # the script's own loader\n    return path\n\n\n"
            "raw = ld('text', data_files='t.txt', use_auth_token=True, keep_linebreaks=True)\n"
            "builder = datasets.load_dataset_builder('x', use_auth_token=None)\n"
            "mine = load_dataset('y', use_auth_token=False)\nok = datasets.list_metrics()\n")
    found = {n for n in names_used(code) if n.where == "datasets"}
    assert found == {Name("datasets", "load_dataset"), Name("datasets", "load_metric"),
                     Name("datasets", "list_metrics"), Name("datasets", "load_dataset_builder"),
                     Name("datasets", "load_dataset(use_auth_token)", "keyword"),
                     Name("datasets", "load_dataset_builder(use_auth_token)", "keyword")}, found
    # 4.x's run_glue called its loaded data `datasets`; pplm's `datasets` is torchtext's
    for other in ("datasets = load_dataset('glue', 'mrpc')\nx = datasets.map(f)\n",
                  "import datasets\ndatasets = datasets.load_dataset('glue')\nx = datasets.keys()\n",
                  "from torchtext import datasets\nx = datasets.SST.splits(t, l)\n",
                  "import torchtext.datasets as datasets\nx = datasets.load_dataset('x', use_auth_token=1)\n"):
        assert not any(n.where == "datasets" for n in names_used(other)), other


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="compares against the installed datasets")
def test_removed_datasets_names_are_found_against_the_installed_datasets(tmp_path: Path) -> None:
    import datasets

    (tmp_path / "run.py").write_text("import datasets\nfrom datasets import load_dataset, load_metric\n"
                                     "raw = load_dataset('csv', data_files='t.csv', use_auth_token=None)\n"
                                     "ok = 'f1' in datasets.list_metrics()\nw = datasets.ArrowWriter(path='x')\n")
    found = {u.name.spelling: u.served for u in usage([tmp_path])}
    expected = {"datasets.load_metric": "mapped", "datasets.list_metrics": "mapped", "datasets.ArrowWriter": "renamed",
                "datasets.load_dataset(use_auth_token=)": "renamed"}
    expected = {k: v for k, v in expected.items()  # what the installed release still has is not removed
                if not (hasattr(datasets, k.split(".")[1]) if "(" not in k
                        else "use_auth_token" in inspect.signature(datasets.load_dataset).parameters)}
    assert found == expected


def test_a_name_the_installed_module_defines_under_a_condition_is_not_removed(tmp_path: Path) -> None:
    """image_utils.PILImageResampling needs Pillow, in 4.30 as in today's release: not a removed name."""
    (tmp_path / "vision.py").write_text("from transformers.image_utils import PILImageResampling\n"
                                        "from transformers.image_utils import NO_SUCH_NAME_EVER\n")
    found = {u.name.spelling for u in usage([tmp_path])}
    assert found == {"transformers.image_utils.NO_SUCH_NAME_EVER"}, found


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
