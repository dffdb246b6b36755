"""``--transformers-legacy`` on 4.x's "resume" from the local model folder (:mod:`codemods.rules.transformers_legacy.resume`).

The three shapes the 4.x examples wrote (run_glue 4.3, run_glue 4.4-4.5 with its label check,
run_mlm_wwm 4.30) come out resuming only a folder that has ``trainer_state.json``; executed on
real folders, the migrated choice is the old one for a Trainer checkpoint and ``None`` (a fresh
start from the weights the model was built with, which is what 4.x did) for a model folder.
Anything else that tests ``isdir`` is left alone.  The migrated script on stock Transformers:
:mod:`tests.transformers.test_legacy_migrated` (``scripts/run_glue_legacy.py``).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import Any

import pytest

from codemods.formats.python import migrate_source
from codemods.run.context import Settings

SETTINGS = Settings(legacy=False, transformers_legacy=True)

RUN_GLUE_43 = """
    if last_checkpoint is not None:
        checkpoint = last_checkpoint
    elif os.path.isdir(model_args.model_name_or_path):
        checkpoint = model_args.model_name_or_path
    else:
        checkpoint = None
    trainer.train(resume_from_checkpoint=checkpoint)
"""
RUN_GLUE_44 = """
    checkpoint = None
    if last_checkpoint is not None:
        checkpoint = last_checkpoint
    elif os.path.isdir(model_args.model_name_or_path):
        # Check the config from that potential checkpoint has the right number of labels before using it as a
        # checkpoint.
        if AutoConfig.from_pretrained(model_args.model_name_or_path).num_labels == num_labels:
            checkpoint = model_args.model_name_or_path

    train_result = trainer.train(resume_from_checkpoint=checkpoint)
"""
RUN_MLM_WWM = """
    if last_checkpoint is not None:
        checkpoint = last_checkpoint
    elif model_args.model_name_or_path is not None and os.path.isdir(model_args.model_name_or_path):
        checkpoint = model_args.model_name_or_path
    else:
        checkpoint = None
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
"""
RUN_GLUE_42 = """
    train_result = trainer.train(
        model_path=model_args.model_name_or_path if os.path.isdir(model_args.model_name_or_path) else None
    )
"""
ASSIGNED = """
    checkpoint = model_args.model_name_or_path if os.path.isdir(model_args.model_name_or_path) else None
    trainer.train(resume_from_checkpoint=checkpoint)
"""
SHAPES = {"run_glue_4.2": RUN_GLUE_42, "run_glue_4.3": RUN_GLUE_43, "run_glue_4.4": RUN_GLUE_44,
          "run_mlm_wwm_4.30": RUN_MLM_WWM, "assigned": ASSIGNED}


def _script(body: str) -> str:
    return "import os\n\nfrom transformers import Trainer\n\n\ndef main():\n" + textwrap.dedent(body).replace("\n", "\n    ").rstrip() + "\n"


def _migrate(code: str) -> str:
    result = migrate_source(code, SETTINGS)
    out = result.code if isinstance(result.code, str) else code
    again = migrate_source(out, SETTINGS)
    assert again.code is None or again.code == out, "a second run changes nothing more"
    ast.parse(out)
    return out


class _Trainer:
    def __init__(self) -> None:
        self.resumed: Any = "not called"

    def train(self, resume_from_checkpoint: Any = None, **kwargs: Any) -> None:
        self.resumed = kwargs.pop("model_path", resume_from_checkpoint)  # as 4.3-4.x took model_path=


class _Config:
    num_labels = 2

    @classmethod
    def from_pretrained(cls, path: str) -> _Config:
        return cls()


def _chosen(code: str, folder: Path) -> Any:
    """What ``trainer.train`` gets when the script runs with ``--model_name_or_path folder``."""
    trainer = _Trainer()
    namespace: dict[str, Any] = {
        "last_checkpoint": None, "trainer": trainer, "AutoConfig": _Config, "num_labels": 2,
        "model_args": type("ModelArguments", (), {"model_name_or_path": str(folder)})(),
    }
    exec(compile(code, "<script>", "exec"), namespace)  # the test's own code, written above
    namespace["main"]()
    return trainer.resumed


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_model_folder_starts_fresh_and_a_checkpoint_still_resumes(shape: str, tmp_path: Path) -> None:
    before = _script(SHAPES[shape])
    after = _migrate(before)
    assert after.count('os.path.isfile(os.path.join(model_args.model_name_or_path, "trainer_state.json"))') == 1
    assert "isdir" not in after and "model_path=" not in after
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    checkpoint = tmp_path / "checkpoint-500"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    # 4.x "resumed" the model folder: its weights (the model's own already) and a fresh state
    assert _chosen(before, model) == str(model) and _chosen(after, model) is None
    assert _chosen(before, checkpoint) == _chosen(after, checkpoint) == str(checkpoint)
    assert _chosen(before, tmp_path / "hub-id") is _chosen(after, tmp_path / "hub-id") is None


def test_model_path_is_renamed_only_for_a_transformers_trainer() -> None:
    both = _script("""
    trainer.train(model_path=a, resume_from_checkpoint=b)
    """)
    result = migrate_source(both, SETTINGS)
    assert result.code in (None, both)
    assert [w.message for w in result.warnings if "model_path=" in w.message]
    other = _script("""
    learner.train(model_path=path)
    """).replace("from transformers import Trainer", "from somewhere import Learner")
    assert migrate_source(other, SETTINGS).code in (None, other)  # another library's train(model_path=)


def test_the_edit_is_recorded_with_its_reason() -> None:
    result = migrate_source(_script(RUN_GLUE_43), SETTINGS)
    notes = [e.note for e in result.edits if "isdir" in e.before]
    assert len(notes) == 1 and "trainer_state.json" in notes[0] and "fresh start" in notes[0]


@pytest.mark.parametrize("body", [
    # the folder is not what the block resumes from
    """
    if os.path.isdir(data_args.cache_dir):
        checkpoint = model_args.model_name_or_path
    trainer.train(resume_from_checkpoint=checkpoint)
    """,
    # the name assigned is never resumed from
    """
    if os.path.isdir(model_args.model_name_or_path):
        weights = model_args.model_name_or_path
    trainer.train(resume_from_checkpoint=None)
    """,
    # not os.path's isdir
    """
    if tf.io.gfile.isdir(model_args.model_name_or_path):
        checkpoint = model_args.model_name_or_path
    trainer.train(resume_from_checkpoint=checkpoint)
    """,
], ids=["other-folder", "not-resumed", "other-isdir"])
def test_any_other_isdir_is_left_alone(body: str) -> None:
    code = _script(body)
    assert migrate_source(code, SETTINGS).code in (None, code)
