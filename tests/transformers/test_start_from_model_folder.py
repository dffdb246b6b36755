"""``trainer.train(resume_from_checkpoint=<a model folder>)`` trains as Transformers 4.x did.

The 4.x examples resume from ``model_args.model_name_or_path`` when it is a local folder; 4.x
loaded its weights and started fresh, 4.36+ raise FileNotFoundError (no ``trainer_state.json``).
The Trainer drop-in must train exactly as the release's own Trainer does from a model built
from that folder (dropout on, the Trainer's parameter groups): same losses, same weights, with
or without ``model_init``.  A real checkpoint still resumes as the release resumes it.  One
process here; sharded, on two ranks, ``scripts/run_glue_legacy.py`` does the same
(:mod:`.test_legacy_scripts`, :mod:`.test_legacy_migrated`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, ClassVar

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")
torch = pytest.importorskip("torch")

from shardcompat.transformers import Trainer  # noqa: E402
from shardcompat.transformers._legacy import _release  # noqa: E402
from shardcompat.transformers._start_from import release_requires_state  # noqa: E402

STOCK = _release("Trainer")
RAISES_TODAY = release_requires_state(STOCK.train)


def _config() -> Any:
    return transformers.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=64, max_position_embeddings=16, num_labels=2)


class _Pairs(torch.utils.data.Dataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(4, 40, (8,), generator=g)
        return {"input_ids": ids, "attention_mask": torch.ones(8, dtype=torch.long), "labels": int(ids[0] > ids[1])}


def _args(out: Path) -> Any:
    return transformers.TrainingArguments(
        output_dir=str(out), max_steps=4, per_device_train_batch_size=4, learning_rate=5e-3, weight_decay=0.01,
        logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True, seed=0, use_cpu=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder as from_pretrained reads it: config and weights, no Trainer state."""
    path = tmp_path_factory.mktemp("model")
    torch.manual_seed(1)
    transformers.BertForSequenceClassification(_config()).save_pretrained(path)  # the release's format
    return path


def _outcome(trainer: Any) -> tuple[list[float], dict[str, Any]]:
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return losses, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


@pytest.fixture(scope="module")
def stock(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[float], dict[str, Any]]:
    """The release's own Trainer on the model built from the folder, started fresh."""
    model = transformers.BertForSequenceClassification.from_pretrained(folder)
    trainer = STOCK(model=model, args=_args(tmp_path_factory.mktemp("stock")), train_dataset=_Pairs())
    trainer.train()
    return _outcome(trainer)


def _same(a: tuple[list[float], dict[str, Any]], b: tuple[list[float], dict[str, Any]]) -> None:
    assert len(a[0]) == 4 and a[0] == b[0], (a[0], b[0])
    assert a[1].keys() == b[1].keys()
    assert all(torch.equal(a[1][k], b[1][k]) for k in a[1])


def _served(trainer: Any, folder: Path) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train(resume_from_checkpoint=str(folder))
    return [str(w.message) for w in caught if issubclass(w.category, FutureWarning)
            and "resume_from_checkpoint" in str(w.message)]


def test_a_model_folder_starts_from_its_weights_as_4x_did(folder: Path, stock: Any, tmp_path: Path) -> None:
    torch.manual_seed(7)  # other weights: the folder's must replace them
    trainer = Trainer(model=transformers.BertForSequenceClassification(_config()), args=_args(tmp_path),
                      train_dataset=_Pairs())
    warned = _served(trainer, folder)
    _same(stock, _outcome(trainer))
    assert trainer.state.global_step == 4
    if RAISES_TODAY:  # served: warned, naming the folder and today's form
        assert len(warned) <= 1 and all(str(folder) in m and "from_pretrained" in m for m in warned)
    else:  # the release's own behaviour: nothing served, nothing warned
        assert warned == []


