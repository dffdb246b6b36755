"""The legacy-names layer (``_legacy`` serving ``legacy_table``) on the installed Transformers, in process.

Each table row is checked against the installed release (what it says is gone is gone, what it
maps to exists), each served field is parsed from its 4.x flag and must land on today's setting
with one FutureWarning, and ``install``/``uninstall`` must leave ``transformers`` as it was.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import warnings
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="needs transformers (pip install 'shardcompat[transformers]')")

import shardcompat.transformers as sct  # noqa: E402
from shardcompat.transformers import _legacy  # noqa: E402
from shardcompat.transformers._arguments import RELEASE_HAS_FIELD  # noqa: E402
from shardcompat.transformers.legacy_table import FIELDS, ROWS, Kind, Served, by_kind, row  # noqa: E402

STOCK_FIELDS = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
MISSING = [r for r in FIELDS if r.name not in STOCK_FIELDS]
pytestmark = pytest.mark.skipif(
    "evaluation_strategy" in STOCK_FIELDS,
    reason="this Transformers has the 4.30 API itself (test_legacy_inert.py checks the layer leaves it alone)",
)


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    _legacy._warned.clear()


def _parse(*argv: str) -> tuple[Any, list[str]]:
    parser = sct.HfArgumentParser(sct.TrainingArguments)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (args,) = parser.parse_args_into_dataclasses(["--output_dir", "out", "--report_to", "none", *argv])
    return args, [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def test_the_table_is_plain_data_importable_without_transformers() -> None:
    import subprocess
    import sys

    code = ("import sys; import shardcompat.transformers.legacy_table as t; "
            "assert 'transformers' not in sys.modules, sorted(m for m in sys.modules if 'transformers' in m); "
            "print(len(t.ROWS))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(ROWS)


def test_the_names_the_issue_lists_are_rows() -> None:
    for name in ("overwrite_output_dir", "evaluation_strategy", "adafactor", "no_cuda", "group_by_length",
                 "per_gpu_train_batch_size", "per_gpu_eval_batch_size", "fp16_backend", "half_precision_backend",
                 "fsdp_min_num_params", "fsdp_transformer_layer_cls_to_wrap", "push_to_hub_model_id",
                 "push_to_hub_organization", "push_to_hub_token", "use_legacy_prediction_loop"):
        assert row(name).kind is Kind.FIELD
    assert row("tokenizer", Kind.TRAINER).new == "processing_class"
    assert row("use_auth_token", Kind.FROM_PRETRAINED).new == "token"
    assert row("is_torch_tpu_available", Kind.TOP_LEVEL)
    assert row("send_example_telemetry", Kind.UTILS)


def test_every_row_matches_the_installed_release() -> None:
    """What the table says 5.x lacks, it lacks; what a row maps to, it has."""
    for r in FIELDS:
        if r.removed.startswith("5") or r.removed.startswith("4"):
            assert r.name not in STOCK_FIELDS, f"{r.name} is still a field of this release"
        if r.new is not None and r.new != "TENSORBOARD_LOGGING_DIR":
            assert r.new in STOCK_FIELDS, r
        assert isinstance(r.default, r.type.__args__[0] if hasattr(r.type, "__args__") else r.type) or r.default is None
    init = transformers.Trainer.__init__
    assert "processing_class" in __import__("inspect").signature(init).parameters
    for r in by_kind(Kind.TOP_LEVEL):
        assert not hasattr(transformers, r.name), r.name
        assert r.new is None or hasattr(transformers, r.new)
    for r in by_kind(Kind.UTILS):
        assert not hasattr(transformers.utils, r.name), r.name
        assert r.new is None or hasattr(transformers.utils, r.new)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--evaluation_strategy", "steps"], {"eval_strategy": "steps", "evaluation_strategy": "steps"}),
        (["--adafactor"], {"optim": "adafactor"}),
        (["--no_cuda"], {"use_cpu": True}),
        (["--group_by_length"], {"train_sampling_strategy": "group_by_length"}),
        (["--per_gpu_train_batch_size", "3"], {"per_device_train_batch_size": 3}),
        (["--per_gpu_eval_batch_size", "5"], {"per_device_eval_batch_size": 5}),
        (["--warmup_ratio", "0.25"], {"warmup_steps": 0.25}),
        (["--warmup_ratio", "0.25", "--warmup_steps", "3"], {"warmup_steps": 3}),  # 4.x: steps win
        (["--include_inputs_for_metrics"], {"include_for_metrics": ["inputs"]}),
        (["--tpu_metrics_debug"], {"debug": ["tpu_metrics_debug"]}),
        (["--push_to_hub_model_id", "m", "--push_to_hub_organization", "org"], {"hub_model_id": "org/m"}),
        (["--push_to_hub_organization", "org"], {"hub_model_id": "org/out"}),
        (["--push_to_hub_token", "t"], {"hub_token": "t"}),
        (["--overwrite_output_dir"], {"overwrite_output_dir": True}),
        (["--fp16_backend", "amp"], {"fp16_backend": "amp"}),
        (["--use_legacy_prediction_loop"], {"use_legacy_prediction_loop": True}),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_a_legacy_flag_lands_on_todays_setting_with_one_warning(argv: list[str], expected: dict[str, Any]) -> None:
    args, warned = _parse(*argv)
    for name, value in expected.items():
        got = getattr(args, name)
        got = [str(getattr(v, "value", v)) for v in got] if isinstance(got, list) else getattr(got, "value", got)
        assert got == value, (name, got)
    legacy = [a[2:] for a in argv if a.startswith("--") and a[2:] in {r.name for r in MISSING}]
    assert len(warned) == len(legacy), warned
    for name, message in zip(legacy, warned):
        assert f"--{name}" in message and "docs/transformers-legacy.md" in message
        assert row(name).replacement.split()[0] in message if row(name).replacement else "no effect" in message


def test_fsdp_legacy_fields_go_into_fsdp_config() -> None:
    args, _ = _parse("--fsdp_transformer_layer_cls_to_wrap", "GPT2Block", "--fsdp", "full_shard auto_wrap")
    assert args.fsdp_config["transformer_layer_cls_to_wrap"] == ["GPT2Block"]  # the release's FSDP reads its keys
    args, _ = _parse("--fsdp_min_num_params", "100", "--fsdp_transformer_layer_cls_to_wrap", "GPT2Block")
    # no FSDP: the dict reads as 4.30 left it (4.3x releases spell the keys as 4.31 renamed them)
    prefix = "" if RELEASE_HAS_FIELD else "fsdp_"
    assert args.fsdp == [] and args.fsdp_config == {
        f"{prefix}min_num_params": 100, f"{prefix}transformer_layer_cls_to_wrap": ["GPT2Block"], "xla": False,
        "xla_fsdp_grad_ckpt": False}


def test_a_legacy_flag_warns_once_per_process() -> None:
    _, first = _parse("--evaluation_strategy", "steps")
    _, second = _parse("--evaluation_strategy", "epoch")
    assert len(first) == 1 and second == []


@pytest.mark.parametrize(("argv", "token"), [(["--half_precision_backend", "apex"], "apex"),
                                             (["--past_index", "0"], "--past_index"),
                                             (["--warmup_ratio", "1.0"], "--warmup_ratio")])
def test_no_honest_mapping_is_refused_before_training(argv: list[str], token: str) -> None:
    with pytest.raises(_legacy.LegacyArgumentError, match=token):
        _parse(*argv)


def test_defaults_are_silent_and_stay_out_of_to_dict() -> None:
    args, warned = _parse()
    assert warned == []
    stock = transformers.TrainingArguments(output_dir="out", report_to="none")
    assert args.to_dict().keys() - {"sharded_ddp"} == stock.to_dict().keys()


def test_trainer_takes_tokenizer_as_processing_class() -> None:
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16))
    tokenizer = object()
    args = sct.TrainingArguments(output_dir="out", report_to="none", use_cpu=True)
    with pytest.warns(FutureWarning, match=r"Trainer\(tokenizer=...\).*processing_class="):
        trainer = sct.Trainer(model=model, args=args, tokenizer=tokenizer)
    assert trainer.processing_class is tokenizer and trainer.tokenizer is tokenizer
    with pytest.raises(_legacy.LegacyArgumentError, match="keep processing_class="):
        sct.Trainer(model=model, args=args, tokenizer=tokenizer, processing_class=tokenizer)


def test_install_adds_the_removed_names_and_uninstall_takes_them_away(tmp_path: Path) -> None:
    before = {n: getattr(transformers, n, None) for n in ("is_torch_tpu_available", "is_tf_available")}
    method = vars(transformers.PreTrainedConfig)["from_pretrained"]
    config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, bos_token_id=0, eos_token_id=1)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path)
    with pytest.raises(TypeError, match="use_auth_token"):
        transformers.GPT2LMHeadModel.from_pretrained(tmp_path, use_auth_token=None)  # stock 5.x
    with sct.dropins():
        from transformers import is_tf_available, is_torch_tpu_available  # type: ignore[attr-defined]
        from transformers.utils import send_example_telemetry  # type: ignore[attr-defined]

        with pytest.warns(FutureWarning, match="is_torch_xla_available"):
            assert is_torch_tpu_available() == transformers.is_torch_xla_available()
        assert is_tf_available() is False
        assert send_example_telemetry("run_clm", object()) is None
        with pytest.warns(FutureWarning, match="token="):
            model = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, use_auth_token=None)
        assert model.config.n_layer == 1
    assert {n: getattr(transformers, n, None) for n in before} == before
    assert not hasattr(transformers.utils, "send_example_telemetry")
    assert vars(transformers.PreTrainedConfig)["from_pretrained"] is method


def test_install_serves_load_datasets_removed_keyword_and_uninstall_restores_it(tmp_path: Path) -> None:
    """Every 4.30 example script passes ``use_auth_token`` to ``load_dataset``; datasets 3.0 removed it."""
    datasets = pytest.importorskip("datasets", reason="needs datasets (pip install 'shardcompat[test]')")
    if "use_auth_token" in inspect.signature(datasets.load_dataset).parameters:
        pytest.skip(f"datasets {datasets.__version__} still takes use_auth_token: nothing to serve")
    data = tmp_path / "train.json"
    data.write_text('{"text": "a b"}\n{"text": "c"}\n')
    original = datasets.load_dataset, datasets.load_dataset_builder
    with pytest.raises((TypeError, ValueError), match="use_auth_token"):  # stock: the builder config refuses it
        datasets.load_dataset("json", data_files=str(data), cache_dir=str(tmp_path / "c0"), use_auth_token=None)
    with sct.dropins():
        from datasets import load_dataset, load_dataset_builder

        with pytest.warns(FutureWarning, match=r"datasets.load_dataset\(use_auth_token=...\).*token="):
            loaded = load_dataset("json", data_files=str(data), cache_dir=str(tmp_path / "c1"), use_auth_token=None)
        assert loaded["train"]["text"] == ["a b", "c"]
        builder = load_dataset_builder("json", data_files=str(data), cache_dir=str(tmp_path / "c2"),
                                       use_auth_token=None)
        assert builder.config.data_files is not None
    assert (datasets.load_dataset, datasets.load_dataset_builder) == original


METRIC = '''"""A local metric script in evaluate's form (the hub's cannot be downloaded in tests)."""
import datasets
import evaluate


class Exact(evaluate.Metric):
    def _info(self):
        features = datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")})
        return evaluate.MetricInfo(description="exact", citation="", inputs_description="", features=features)

    def _compute(self, predictions, references):
        return {"exact": sum(p == r for p, r in zip(predictions, references)) / len(references)}
'''


def test_install_serves_datasets_load_metric_with_evaluate_and_takes_it_away(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """datasets 3.0 removed load_metric, which the 4.2x example scripts import; evaluate.load took over."""
    datasets = pytest.importorskip("datasets", reason="needs datasets (pip install 'shardcompat[test]')")
    pytest.importorskip("evaluate", reason="needs evaluate (pip install 'shardcompat[test]')")
    if hasattr(datasets, "load_metric"):
        pytest.skip(f"datasets {datasets.__version__} still has load_metric: nothing to serve")
    (tmp_path / "exact").mkdir()
    (tmp_path / "exact" / "exact.py").write_text(METRIC)
    monkeypatch.chdir(tmp_path)  # evaluate finds a local metric script by its folder's name
    with sct.dropins():
        from datasets import load_metric

        with pytest.warns(FutureWarning, match=r"datasets.load_metric is datasets 2.x API.*evaluate.load"):
            metric = load_metric("exact", keep_in_memory=True)
        assert metric.compute(predictions=[1, 2, 3, 4], references=[1, 2, 0, 4]) == {"exact": 0.75}
        real = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "evaluate" else real(name))
        with pytest.raises(ImportError, match="pip install evaluate"):  # the fallback: says what to install
            load_metric("exact")
    assert not hasattr(datasets, "load_metric")


def test_install_serves_datasets_list_metrics_as_evaluates_metric_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    """datasets 3.0 removed list_metrics (4.x's self-training example asserts its metric is listed)."""
    datasets = pytest.importorskip("datasets", reason="needs datasets (pip install 'shardcompat[test]')")
    evaluate = pytest.importorskip("evaluate", reason="needs evaluate (pip install 'shardcompat[test]')")
    if hasattr(datasets, "list_metrics"):
        pytest.skip(f"datasets {datasets.__version__} still has list_metrics: nothing to serve")
    asked: list[dict[str, Any]] = []
    # evaluate lists its modules from the Hub, which this machine cannot reach: a stand-in records the question
    monkeypatch.setattr(evaluate, "list_evaluation_modules", lambda **kw: asked.append(kw) or ["accuracy", "f1"])
    with sct.dropins():
        with pytest.warns(FutureWarning, match=r"datasets.list_metrics is datasets 2.x API.*list_evaluation_modules"):
            assert "accuracy" in datasets.list_metrics()
        datasets.list_metrics(with_community_metrics=False, with_details=True)
    assert asked == [{"module_type": "metric", "include_community": True, "with_details": False},
                     {"module_type": "metric", "include_community": False, "with_details": True}]
    assert not hasattr(datasets, "list_metrics")


def test_install_serves_datasets_arrow_writer_from_its_home_and_the_file_reads_back(tmp_path: Path) -> None:
    """datasets 2.0 stopped exporting ArrowWriter at the top level (4.x's lxmert/visual_bert extractors use it)."""
    datasets = pytest.importorskip("datasets", reason="needs datasets (pip install 'shardcompat[test]')")
    if hasattr(datasets, "ArrowWriter"):
        pytest.skip(f"datasets {datasets.__version__} still exports ArrowWriter: nothing to serve")
    from datasets.arrow_writer import ArrowWriter

    features = datasets.Features({"img_id": datasets.Value("string"), "num_boxes": datasets.Value("int32")})
    with sct.dropins():
        with pytest.warns(FutureWarning, match=r"datasets.ArrowWriter is datasets 1.x API.*datasets.arrow_writer"):
            writer = datasets.ArrowWriter(features=features, path=str(tmp_path / "boxes.arrow"))
        assert isinstance(writer, ArrowWriter) and isinstance(writer, datasets.ArrowWriter)
        for i in range(3):
            writer.write({"img_id": f"img{i}", "num_boxes": 36 + i})
        assert writer.finalize()[0] == 3
    assert not hasattr(datasets, "ArrowWriter")
    read = datasets.Dataset.from_file(str(tmp_path / "boxes.arrow"))
    assert read["num_boxes"] == [36, 37, 38] and read.features == features


def test_every_row_has_a_way_it_is_served() -> None:
    for r in ROWS:
        assert r.served in Served and r.reason
        if r.served in (Served.RENAMED, Served.MAPPED) and r.kind is Kind.FIELD:
            assert r.new, r


def test_a_scripts_own_field_of_a_legacy_name_is_the_scripts() -> None:
    """A ported script that declares overwrite_output_dir itself parses as on stock 5.x (no clash)."""

    @dataclasses.dataclass
    class DataArguments:
        overwrite_output_dir: bool = False

    parser = sct.HfArgumentParser((DataArguments, sct.TrainingArguments))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data, args = parser.parse_args_into_dataclasses(["--output_dir", "o", "--overwrite_output_dir"])
    assert data.overwrite_output_dir is True and args.overwrite_output_dir is False
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]