def test_model_path_is_4x_resume_from_checkpoint(folder: Path, stock: Any, tmp_path: Path) -> None:
    """4.2's ``trainer.train(model_path=...)``, which 4.3-4.x took as ``resume_from_checkpoint``."""
    torch.manual_seed(7)
    trainer = Trainer(model=transformers.BertForSequenceClassification(_config()), args=_args(tmp_path),
                      train_dataset=_Pairs())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train(model_path=str(folder))
    _same(stock, _outcome(trainer))
    assert any("model_path" in str(w.message) and "resume_from_checkpoint" in str(w.message) for w in caught)


def test_model_init_builds_the_model_the_folder_is_loaded_into(folder: Path, tmp_path: Path) -> None:
    built = []

    def model_init() -> Any:  # drawn from the stream the Trainer seeds before calling it
        built.append(transformers.BertForSequenceClassification(_config()))
        return built[-1]

    def ported_init() -> Any:  # the hand port: the same draws, then the folder's weights
        model = transformers.BertForSequenceClassification(_config())
        with torch.random.fork_rng():  # reading the folder draws nothing in the served run either
            model.load_state_dict(transformers.BertForSequenceClassification.from_pretrained(folder).state_dict())
        return model

    reference = STOCK(model_init=ported_init, args=_args(tmp_path / "stock"), train_dataset=_Pairs())
    reference.train()
    trainer = Trainer(model_init=model_init, args=_args(tmp_path / "ours"), train_dataset=_Pairs())
    _served(trainer, folder)
    assert trainer.model is built[-1]
    _same(_outcome(reference), _outcome(trainer))
    assert trainer._start_from is None  # nothing left for a later model_init


@pytest.mark.skipif(not RAISES_TODAY, reason="this release reads a missing trainer_state.json itself, as 4.x did")
def test_the_release_alone_raises_where_the_drop_in_serves(folder: Path, tmp_path: Path) -> None:
    model = transformers.BertForSequenceClassification.from_pretrained(folder)
    trainer = STOCK(model=model, args=_args(tmp_path), train_dataset=_Pairs())
    with pytest.raises(FileNotFoundError, match=r"trainer_state\.json"):
        trainer.train(resume_from_checkpoint=str(folder))


class _Steps(transformers.TrainerCallback):  # type: ignore[misc]
    """The steps each run took, in order."""

    taken: ClassVar[list[list[int]]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _Steps.taken.append([])

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _Steps.taken[-1].append(state.global_step)


@pytest.mark.parametrize("cut_short", [False, True], ids=["whole", "state-lost"])
def test_a_real_checkpoint_resumes_as_the_release_resumes_it(folder: Path, tmp_path: Path, cut_short: bool) -> None:
    """A checkpoint, whole or without its trainer_state.json (a save cut short), is the release's
    to resume or refuse: only a folder with nothing of a checkpoint is a model to start from."""
    def run(cls: Any, out: Path, steps: int, resume: Any = None) -> Any:
        args = _args(out)
        args.max_steps, args.save_strategy, args.save_steps = steps, "steps", 2
        trainer = cls(model=transformers.BertForSequenceClassification.from_pretrained(folder), args=args,
                      train_dataset=_Pairs(), callbacks=[_Steps()])
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    run(STOCK, tmp_path / "first", 2)
    checkpoint = tmp_path / "first" / "checkpoint-2"
    assert (checkpoint / "trainer_state.json").is_file()
    if cut_short:
        (checkpoint / "trainer_state.json").unlink()
    try:
        theirs = run(STOCK, tmp_path / "theirs", 4, str(checkpoint))
    except Exception as error:  # 5.x: the state is missing; 4.34.1 on today's torch: rng_state.pth fails to load
        with pytest.raises(type(error)):
            run(Trainer, tmp_path / "ours", 4, str(checkpoint))
        return
    ours = run(Trainer, tmp_path / "ours", 4, str(checkpoint))
    assert ours.state.global_step == theirs.state.global_step == 4
    _same(_outcome(theirs), _outcome(ours))
    assert _Steps.taken[-1] == _Steps.taken[-2]  # ours took the steps the release took
    if not cut_short:
        assert _Steps.taken[-1] == [3, 4]  # resumed after step 2, not restarted