def test_the_layer_probes_the_release_not_the_dropin_in_its_place() -> None:
    """Under shardcompat run transformers.TrainingArguments/Trainer are the drop-ins; the probe must not see them."""
    import sys

    with sct.dropins():  # (5.x may have put a new `transformers` module into sys.modules: see _legacy.install)
        assert sys.modules["transformers"].TrainingArguments is sct.TrainingArguments
        assert [r.name for r in _legacy._missing_fields()] == [r.name for r in MISSING]
        assert [r.name for r in _legacy._trainer_rows()] == ["tokenizer", "prediction_loss_only"]
        args, warned = _parse("--evaluation_strategy", "steps")
        assert str(args.eval_strategy.value) == "steps" and len(warned) == 1


def test_install_reaches_every_transformers_package_object_in_play() -> None:
    """Code that imported Transformers before ``install`` keeps the package object it got; on
    releases where importing processing_utils re-runs ``transformers/__init__`` that object is
    no longer ``sys.modules["transformers"]``, and both installers must serve it too."""
    import subprocess
    import sys

    code = """
import sys, warnings
import transformers as held
import shardcompat.transformers as sct
from shardcompat.transformers import _dropin
replaced = _dropin.install()
current = sys.modules["transformers"]
print("reloaded", held is not current)
for module in dict.fromkeys((held, current)):
    assert module.Trainer is sct.Trainer and module.TrainingArguments is sct.TrainingArguments
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert module.is_torch_tpu_available() is module.is_torch_xla_available()
_dropin.uninstall(replaced)
for module in (held, current):
    assert not hasattr(module, "is_torch_tpu_available"), module
    assert module.Trainer is not sct.Trainer
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.split()[-1] == "ok"
    # The case this guards: on this release the package object really changes under the script.
    assert "reloaded True" in done.stdout, done.stdout


# A value for each str-typed field row that today's setting accepts; bool, int and float rows need none.
_STR_SAMPLES = {"evaluation_strategy": "steps", "torchdynamo": "eager", "xpu_backend": "gloo",
                "half_precision_backend": "amp", "fp16_backend": "amp", "fp16_opt_level": "O2", "mp_parameters": "x",
                "ray_scope": "last", "logging_dir": "logs", "fsdp_transformer_layer_cls_to_wrap": "GPT2Block",
                "push_to_hub_model_id": "m", "push_to_hub_organization": "org", "push_to_hub_token": "t"}


def _sample(r: Any) -> tuple[list[str], Any]:
    if r.type is bool:
        return [r.flag], True
    if r.type in (int, int | None):
        return [r.flag, "3"], 3
    if r.type is float:
        return [r.flag, "0.25"], 0.25
    assert r.name in _STR_SAMPLES, f"give the new row {r.name!r} a sample value in _STR_SAMPLES"
    return [r.flag, _STR_SAMPLES[r.name]], _STR_SAMPLES[r.name]


def _outcome(*argv: str) -> tuple[str, Any, list[str]]:
    try:
        args, warned = _parse(*argv)
    except Exception as error:  # refusals and today's own errors alike: compared by text below
        return f"{type(error).__name__}: {error}", None, []
    return "ok", args, warned


@pytest.mark.parametrize("r", MISSING, ids=lambda r: r.name)
def test_every_field_row_runs_as_4_30_did(r: Any) -> None:
    """Row by row (a new row is tested without a new line): the 4.x flag parses, warns once naming
    itself unless it gives 4.30's default, and a script reading ``args.NAME`` reads what it passed;
    a renamed flag ends exactly as today's spelling does (its value, or today's own error); a
    refused row is refused naming its replacement."""
    argv, value = _sample(r)
    status, args, warned = _outcome(*argv)
    if r.served is Served.REFUSED or value in r.refuse:
        assert status.startswith("LegacyArgumentError") and r.replacement in status, status
        return
    if r.served is Served.RENAMED:
        assert r.new is not None
        today, stock_args, _ = _outcome(f"--{r.new}", *argv[1:])
        assert status == today, (status, today)
        if status != "ok":
            return  # the same error as today's spelling (xpu_backend's ddp_backend outside a launch)
        assert getattr(args, r.new) == getattr(stock_args, r.new)
    assert status == "ok", status
    assert getattr(args, r.name) == value
    expected = 0 if value == r.default else 1
    assert len(warned) == expected and all(r.flag in w for w in warned), warned


@pytest.mark.parametrize("r", by_kind(Kind.TOP_LEVEL) + by_kind(Kind.UTILS), ids=lambda r: f"{r.kind.name}-{r.name}")
def test_every_removed_name_imports_and_answers_as_its_row_says(r: Any) -> None:
    """Row by row: under the layer the 4.x import works and the call gives today's answer (the
    function it was renamed to, or the constant the row names), and it is gone again after."""
    home = transformers if r.kind is Kind.TOP_LEVEL else transformers.utils
    with sct.dropins():
        function = getattr(importlib.import_module(home.__name__), r.name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            answer = function("run_clm", object()) if r.served is Served.NO_OP else function()
        if r.served is Served.NO_OP:
            assert answer is None
        elif r.new is not None:
            assert answer == getattr(home, r.new)()
        else:
            assert answer is {"False": False, "True": True}[r.replacement]
    assert not hasattr(home, r.name)
