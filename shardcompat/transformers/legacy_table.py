"""The 4.x Trainer-script names that Transformers renamed or removed, and how shardcompat serves each.

Plain data, importable without Transformers: the runtime layer (:mod:`._legacy`, under
``shardcompat run``) and the generated docs page read this one table, and a migration rule over
the same names is meant to import it too, so what runs unchanged and what migrates cannot disagree.

Derived from the releases themselves: the ``TrainingArguments`` fields, ``Trainer.__init__``
keywords, ``HfArgumentParser`` flags and top-level / ``transformers.utils`` names of 4.30.2
were diffed against 5.x, and the sources of 4.30.2, every 4.31-4.57 minor release and 5.0.0
were searched for each name.  ``removed`` is the first release whose source no longer has the
name; ``deprecated`` the first that warned about it (``<=4.30``: 4.30.2 already warned;
``None``: removed without a warning; ``5.x``: removed after 5.0, before the 5.x installed here).

How a row is served (:class:`Served`):

- ``renamed``: the value goes to today's name unchanged;
- ``mapped``: today's setting that does what the old one did (``adafactor=True`` is
  ``optim="adafactor"``, exactly what 4.30 did with it);
- ``no-op``: accepted, with the reason nothing needs doing (the attribute still reads its value);
- ``refused``: no honest mapping for this value: refused before training, naming the replacement.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
from typing import Any, Optional

__all__ = ["DATASETS_LOADERS", "FIELDS", "GONE_MODULES", "NOT_GIVEN", "REEXPORTS", "ROWS", "SURVEYED_MODULES", "Kind",
           "LegacyName", "Served", "by_kind", "loader_callees", "precise_family", "reexport_row", "row"]


class Kind(str, enum.Enum):
    """Where a script used the name."""

    FIELD = "TrainingArguments field"  # keyword, --flag and attribute read alike
    TRAINER = "Trainer keyword"
    FROM_PRETRAINED = "from_pretrained keyword"
    DATASETS = "datasets keyword"  # of DATASETS_LOADERS: every 4.x example script calls them
    DATASETS_FUNCTION = "datasets function"  # or class; ``new``: "module:attribute" where it lives today, if a drop-in
    TOP_LEVEL = "top-level import"
    UTILS = "transformers.utils import"

    def __str__(self) -> str:
        return self.value


class Served(str, enum.Enum):
    RENAMED = "renamed"
    MAPPED = "mapped"
    NO_OP = "no-op"
    REFUSED = "refused"

    def __str__(self) -> str:
        return self.value


class _NotGiven:
    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()  # a field default that tells "not given" from any value


@dataclasses.dataclass(frozen=True)
class LegacyName:
    """One legacy name.

    ``new`` is today's name it goes to (a field, keyword or function); ``values`` maps the old
    literal values whose meaning today is a different value of ``new`` (``{True: "adafactor"}``);
    ``default`` is what 4.30 defaulted it to (a value equal to it needs no mapping); ``type`` is
    4.30's annotation, so ``HfArgumentParser`` parses the flag as it did; ``refuse`` lists values
    that have no honest mapping.
    """

    name: str
    kind: Kind
    deprecated: str | None
    removed: str
    served: Served
    replacement: str  # today's spelling as a user writes it ("" for a no-op)
    reason: str
    new: str | None = None
    values: tuple[tuple[Any, Any], ...] = ()
    default: Any = None
    type: Any = None
    refuse: tuple[Any, ...] = ()

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def library(self) -> str:
        """Whose API the name was: ``datasets`` for its rows (whose ``removed`` names it), else Transformers."""
        return "datasets" if self.kind in (Kind.DATASETS, Kind.DATASETS_FUNCTION) else "Transformers"

    @property
    def removed_in(self) -> str:
        """The release that dropped it, library named: ``Transformers 4.46``, ``datasets 3.0``."""
        return self.removed if self.library == "datasets" else f"Transformers {self.removed}"

    @property
    def api(self) -> str:
        """The API it belonged to: Transformers 4.x (the table's subject), or for ``datasets`` the last
        major release that had it (``datasets 2.x`` for a name removed in 3.0)."""
        if self.library != "datasets":
            return "Transformers 4.x"
        major, minor = self.removed.split()[-1].split(".")
        return f"datasets {int(major) - (minor == '0')}.x"


_F = Kind.FIELD


def _field(name: str, deprecated: str | None, removed: str, served: Served, replacement: str, reason: str,
           type_: Any, default: Any, new: str | None = None, values: tuple[tuple[Any, Any], ...] = (),
           refuse: tuple[Any, ...] = ()) -> LegacyName:
    return LegacyName(name, _F, deprecated, removed, served, replacement, reason, new, values, default, type_, refuse)


R, M, N, X = Served.RENAMED, Served.MAPPED, Served.NO_OP, Served.REFUSED
_OSTR, _OINT = Optional[str], Optional[int]  # the 4.x annotations, which HfArgumentParser reads

FIELDS: tuple[LegacyName, ...] = (
    _field("evaluation_strategy", "4.41", "4.51", R, "--eval_strategy", "renamed in 4.41; same values",
           _OSTR, "no", new="eval_strategy"),
    _field("overwrite_output_dir", None, "5.0", N, "a field of the script's own arguments dataclass",
           "4.x scripts read it themselves (start over instead of resuming from the last checkpoint in "
           "output_dir); the 4.x Trainer never did, so keeping the attribute keeps that behaviour",
           bool, False),
    _field("per_gpu_train_batch_size", "<=4.30", "5.0", R, "--per_device_train_batch_size",
           "4.x let it override per_device_train_batch_size", _OINT, None, new="per_device_train_batch_size"),
    _field("per_gpu_eval_batch_size", "<=4.30", "5.0", R, "--per_device_eval_batch_size",
           "4.x let it override per_device_eval_batch_size", _OINT, None, new="per_device_eval_batch_size"),
    _field("no_cuda", "4.34", "5.0", R, "--use_cpu", "renamed in 4.34", bool, False, new="use_cpu"),
    _field("adafactor", "<=4.30", "5.0", M, "--optim adafactor",
           "4.x set optim='adafactor' for it, which is what today's optim does", bool, False,
           new="optim", values=((True, "adafactor"),)),
    _field("group_by_length", None, "5.x", M, "--train_sampling_strategy group_by_length",
           "the LengthGroupedSampler it chose is today's train_sampling_strategy='group_by_length'", bool, False,
           new="train_sampling_strategy", values=((True, "group_by_length"),)),
    _field("warmup_ratio", "5.0", "5.x", M, "--warmup_steps RATIO",
           "today warmup_steps below 1 is a ratio of the training steps, which is what warmup_ratio was; "
           "4.x used it only while warmup_steps was 0", float, 0.0, new="warmup_steps", refuse=(1.0, 1)),
    _field("logging_dir", "5.0", "5.x", M, "TENSORBOARD_LOGGING_DIR=DIR (environment)",
           "today's TensorBoard callback reads its folder from the environment", _OSTR, None,
           new="TENSORBOARD_LOGGING_DIR"),
    _field("include_inputs_for_metrics", "4.46", "5.0", M, "--include_for_metrics inputs",
           "EvalPrediction.inputs is filled by include_for_metrics=['inputs'] today", bool, False,
           new="include_for_metrics", values=((True, ["inputs"]),)),
    _field("fsdp_min_num_params", "<=4.30", "5.0", M, "--fsdp_config '{\"min_num_params\": N}'",
           "4.x moved it into fsdp_config['min_num_params'] itself", int, 0, new="fsdp_config"),
    _field("fsdp_transformer_layer_cls_to_wrap", "<=4.30", "5.0", M,
           "--fsdp_config '{\"transformer_layer_cls_to_wrap\": [\"Block\"]}'",
           "4.x moved it into fsdp_config['transformer_layer_cls_to_wrap'] itself", _OSTR, None, new="fsdp_config"),
    _field("tpu_metrics_debug", "<=4.30", "5.0", M, "--debug tpu_metrics_debug",
           "4.x turned it into debug='tpu_metrics_debug' itself", bool, False,
           new="debug", values=((True, "tpu_metrics_debug"),)),
    _field("push_to_hub_model_id", "<=4.30", "5.0", R, "--hub_model_id", "4.x copied it into hub_model_id", _OSTR,
           None, new="hub_model_id"),
    _field("push_to_hub_organization", "<=4.30", "5.0", M, "--hub_model_id ORGANIZATION/NAME",
           "4.x prefixed hub_model_id with it", _OSTR, None, new="hub_model_id"),
    _field("push_to_hub_token", "<=4.30", "5.0", R, "--hub_token", "4.x copied it into hub_token", _OSTR, None,
           new="hub_token"),
    _field("torchdynamo", "<=4.30", "5.0", R, "--torch_compile_backend",
           "4.x turned it into torch_compile_backend (which implies torch_compile)", _OSTR, None,
           new="torch_compile_backend"),
    _field("xpu_backend", "<=4.30", "4.32", R, "--ddp_backend", "4.31 renamed it ddp_backend", _OSTR, None,
           new="ddp_backend"),
    _field("half_precision_backend", None, "5.0", N, "",
           "'auto', 'cuda_amp', 'cpu_amp' and 'amp' are torch.amp, the only backend today (with --fp16/--bf16)",
           str, "auto", refuse=("apex",)),
    _field("fp16_backend", "<=4.30", "5.0", N, "",
           "the old name of half_precision_backend: torch.amp is the only backend today", str, "auto",
           refuse=("apex",)),
    _field("fp16_opt_level", None, "5.0", N, "", "read only by NVIDIA apex, which no release since 5.0 uses",
           str, "O1"),
    _field("save_safetensors", None, "5.0", N, "",
           "today checkpoints are always safetensors (model.safetensors instead of pytorch_model.bin); "
           "from_pretrained loads either, so scripts reload them unchanged", bool, False),
    _field("use_mps_device", "4.31", "5.0", N, "", "the MPS device is chosen whenever it is available (4.31 on)",
           bool, False),
    _field("jit_mode_eval", None, "5.0", N, "",
           "it traced the model with torch.jit for inference: speed only, the metrics are the same", bool, False),
    _field("use_ipex", "4.53", "4.57", N, "",
           "Intel Extension for PyTorch optimised the model: speed only, the training is the same", bool, False),
    _field("tpu_num_cores", None, "5.0", N, "", "read by the xla_spawn launcher, never by the Trainer", _OINT,
           None),
    _field("mp_parameters", None, "5.0", N, "", "read by the SageMaker launcher, never by the Trainer", str, ""),
    _field("use_legacy_prediction_loop", None, "5.0", N, "",
           "evaluation_loop computes the same predictions and metrics as the removed prediction_loop", bool, False),
    _field("ray_scope", None, "5.0", N, "",
           "only Ray Tune hyperparameter search read it; its default 'last' is how Ray picks a trial today",
           str, "last", refuse=("all", "avg", "last-5", "last-10")),
    _field("past_index", None, "5.0", X, "compute the memories in the model's forward",
           "the Trainer fed outputs[past_index] back as `mems` (Transformer-XL, XLNet); no release does now",
           int, -1, refuse=(NOT_GIVEN,)),
)

OTHERS: tuple[LegacyName, ...] = (
    LegacyName("tokenizer", Kind.TRAINER, "4.46", "5.0", R, "processing_class=",
               "renamed in 4.46; the Trainer saves and pads with it as before", new="processing_class"),
    LegacyName("prediction_loss_only", Kind.TRAINER, "3.x", "4.0", M, "args.prediction_loss_only",
               "3.x moved it into the arguments, where evaluation reads it (4.30's examples/legacy still passed "
               "it to the Trainer)", new="args.prediction_loss_only"),
    LegacyName("use_auth_token", Kind.FROM_PRETRAINED, "4.31", "5.0", R, "token=",
               "renamed in 4.31; today it reaches the model's __init__ and fails there with a TypeError",
               new="token"),
    LegacyName("use_auth_token", Kind.DATASETS, "datasets 2.14", "datasets 3.0", R, "token=",
               "the 4.x example scripts pass it to load_dataset; today it reaches the builder config "
               "and fails there with a TypeError", new="token"),
    LegacyName("load_metric", Kind.DATASETS_FUNCTION, "datasets 2.5", "datasets 3.0", M, "evaluate.load(...)",
               "the metrics moved to the evaluate library, whose load takes the same metric names and keywords "
               "(pip install evaluate; load_metric's third positional argument, process_id, goes by keyword)",
               new="evaluate:load"),
    LegacyName("list_metrics", Kind.DATASETS_FUNCTION, "datasets 2.5", "datasets 3.0", M,
               'evaluate.list_evaluation_modules(module_type="metric")',
               "the metrics moved to the evaluate library, which lists them among its other modules "
               "(pip install evaluate; the keyword with_community_metrics is include_community there)"),
    LegacyName("ArrowWriter", Kind.DATASETS_FUNCTION, None, "datasets 2.0", R, "datasets.arrow_writer.ArrowWriter",
               "the same class, no longer exported at the top level", new="datasets.arrow_writer:ArrowWriter"),
    LegacyName("is_torch_tpu_available", Kind.TOP_LEVEL, "4.39", "4.51", M, "is_torch_xla_available()",
               "the same question (is torch_xla usable)", new="is_torch_xla_available"),
    LegacyName("is_tf_available", Kind.TOP_LEVEL, None, "5.0", M, "False",
               "5.x has no TensorFlow support, so the answer is False", new=None),
    LegacyName("is_flax_available", Kind.TOP_LEVEL, None, "5.0", M, "False",
               "5.x has no Flax support, so the answer is False", new=None),
    LegacyName("is_safetensors_available", Kind.TOP_LEVEL, None, "5.0", M, "True",
               "safetensors is a dependency of every 5.x install", new=None),
    LegacyName("send_example_telemetry", Kind.UTILS, None, "4.57", N, "",
               "telemetry of the example scripts; nothing to send today"),
    LegacyName("is_tf_available", Kind.UTILS, None, "5.0", M, "False",
               "5.x has no TensorFlow support, so the answer is False"),
    LegacyName("is_torch_bf16_available", Kind.UTILS, "<=4.30", "5.0", M, "is_torch_bf16_gpu_available()",
               "4.x answered it for the GPU", new="is_torch_bf16_gpu_available"),
)

ROWS: tuple[LegacyName, ...] = FIELDS + OTHERS
#: The ``datasets`` functions whose keywords the :attr:`Kind.DATASETS` rows are.
DATASETS_LOADERS = ("load_dataset", "load_dataset_builder")


def loader_callees(tree: ast.AST) -> dict[str, str]:
    """How a file's imports let it call :data:`DATASETS_LOADERS`: each callee spelling
    (``load_dataset``, ``ds.load_dataset`` after ``import datasets as ds``) -> the loader.  A
    script's own ``load_dataset`` is none of them."""
    callees: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "datasets" and not node.level:
            callees.update((a.asname or a.name, a.name) for a in node.names if a.name in DATASETS_LOADERS)
        elif isinstance(node, ast.Import):
            callees.update((f"{a.asname or a.name}.{f}", f) for a in node.names if a.name == "datasets"
                           for f in DATASETS_LOADERS)
    return callees


def by_kind(kind: Kind) -> tuple[LegacyName, ...]:
    return tuple(r for r in ROWS if r.kind is kind)


def row(name: str, kind: Kind = Kind.FIELD) -> LegacyName:
    """The row for ``name`` of ``kind``; KeyError when the table has none."""
    for candidate in ROWS:
        if candidate.name == name and candidate.kind is kind:
            return candidate
    raise KeyError(f"{kind}: {name}")


# ====================================================================== the rest of the 4.30 surface
# Every other public name of 4.30.2 that the installed release lacks (found by
# ``python -m shardcompat.transformers.legacy_survey WHEEL``): module names, top-level names and
# the public members of the Trainer, TrainingArguments, tokenizer and model base classes.  A row
# names one spelling (``transformers.trainer.ShardedDDPOption``, ``Trainer.scaler``,
# ``PreTrainedModel.from_pretrained(from_tf=)``) or, with ``*``, a family of them; the first row
# that matches a name covers it (:func:`lookup`).  ``removed`` is ``>4.30`` where the release
# that dropped the name is not pinned (4.30.2 had it, the installed release lacks it).


class Home(str, enum.Enum):
    """Who serves a row (for a refused row: who would have to)."""

    IMPORT = "import path"  # shardcompat puts the name back at its 4.x module, resolving ``target``
    CLASS = "class member"  # shardcompat adds the member to the installed class (``target``)
    ARGUMENTS = "TrainingArguments drop-in"  # the legacy fields above; ``sharded_ddp`` itself
    TRAINER = "Trainer drop-in"  # the Trainer integration (issue 30, section 2)
    RELEASE = "installed release"  # today's release still answers it another way (``reason`` says how)
    NONE = "-"  # refused

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Removed:
    """One removed 4.x name, or (``*`` in ``pattern``) a family of them.

    ``pattern`` is matched against the survey's spelling of the name; ``origin`` and ``backend``
    (globs) narrow a family to where 4.30 defined the name and the optional dependency it needed;
    ``gone_model`` to names of a model the installed release no longer has.  ``target`` is what a
    served row resolves to, ``"module:attribute"`` (``{name}``: the removed name itself).
    ``alias`` sends the lookup to another module's rows (``transformers.file_utils`` was the 4.x
    alias of ``transformers.utils``).
    """

    pattern: str
    served: Served
    replacement: str
    reason: str
    home: Home = Home.IMPORT
    target: str | None = None
    removed: str = ">4.30"
    deprecated: str | None = None
    origin: str | None = None
    backend: str | None = None
    gone_model: bool = False
    alias: str | None = None

    @property
    def name(self) -> str:
        return self.pattern

    @property
    def family(self) -> bool:
        return "*" in self.pattern or self.origin is not None or self.backend is not None or self.gone_model

    def target_for(self, spelling: str) -> str | None:
        if self.target is None:
            return None
        return self.target.replace("{name}", spelling.rsplit(".", 1)[-1])


_LF = "shardcompat.transformers._legacy_functions"
_I, _C, _T, _A, _RL, _NO = Home.IMPORT, Home.CLASS, Home.TRAINER, Home.ARGUMENTS, Home.RELEASE, Home.NONE

#: 4.30 re-exported these names from another Transformers module, which still has them: they
#: are served from there (the value is the module to import from today).
MOVED: dict[str, str] = {
    "transformers.data.data_collator.BertTokenizer": "transformers",
    # 4.30 imported it from models.bert.tokenization_bert (REEXPORTS), where 5.x no longer has it
    "transformers.data.processors.squad.whitespace_tokenize": "transformers.models.bert.tokenization_bert_legacy",
    "transformers.file_utils.is_torch_tpu_available": "transformers.utils",
    "transformers.modeling_utils.BitsAndBytesConfig": "transformers",
    "transformers.modeling_utils.Conv1D": "transformers.pytorch_utils",
    "transformers.modeling_utils.ENV_VARS_TRUE_VALUES": "transformers.utils.import_utils",
    "transformers.modeling_utils.GenerationMixin": "transformers.generation",
    "transformers.modeling_utils.ModelOutput": "transformers.utils",
    "transformers.modeling_utils.PretrainedConfig": "transformers",
    "transformers.modeling_utils.apply_chunking_to_forward": "transformers.pytorch_utils",
    "transformers.modeling_utils.convert_file_size_to_int": "transformers.utils.hub",
    "transformers.modeling_utils.get_activation": "transformers.activations",
    "transformers.modeling_utils.is_optimum_available": "transformers.utils",
    "transformers.modeling_utils.is_torch_tpu_available": "transformers.utils",
    "transformers.modeling_utils.load_sharded_checkpoint": "transformers.trainer_utils",
    "transformers.modeling_utils.prune_linear_layer": "transformers.pytorch_utils",
    "transformers.modeling_utils.replace_return_docstrings": "transformers.utils",
    "transformers.modeling_utils.require_version_core": "transformers.utils.versions",
    "transformers.modeling_utils.no_init_weights": "transformers.initialization",
    "transformers.modeling_utils.find_tied_parameters": "accelerate.utils",
    "transformers.modeling_utils.check_tied_parameters_on_same_device": "accelerate.utils",
    "transformers.modeling_utils.get_balanced_memory": "accelerate.utils",
    "transformers.optimization.require_version": "transformers.utils.versions",
    "transformers.trainer.ALL_LAYERNORM_LAYERS": "transformers.pytorch_utils",
    "transformers.trainer.Adafactor": "transformers.optimization",
    "transformers.trainer.ContextManagers": "transformers.utils",
    "transformers.trainer.DistributedLengthGroupedSampler": "transformers.trainer_pt_utils",
    "transformers.trainer.DistributedSamplerWithLoop": "transformers.trainer_pt_utils",
    "transformers.trainer.FSDPOption": "transformers.trainer_utils",
    "transformers.trainer.IS_SAGEMAKER_MP_POST_1_10": "transformers.modeling_utils",
    "transformers.trainer.IntervalStrategy": "transformers.trainer_utils",
    "transformers.trainer.PretrainedConfig": "transformers",
    "transformers.trainer.ShardSampler": "transformers.trainer_pt_utils",
    "transformers.trainer.dep_version_check": "transformers.dependency_versions_check",
    "transformers.trainer.distributed_concat": "transformers.trainer_pt_utils",
    "transformers.trainer.get_module_class_from_name": "transformers.trainer_pt_utils",
    "transformers.trainer.hp_params": "transformers.integrations",
    "transformers.trainer.is_apex_available": "transformers.utils",
    "transformers.trainer.is_deepspeed_zero3_enabled": "transformers.integrations.deepspeed",
    "transformers.trainer.is_optuna_available": "transformers.integrations",
    "transformers.trainer.is_ray_tune_available": "transformers.integrations",
    "transformers.trainer.is_torch_neuroncore_available": "transformers.utils",
    "transformers.trainer.is_torch_tpu_available": "transformers.utils",
    "transformers.trainer.is_wandb_available": "transformers.integrations",
    "transformers.trainer.nested_concat": "transformers.trainer_pt_utils",
    "transformers.trainer.nested_numpify": "transformers.trainer_pt_utils",
    "transformers.trainer.nested_truncate": "transformers.trainer_pt_utils",
    "transformers.trainer.nested_xla_mesh_reduce": "transformers.trainer_pt_utils",
    "transformers.trainer.run_hp_search_optuna": "transformers.integrations",
    "transformers.trainer.run_hp_search_ray": "transformers.integrations",
    "transformers.trainer.run_hp_search_wandb": "transformers.integrations",
    "transformers.trainer.strtobool": "transformers.utils",
    "transformers.trainer_pt_utils.BatchEncoding": "transformers",
    "transformers.trainer_pt_utils.is_torch_tpu_available": "transformers.utils",
    "transformers.trainer_utils.is_torch_tpu_available": "transformers.utils",
    "transformers.trainer_utils.EvaluationStrategy": "transformers.trainer_utils:IntervalStrategy",
    "transformers.training_args.EvaluationStrategy": "transformers.trainer_utils:IntervalStrategy",
    "transformers.trainer.default_hp_space": "transformers.trainer_utils:default_hp_space_optuna",
    "transformers.trainer_utils.default_hp_space": "transformers.trainer_utils:default_hp_space_optuna",
    "transformers.modeling_utils.Identity": "torch.nn",
    "transformers.modeling_utils.importlib_metadata": "importlib:metadata",
    "transformers.LogitsWarper": "transformers:LogitsProcessor",
    "transformers.AutoModelForVision2Seq": "transformers:AutoModelForImageTextToText",
    "transformers.MODEL_FOR_VISION_2_SEQ_MAPPING": "transformers:MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING",
    "transformers.Wav2Vec2Tokenizer": "transformers:Wav2Vec2CTCTokenizer",
    "transformers.MT5Tokenizer": "transformers:T5Tokenizer",
    "transformers.BloomTokenizerFast": "transformers:TokenizersBackend",  # what 5.x's AutoTokenizer maps it to
    "transformers.utils.is_offline_mode": "huggingface_hub",
    "transformers.trainer.get_full_repo_name": f"{_LF}",
    "transformers.utils.cached_property": "functools",
}
for _module in ("trainer", "trainer_utils", "training_args"):
    MOVED[f"transformers.{_module}.ShardedDDPOption"] = "shardcompat.transformers._sharded_ddp_option"
for _name in ("HfDeepSpeedConfig", "HfTrainerDeepSpeedConfig", "deepspeed_config", "deepspeed_init",
              "deepspeed_load_checkpoint", "deepspeed_optim_sched", "dep_version_check", "is_accelerate_available",
              "is_deepspeed_available", "is_deepspeed_zero3_enabled", "is_torch_available", "logger", "logging",
              "set_hf_deepspeed_config", "unset_hf_deepspeed_config"):
    MOVED[f"transformers.deepspeed.{_name}"] = "transformers.integrations.deepspeed"

#: 4.30 tokenizer classes whose code 5.x keeps under another name: ``XTokenizerFast`` (5.x's
#: ``XTokenizer`` is the tokenizers-backed one) and the 4.30 copies of another model's tokenizer.
TOKENIZERS: dict[str, str] = {
    stem: stem for stem in (
        "Albert", "Barthez", "Bert", "BigBird", "BlenderbotSmall", "Blenderbot", "CLIP", "Camembert", "CodeGen",
        "ConvBert", "Deberta", "DebertaV2", "Funnel", "GPT2", "GPTNeoX", "Herbert", "LayoutLMv2", "LayoutXLM",
        "MBart50", "MBart", "MPNet", "Nllb", "OpenAIGPT", "Pegasus", "Reformer", "RemBert", "Splinter", "T5",
        "Whisper", "XGLM", "XLMRoberta", "XLNet")
} | {"LED": "Bart", "Longformer": "Roberta", "Lxmert": "Bert", "LayoutLM": "Bert", "Electra": "Bert",
     "Mvp": "Roberta", "MT5": "T5"}
for _stem, _home in TOKENIZERS.items():
    MOVED[f"transformers.{_stem}TokenizerFast"] = f"transformers:{_home}Tokenizer"
    if _stem != _home and _stem != "MT5":
        MOVED[f"transformers.{_stem}Tokenizer"] = f"transformers:{_home}Tokenizer"
MOVED["transformers.data.data_collator.BertTokenizerFast"] = "transformers:BertTokenizer"
#: The vision FeatureExtractor classes 4.30 kept as deprecated subclasses of the image processors.
for _stem in ("Beit", "CLIP", "ChineseCLIP", "ConditionalDetr", "ConvNext", "DPT", "DeformableDetr", "DeiT", "Detr",
              "Donut", "Flava", "GLPN", "ImageGPT", "LayoutLMv2", "LayoutLMv3", "Levit", "MaskFormer", "MobileNetV1",
              "MobileNetV2", "MobileViT", "OwlViT", "Perceiver", "PoolFormer", "Segformer", "ViT", "VideoMAE", "Vilt",
              "Yolos"):
    MOVED[f"transformers.{_stem}FeatureExtractor"] = f"transformers:{_stem}ImageProcessor"


def _moved(spelling: str, home: str) -> Removed:
    module, _, attr = home.partition(":")
    old = spelling.rsplit(".", 1)[-1]
    attr = attr or old
    reason = (f"4.30's name of {module}.{attr}" if attr != old
              else f"4.30 re-exported it here; {module} has it today")
    return Removed(spelling, R, f"from {module} import {attr}", reason, target=f"{module}:{attr}")


def _served(pattern: str, replacement: str, reason: str, target: str | None, home: Home = Home.IMPORT,
            served: Served = Served.MAPPED, **kw: Any) -> Removed:
    return Removed(pattern, served, replacement, reason, home, target, **kw)


def _refused(pattern: str, replacement: str, reason: str, home: Home = Home.NONE, **kw: Any) -> Removed:
    return Removed(pattern, X, replacement, reason, home, **kw)


_NO_TF = "5.x is PyTorch only (no TensorFlow, no Flax)"
_FALSE = f"{_LF}:answer_false"
_TRUE = f"{_LF}:answer_true"
_WWM = "DataCollatorForLanguageModeling(tokenizer, whole_word_mask=True)"
_WWM_WHY = ("4.30's masks: WordPiece words and the script's chinese_ref pieces, drawn from the same generators "
            "in the same order (written with torch); 5.x finds words from the tokenizer's offsets instead, "
            "which 4.30's Chinese reference data does not carry, and masks differently")
_WWM_AT = "shardcompat.transformers._legacy_collator:DataCollatorForWholeWordMask"

SERVED_NAMES: tuple[Removed, ...] = (
    # module names with today's behaviour (shardcompat._legacy_functions holds the small adapters)
    _served("transformers.AdamW", "torch.optim.AdamW(params, lr, eps=1e-6, weight_decay=0.0)",
            "torch's AdamW with 4.30's defaults (eps=1e-6, weight_decay=0.0); 4.30 applied the decay after the "
            "Adam step and eps before the bias correction, which differs at second order only; "
            "correct_bias=False (no bias correction) is refused, torch has no such mode",
            f"{_LF}:AdamW", deprecated="4.26"),
    _served("transformers.optimization.AdamW", "torch.optim.AdamW(params, lr, eps=1e-6, weight_decay=0.0)",
            "the same class as transformers.AdamW", f"{_LF}:AdamW", deprecated="4.26"),
    _served("transformers.AutoModelWithLMHead", "AutoModelForCausalLM, AutoModelForMaskedLM or AutoModelForSeq2SeqLM",
            "the class 4.30 chose for the config's model type (LM_HEAD_MODELS, read from 4.30.2), loaded by "
            "today's from_pretrained / from_config; a type whose class 5.x removed is refused naming it",
            f"{_LF}:AutoModelWithLMHead", deprecated="<=4.30"),
    _served("transformers.MODEL_WITH_LM_HEAD_MAPPING", "MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING or "
            "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING", "the mapping of the deprecated AutoModelWithLMHead: each config "
            "class to the class 4.30 chose (LM_HEAD_MODELS), for the types the installed release still has",
            f"{_LF}:MODEL_WITH_LM_HEAD_MAPPING", deprecated="<=4.30"),
    _served("transformers.DataCollatorForWholeWordMask", _WWM, _WWM_WHY, _WWM_AT),
    _served("transformers.data.data_collator.DataCollatorForWholeWordMask", _WWM, _WWM_WHY, _WWM_AT),
    _served("transformers.data.DataCollatorForWholeWordMask", _WWM, _WWM_WHY, _WWM_AT),
    _served("transformers.trainer.is_fairscale_available", "importlib.util.find_spec('fairscale') is not None",
            "the same question: is fairscale importable (under shardcompat run the facade answers for it)",
            f"{_LF}:is_fairscale_available"),
    _served("transformers.trainer.is_sigopt_available", "False", "5.x dropped SigOpt support", _FALSE),
    _served("transformers.trainer.is_torch_compile_available", "hasattr(torch, 'compile')",
            "torch 2 always has torch.compile", _TRUE),
    _served("transformers.trainer.is_torch_greater_or_equal_than_1_10", "True",
            "every torch 5.x runs on is 2.x", _TRUE),
    _served("transformers.trainer.is_torch_less_than_1_11", "False", "every torch 5.x runs on is 2.x", _FALSE),
    _served("transformers.pytorch_utils.is_torch_greater_or_equal_than_1_10", "True",
            "every torch 5.x runs on is 2.x", f"{_LF}:TRUE"),
    _served("transformers.pytorch_utils.is_torch_less_than_1_11", "False",
            "every torch 5.x runs on is 2.x", f"{_LF}:FALSE"),
    _served("transformers.pytorch_utils.parsed_torch_version_base",
            "packaging.version.parse(packaging.version.parse(torch.__version__).base_version)",
            "the same value", f"{_LF}:parsed_torch_version_base"),
    _served("transformers.trainer.is_safetensors_available", "True", "safetensors is a dependency of 5.x", _TRUE),
    _served("transformers.trainer.is_ipex_available", "False",
            "5.x uses no Intel Extension for PyTorch; False keeps scripts off the code paths it served", _FALSE),
    _served("transformers.trainer_pt_utils.SAVE_STATE_WARNING", '""',
            "4.30 defined it as the empty string on every torch it supported", f"{_LF}:SAVE_STATE_WARNING"),
    _served("transformers.trainer_utils.is_tf_available", "False", _NO_TF, _FALSE),
    _served("transformers.training_args.is_safetensors_available", "True", "safetensors is a dependency of 5.x",
            _TRUE),
    _served("transformers.training_args.is_torch_bf16_cpu_available", "True",
            "torch 2 runs bf16 autocast on every CPU", _TRUE),
    _served("transformers.training_args.get_full_repo_name", "huggingface_hub.whoami()['name'] + '/' + NAME",
            "the same answer: ORGANIZATION/NAME, or the token's user name", f"{_LF}:get_full_repo_name"),
    _served("transformers.modeling_utils.is_safetensors_available", "True", "safetensors is a dependency of 5.x",
            _TRUE),
    _served("transformers.modeling_utils.get_parameter_device", "model.device",
            "the device of the first parameter, as 4.30 answered", f"{_LF}:get_parameter_device"),
    _served("transformers.modeling_utils.get_parameter_dtype", "model.dtype",
            "the dtype of the first floating-point parameter, as 4.30 answered", f"{_LF}:get_parameter_dtype"),
    _served("transformers.modeling_utils.get_first_parameter_dtype", "next(model.parameters()).dtype",
            "the same value", f"{_LF}:get_first_parameter_dtype"),
    _served("transformers.modeling_utils.dtype_byte_size", "torch.finfo(dtype).bits / 8",
            "the same value", f"{_LF}:dtype_byte_size"),
    # transformers.utils (and the top level's copies)
    _served("transformers.utils.get_full_repo_name", "huggingface_hub.whoami()['name'] + '/' + NAME",
            "the same answer: ORGANIZATION/NAME, or the token's user name (the 4.30 no_trainer examples "
            "call it before push_to_hub)", f"{_LF}:get_full_repo_name", deprecated="4.34"),
    _served("transformers.utils.TRANSFORMERS_CACHE", "huggingface_hub.constants.HF_HUB_CACHE",
            "4.30 cached in the hub's cache folder", f"{_LF}:HF_HUB_CACHE"),
    _served("transformers.utils.PYTORCH_TRANSFORMERS_CACHE", "huggingface_hub.constants.HF_HUB_CACHE",
            "4.30 cached in the hub's cache folder", f"{_LF}:HF_HUB_CACHE"),
    _served("transformers.utils.PYTORCH_PRETRAINED_BERT_CACHE", "huggingface_hub.constants.HF_HUB_CACHE",
            "4.30 cached in the hub's cache folder", f"{_LF}:HF_HUB_CACHE"),
    _served("transformers.utils.default_cache_path", "huggingface_hub.constants.default_cache_path",
            "4.30 took it from the hub", "huggingface_hub.constants:default_cache_path"),
    _served("transformers.utils.HUGGINGFACE_CO_RESOLVE_ENDPOINT", "huggingface_hub.constants.ENDPOINT",
            "the same endpoint", "huggingface_hub.constants:ENDPOINT"),
    _served("transformers.utils.HUGGINGFACE_CO_PREFIX", "huggingface_hub.constants.HUGGINGFACE_CO_URL_TEMPLATE",
            "the same URL template", f"{_LF}:HUGGINGFACE_CO_PREFIX"),
    _served("transformers.utils.DISABLE_TELEMETRY", "huggingface_hub.constants.HF_HUB_DISABLE_TELEMETRY",
            "the same switch", "huggingface_hub.constants:HF_HUB_DISABLE_TELEMETRY"),
    _served("transformers.utils.TF2_WEIGHTS_NAME", '"tf_model.h5"', "the same file name", f"{_LF}:TF2_WEIGHTS_NAME"),
    _served("transformers.utils.TF2_WEIGHTS_INDEX_NAME", '"tf_model.h5.index.json"', "the same file name",
            f"{_LF}:TF2_WEIGHTS_INDEX_NAME"),
    _served("transformers.utils.TF_WEIGHTS_NAME", '"model.ckpt"', "the same file name", f"{_LF}:TF_WEIGHTS_NAME"),
    _served("transformers.utils.FLAX_WEIGHTS_NAME", '"flax_model.msgpack"', "the same file name",
            f"{_LF}:FLAX_WEIGHTS_NAME"),
    _served("transformers.utils.FLAX_WEIGHTS_INDEX_NAME", '"flax_model.msgpack.index.json"', "the same file name",
            f"{_LF}:FLAX_WEIGHTS_INDEX_NAME"),
    _served("transformers.utils.USE_TORCH", 'os.environ.get("USE_TORCH", "AUTO").upper()', "the same value",
            f"{_LF}:USE_TORCH"),
    _served("transformers.utils.USE_TF", 'os.environ.get("USE_TF", "AUTO").upper()', "the same value",
            f"{_LF}:USE_TF"),
    _served("transformers.utils.USE_JAX", 'os.environ.get("USE_FLAX", "AUTO").upper()', "the same value",
            f"{_LF}:USE_JAX"),
    *(_served(f"transformers.utils.{n}", "False", _NO_TF, _FALSE) for n in (
        "is_flax_available", "is_keras_nlp_available", "is_tensorflow_probability_available",
        "is_tensorflow_text_available", "is_tf2onnx_available")),
    _served("transformers.utils.is_ipex_available", "False",
            "5.x uses no Intel Extension for PyTorch; False keeps scripts off the code paths it served", _FALSE),
    *(_served(f"transformers.utils.{n}", "True", why, _TRUE) for n, why in (
        ("is_safetensors_available", "safetensors is a dependency of 5.x"),
        ("is_torch_fx_available", "torch 2 always has torch.fx"),
        ("is_torch_compile_available", "torch 2 always has torch.compile"),
        ("is_torchdynamo_available", "torch 2 always has TorchDynamo"),
        ("is_torch_bf16_cpu_available", "torch 2 runs bf16 autocast on every CPU"))),
    *(_served(f"transformers.utils.{n}", f"importlib.util.find_spec({pkg!r}) is not None",
              "the same question: is the package importable", f"{_LF}:{n}") for n, pkg in (
        ("is_ftfy_available", "ftfy"), ("is_jieba_available", "jieba"), ("is_soundfile_availble", "soundfile"),
        ("is_decord_available", "decord"))),
    _served("transformers.utils.working_or_temp_dir", "tempfile.TemporaryDirectory()",
            "the same context manager: the folder itself, or a temporary one", f"{_LF}:working_or_temp_dir"),
    _served("transformers.utils.is_remote_url", "urllib.parse.urlparse(url).scheme in ('http', 'https')",
            "the same question", f"{_LF}:is_remote_url"),
)
_BY_PATTERN = {r.pattern: r for r in SERVED_NAMES}
#: The top level's copies of ``transformers.utils`` names (4.30 exported them both ways).
SERVED_NAMES += tuple(
    dataclasses.replace(_BY_PATTERN[f"transformers.utils.{n}"], pattern=f"transformers.{n}")
    for n in ("TRANSFORMERS_CACHE", "PYTORCH_TRANSFORMERS_CACHE", "PYTORCH_PRETRAINED_BERT_CACHE",
              "is_keras_nlp_available", "is_tensorflow_text_available", "is_decord_available"))

#: 4.30's GLUE and SQuAD data layers (``transformers.data``), which Transformers dropped without a
#: successor: shardcompat keeps them in public modules (the migration imports the names from
#: there), served at every module 4.30 had each name in (the survey of its wheel lists them).
_GLUE_CORE = ("DataProcessor", "InputExample", "InputFeatures", "glue_convert_examples_to_features",
              "glue_output_modes", "glue_processors", "glue_tasks_num_labels")
_GLUE_DATASET = ("GlueDataTrainingArguments", "GlueDataset")
_SINGLE = "SingleSentenceClassificationProcessor"
GLUE_HOMES: dict[str, tuple[str, ...]] = {
    "transformers": (*_GLUE_CORE, _SINGLE, "glue_compute_metrics", *_GLUE_DATASET),
    "transformers.data": (*_GLUE_CORE, _SINGLE, "glue_compute_metrics"),
    "transformers.data.processors": (*_GLUE_CORE, _SINGLE),
    "transformers.data.processors.utils": (*_GLUE_CORE[:3], _SINGLE),
    "transformers.data.processors.glue": (*_GLUE_CORE, "OutputMode", *(f"{t}Processor" for t in (
        "Cola", "Mnli", "MnliMismatched", "Mrpc", "Qnli", "Qqp", "Rte", "Sst2", "Stsb", "Wnli"))),
    "transformers.data.metrics": ("simple_accuracy", "acc_and_f1", "pearson_and_spearman", "glue_compute_metrics"),
    "transformers.data.datasets": _GLUE_DATASET,
    "transformers.data.datasets.glue": (*_GLUE_DATASET, "Split", "InputFeatures", "glue_convert_examples_to_features",
                                        "glue_output_modes", "glue_processors"),
}
_SQUAD_CORE = ("SquadExample", "SquadFeatures", "SquadV1Processor", "SquadV2Processor",
               "squad_convert_examples_to_features")
_SQUAD_DATASET = ("SquadDataTrainingArguments", "SquadDataset")
SQUAD_HOMES: dict[str, tuple[str, ...]] = {
    "transformers": (*_SQUAD_CORE, *_SQUAD_DATASET),
    "transformers.data": _SQUAD_CORE,
    "transformers.data.processors": _SQUAD_CORE,
    "transformers.data.datasets": _SQUAD_DATASET,
    "transformers.data.datasets.squad": (*_SQUAD_DATASET, "Split", "SquadFeatures", "SquadV1Processor",
                                         "SquadV2Processor", "squad_convert_examples_to_features"),
    "transformers.data.processors.squad": (
        *_SQUAD_CORE, "SquadProcessor", "SquadResult", "DataProcessor", "MULTI_SEP_TOKENS_TOKENIZERS_SET",
        "squad_convert_example_to_features", "squad_convert_example_to_features_init"),
    "transformers.data.metrics.squad_metrics": (
        "normalize_answer", "get_tokens", "compute_exact", "compute_f1", "get_raw_scores", "apply_no_ans_threshold",
        "make_eval_dict", "merge_eval", "find_best_thresh", "find_best_thresh_v2", "find_all_best_thresh",
        "find_all_best_thresh_v2", "squad_evaluate", "get_final_text", "compute_predictions_logits",
        "compute_predictions_log_probs"),
}
_XNLI_CORE = ("xnli_output_modes", "xnli_processors", "xnli_tasks_num_labels")
XNLI_HOMES: dict[str, tuple[str, ...]] = {
    "transformers": (*_XNLI_CORE, "xnli_compute_metrics"),
    "transformers.data": (*_XNLI_CORE, "xnli_compute_metrics"),
    "transformers.data.processors": _XNLI_CORE,
    "transformers.data.processors.xnli": (*_XNLI_CORE, "XnliProcessor", "DataProcessor", "InputExample"),
    "transformers.data.metrics": ("xnli_compute_metrics",),
}
_TEXT = ("TextDataset", "LineByLineTextDataset", "LineByLineWithRefDataset", "LineByLineWithSOPTextDataset",
         "TextDatasetForNextSentencePrediction")
TEXT_HOMES: dict[str, tuple[str, ...]] = {
    "transformers": _TEXT, "transformers.data.datasets": _TEXT, "transformers.data.datasets.language_modeling": _TEXT}
#: The public module that keeps each layer, with what it serves and why.
KEPT: dict[str, tuple[dict[str, tuple[str, ...]], str]] = {
    "shardcompat.transformers.glue": (GLUE_HOMES, (
        "Transformers has no successor, so shardcompat keeps 4.30's reading of GLUE's TSV files, its features and "
        "scores (with scikit-learn and SciPy, as 4.x); GlueDataset caches its features as JSON and never loads 4.x's "
        "pickled cache; load_dataset('glue', TASK) and evaluate.load('glue', TASK) are today's way, as today's "
        "run_glue.py")),
    "shardcompat.transformers.text_datasets": (TEXT_HOMES, (
        "Transformers has no successor, so shardcompat keeps 4.30's blocks, lines and sentence pairs of a text file, "
        "with the model's special tokens and 4.x's draws from random; its caches are JSON and 4.x's pickled ones are "
        "never loaded; "
        "load_dataset('text', ...) grouped as today's run_clm.py is today's way")),
    "shardcompat.transformers.xnli": (XNLI_HOMES, (
        "Transformers has no successor, so shardcompat keeps 4.30's reading of XNLI's TSV files and its accuracy; "
        "load_dataset('xnli', LANGUAGE) is today's way")),
    "shardcompat.transformers.squad": (SQUAD_HOMES, (
        "Transformers has no successor, so shardcompat keeps 4.30's reading of SQuAD's JSON files, its document spans "
        "(as 4.x's slow tokenizers cut them), SquadDataset (its cache is JSON; 4.x's torch.save cache is never "
        "loaded), answer decoding and official scores; load_dataset('squad'), the "
        "features and post-processing of today's run_qa.py and evaluate.load('squad') are today's way")),
}
SERVED_NAMES += tuple(
    _served(f"{module}.{name}", f"from {kept} import {name}", why, f"{kept}:{name}", deprecated="<=4.30",
            removed="5.0")
    for kept, (homes, why) in KEPT.items() for module, names in homes.items() for name in names)

#: What code of the era uses beyond the 4.30 survey: names of modules it does not read, and names
#: gone before 4.30, found by ``python -m shardcompat.transformers.legacy_usage`` over the example
#: scripts of 4.20-4.30 (``examples/pytorch``, ``examples/research_projects`` at each release
#: commit) and over projects that copied the 4.27 Trainer.
EXAMPLES: tuple[Removed, ...] = (
    _moved("transformers.integrations.default_hp_search_backend", "transformers.hyperparameter_search"),
    _served("transformers.integrations.is_fairscale_available", "importlib.util.find_spec('fairscale') is not None",
            "the same question: is fairscale importable (under shardcompat run the facade answers for it)",
            f"{_LF}:is_fairscale_available"),
    _served("transformers.integrations.is_sigopt_available", "False", "5.x dropped SigOpt support", _FALSE),
    _refused("transformers.integrations.run_hp_search_sigopt", "hyperparameter_search(backend='optuna')",
             "5.x dropped SigOpt support"),
    _served("transformers.trainer_pt_utils._get_learning_rate", "self._get_learning_rate()",
            "4.x's helper is today's Trainer method, called on the trainer as before",
            "transformers.trainer:Trainer._get_learning_rate", served=R),
    _moved("transformers.models.gpt2.tokenization_gpt2.bytes_to_unicode", "transformers.convert_slow_tokenizer"),
    _moved("transformers.generation_utils.GenerationMixin", "transformers.generation"),
    *(_served(f"transformers.models.{m}.modeling_{m}.{m.upper()}_{kind}_DOCSTRING", '""',
              "a docstring template for add_start_docstrings; it documented the class and nothing reads it",
              f"{_LF}:DOCSTRING") for m in ("bert", "albert", "roberta") for kind in ("INPUTS", "START")),
    _refused("transformers.file_utils.cached_path", "transformers.utils.cached_file(path_or_repo_id, filename) "
             "or huggingface_hub.hf_hub_download", "it fetched a URL or hub file into the cache; 4.22 removed it",
             removed="4.22"),
    _refused("transformers.data.metrics.*", "the evaluate library's metrics (squad, glue), or the example's own "
             "post-processing (utils_qa.py)", "SQuAD's answer decoding helpers left with 5.0", removed="5.0"),
    _refused("transformers.data.processors.*", "the datasets library (load_dataset) and the example's own "
             "preprocessing", "SQuAD's feature helpers left with 5.0",
             removed="5.0"),
    _refused("transformers.data.datasets.*", "the datasets library (load_dataset) and the tokenizer, as today's "
             "example scripts read their data", "transformers.data's datasets left with 5.0", removed="5.0"),
    _refused("transformers.modeling_flax_utils.*", "the PyTorch classes", _NO_TF, removed="5.0"),
    _refused("transformers.models.*.modeling_flax_*.*", "the PyTorch classes", _NO_TF, removed="5.0"),
    _refused("transformers.models.*.modeling_*.load_tf_weights_in_*", "convert the TensorFlow checkpoint with "
             "Transformers 4.x, then load it", _NO_TF, removed="5.0"),
)

#: 4.30.2's ``MODEL_WITH_LM_HEAD_MAPPING_NAMES``: the class the deprecated ``AutoModelWithLMHead``
#: chose for each model type (masked, causal or seq2seq, by model); ``legacy_survey.lm_head_models``
#: reads it from the wheel and ``nox -s legacy_survey`` checks this copy against it.
LM_HEAD_MODELS: dict[str, str] = {
    "albert": "AlbertForMaskedLM", "bart": "BartForConditionalGeneration", "bert": "BertForMaskedLM",
    "big_bird": "BigBirdForMaskedLM", "bigbird_pegasus": "BigBirdPegasusForConditionalGeneration",
    "blenderbot-small": "BlenderbotSmallForConditionalGeneration", "bloom": "BloomForCausalLM",
    "camembert": "CamembertForMaskedLM", "codegen": "CodeGenForCausalLM", "convbert": "ConvBertForMaskedLM",
    "cpmant": "CpmAntForCausalLM", "ctrl": "CTRLLMHeadModel", "data2vec-text": "Data2VecTextForMaskedLM",
    "deberta": "DebertaForMaskedLM", "deberta-v2": "DebertaV2ForMaskedLM",
    "distilbert": "DistilBertForMaskedLM", "electra": "ElectraForMaskedLM",
    "encoder-decoder": "EncoderDecoderModel", "ernie": "ErnieForMaskedLM", "esm": "EsmForMaskedLM",
    "flaubert": "FlaubertWithLMHeadModel", "fnet": "FNetForMaskedLM", "fsmt": "FSMTForConditionalGeneration",
    "funnel": "FunnelForMaskedLM", "git": "GitForCausalLM", "gpt-sw3": "GPT2LMHeadModel",
    "gpt2": "GPT2LMHeadModel", "gpt_bigcode": "GPTBigCodeForCausalLM", "gpt_neo": "GPTNeoForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM", "gpt_neox_japanese": "GPTNeoXJapaneseForCausalLM",
    "gptj": "GPTJForCausalLM", "gptsan-japanese": "GPTSanJapaneseForConditionalGeneration",
    "ibert": "IBertForMaskedLM", "layoutlm": "LayoutLMForMaskedLM", "led": "LEDForConditionalGeneration",
    "longformer": "LongformerForMaskedLM", "longt5": "LongT5ForConditionalGeneration",
    "luke": "LukeForMaskedLM", "m2m_100": "M2M100ForConditionalGeneration", "marian": "MarianMTModel",
    "mega": "MegaForMaskedLM", "megatron-bert": "MegatronBertForCausalLM",
    "mobilebert": "MobileBertForMaskedLM", "mpnet": "MPNetForMaskedLM", "mvp": "MvpForConditionalGeneration",
    "nezha": "NezhaForMaskedLM", "nllb-moe": "NllbMoeForConditionalGeneration",
    "nystromformer": "NystromformerForMaskedLM", "openai-gpt": "OpenAIGPTLMHeadModel",
    "pegasus_x": "PegasusXForConditionalGeneration", "plbart": "PLBartForConditionalGeneration",
    "qdqbert": "QDQBertForMaskedLM", "reformer": "ReformerModelWithLMHead", "rembert": "RemBertForMaskedLM",
    "roberta": "RobertaForMaskedLM", "roberta-prelayernorm": "RobertaPreLayerNormForMaskedLM",
    "roc_bert": "RoCBertForMaskedLM", "roformer": "RoFormerForMaskedLM", "rwkv": "RwkvForCausalLM",
    "speech_to_text": "Speech2TextForConditionalGeneration", "squeezebert": "SqueezeBertForMaskedLM",
    "switch_transformers": "SwitchTransformersForConditionalGeneration", "t5": "T5ForConditionalGeneration",
    "tapas": "TapasForMaskedLM", "transfo-xl": "TransfoXLLMHeadModel", "wav2vec2": "Wav2Vec2ForMaskedLM",
    "whisper": "WhisperForConditionalGeneration", "xlm": "XLMWithLMHeadModel",
    "xlm-roberta": "XLMRobertaForMaskedLM", "xlm-roberta-xl": "XLMRobertaXLForMaskedLM",
    "xlnet": "XLNetLMHeadModel", "xmod": "XmodForMaskedLM", "yoso": "YosoForMaskedLM",
}

_GEN = "call model.generate(...) with the matching GenerationConfig (num_beams=, do_sample=, ...)"
_MASKS = "transformers.masking_utils (create_causal_mask and friends) or the model's own forward"

_SOP_WHY = ("4.30 already deprecated it, and its __init__ kept no tokenizer, so it could not collate there; "
            "DataCollatorForLanguageModeling masks, and sentence_order_label stacks as any label")
REFUSED_NAMES: tuple[Removed, ...] = (
    # module names with no honest mapping
    _refused("transformers.data.data_collator.DataCollatorForSOP", "DataCollatorForLanguageModeling",
             _SOP_WHY),
    *(_refused(f"transformers.{m}DataCollatorForSOP", "DataCollatorForLanguageModeling",
               _SOP_WHY)
      for m in ("", "data.")),
    _refused("transformers.data.data_collator.tf_default_data_collator", "default_data_collator", _NO_TF),
    _refused("transformers.data.data_collator.tolist", "x.tolist()", "a private helper of the 4.30 collators"),
    _refused("transformers.modeling_utils.find_pruneable_heads_and_indices", "none (5.x removed head pruning)",
             "5.x removed attention-head pruning"),
    _refused("transformers.*.prune_conv1d_layer", "none (5.x removed head pruning)", "5.x removed head pruning"),
    _refused("transformers.*.prune_layer", "none (5.x removed head pruning)", "5.x removed head pruning"),
    _refused("transformers.prune_layer", "none (5.x removed head pruning)", "5.x removed head pruning"),
    _refused("transformers.pytorch_utils.find_pruneable_heads_and_indices", "none (5.x removed head pruning)",
             "5.x removed attention-head pruning"),
    _refused("transformers.modeling_utils.SequenceSummary", "the model's own head (XLNet, XLM define theirs)",
             "5.x moved it into the model files that use it"),
    _refused("transformers.modeling_utils.Pooler*", "the model's own head (XLNet, XLM define theirs)",
             "5.x moved the SQuAD heads into the model files that use them"),
    _refused("transformers.modeling_utils.SQuADHead", "the model's own head (XLNet, XLM define theirs)",
             "5.x moved the SQuAD heads into the model files that use them"),
    _refused("transformers.modeling_utils.SquadHeadOutput", "the model's own output class",
             "5.x moved the SQuAD heads into the model files that use them"),
    _refused("transformers.modeling_utils.shard_checkpoint", "huggingface_hub.split_torch_state_dict_into_shards",
             "today's sharding returns another structure (a split plan, not the shards)"),
    _refused("transformers.modeling_utils.download_url", "huggingface_hub.hf_hub_download",
             "4.30 already deprecated downloading from arbitrary URLs"),
    _refused("transformers.modeling_utils.is_remote_url", "urllib.parse.urlparse(url).scheme",
             "a private helper of 4.30's loading code"),
    _refused("transformers.modeling_utils.find_submodule_and_param_name", "model.get_submodule(name)",
             "a private helper of 4.30's loading code"),
    _refused("transformers.modeling_utils.get_disk_only_shard_files", "accelerate's disk offload",
             "a private helper of 4.30's loading code"),
    _refused("transformers.modeling_utils.get_state_dict_float_dtype", "the tensors' own dtype",
             "a private helper of 4.30's loading code"),
    _refused("transformers.modeling_utils.set_initialized_submodules", "model.post_init()",
             "a private helper of 4.30's weight initialisation"),
    _refused("transformers.modeling_utils.*_WEIGHTS_NAME", "transformers.utils.SAFE_WEIGHTS_NAME",
             "5.x loads no TensorFlow or Flax checkpoints"),
    _refused("transformers.trainer.DistributedTensorGatherer", "Trainer.evaluation_loop (Accelerate's gather)",
             "the legacy prediction loop it served is gone"),
    _refused("transformers.trainer*.DistributedTensorGatherer", "Trainer.evaluation_loop (Accelerate's gather)",
             "the legacy prediction loop it served is gone"),
    _refused("transformers.trainer*.SequentialDistributedSampler", "torch.utils.data.distributed.DistributedSampler",
             "the legacy prediction loop it served is gone; 4.30 already deprecated it"),
    _refused("transformers.trainer.NotebookProgressCallback", "transformers.utils.notebook.NotebookProgressCallback",
             "5.x imports it only in notebooks (it needs IPython)"),
    _refused("transformers.trainer*.smp_*", "none: 5.x removed SageMaker model parallelism",
             "5.x removed SageMaker model parallelism"),
    _refused("transformers.trainer.run_hp_search_sigopt", "another hyperparameter_search backend (optuna, ray)",
             "5.x removed SigOpt"),
    _refused("transformers.trainer_utils.default_hp_space_sigopt", "another hyperparameter_search backend",
             "5.x removed SigOpt"),
    _refused("transformers.training_args.default_logdir", "TENSORBOARD_LOGGING_DIR=DIR (environment)",
             "5.x chooses the TensorBoard folder from the environment"),
    _refused("transformers.training_args.get_int_from_env", "int(os.environ.get(NAME, default))",
             "a private helper of 4.30's TrainingArguments"),
    _refused("transformers.training_args.get_xla_device_type", "torch_xla's own device query",
             "a private helper of 4.30's TrainingArguments"),
    _refused("transformers.utils.TORCH_FX_REQUIRED_VERSION", "none: every torch 2 has torch.fx",
             "a private constant of 4.30's torch.fx support"),
    _refused("transformers.utils.get_cached_models", "huggingface_hub.scan_cache_dir()",
             "the hub's cache layout replaced 4.x's"),
    _refused("transformers.utils.move_cache", "huggingface_hub.scan_cache_dir()",
             "it moved the 4.2x cache into the hub's layout, long done"),
    _refused("transformers.utils.get_file_from_repo",
             "transformers.utils.cached_file(repo, filename, _raise_exceptions_for_missing_entries=False)",
             "5.x folds it into cached_file"),
    _refused("transformers.utils.download_url", "huggingface_hub.hf_hub_download",
             "4.30 already deprecated downloading from arbitrary URLs"),
    _refused("transformers.utils.add_model_info_to_auto_map", "none", "a private helper of 4.30's auto classes"),
    _refused("transformers.utils.ccl_version", "importlib.metadata.version('oneccl_bind_pt')",
             "a private constant of 4.30's oneCCL support"),
    _refused("transformers.utils.infer_framework", "'pt'", _NO_TF),
    _refused("transformers.utils.is_jax_tensor", "isinstance(x, jax.Array)", _NO_TF),
    _refused("transformers.utils.is_tf_tensor", "isinstance(x, tf.Tensor)", _NO_TF),
    _refused("transformers.utils.is_tf_symbolic_tensor", "tf.is_symbolic_tensor(x)", _NO_TF),
    Removed("transformers.file_utils.*", R, "transformers.utils",
                              "transformers.file_utils was 4.x's alias of transformers.utils: each name is "
                              "served or refused as its transformers.utils row says", Home.IMPORT,
                              alias="transformers.utils"),
    # top-level names
    _refused("transformers.ModelCard", "huggingface_hub.ModelCard", "5.x writes model cards with the hub's class"),
    _refused("transformers.SpecialTokensMixin", "PreTrainedTokenizerBase",
             "5.x folds the special-tokens API into the tokenizer base class"),
    _refused("transformers.MODEL_NAMES_MAPPING", "transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES",
             "5.x keeps only the config mapping"),
    _refused("transformers.LEDForSequenceClassification", "BartForSequenceClassification or LEDModel with a head",
             "5.x removed the class (4.30 already deprecated it)"),
    _refused("transformers.Wav2Vec2ForMaskedLM", "Wav2Vec2ForCTC", "4.30 already deprecated it"),
    _refused("transformers.ViTMAELayer", "transformers.models.vit_mae.modeling_vit_mae's layer",
             "5.x exports only the models"),
    _refused("transformers.top_k_top_p_filtering", "TopKLogitsWarper and TopPLogitsWarper",
             "4.30 already deprecated it"),
    _refused("transformers.is_sigopt_available", "another hyperparameter_search backend", "5.x removed SigOpt"),
    _refused("transformers.PyTorchBenchmark*", "torch.utils.benchmark", "5.x removed the benchmark utilities"),
    _refused("transformers.*Constraint*", _GEN, "5.x removed constrained beam search"),
    _refused("transformers.*BeamScorer", _GEN, "5.x folded beam scoring into generate"),
    _refused("transformers.*BeamSearchScorer", _GEN, "5.x folded beam scoring into generate"),
    _refused("transformers.HammingDiversityLogitsProcessor", _GEN, "5.x removed group (diverse) beam search"),
    # families
    _refused("transformers.*_PRETRAINED_*", "none: 5.x removed the archive lists (pick checkpoints on the Hub)",
             "the per-model archive maps and lists of pretrained checkpoint names"),
    _refused("transformers.TF*", _NO_TF.split(" (")[0] + ": the PyTorch class without the TF prefix", _NO_TF),
    _refused("transformers.Flax*", _NO_TF.split(" (")[0] + ": the PyTorch class without the Flax prefix", _NO_TF),
    _refused("transformers.*", "the PyTorch class", _NO_TF, backend="*tf*"),
    _refused("transformers.*", "the PyTorch class", _NO_TF, backend="*flax*"),
    _refused("transformers.*", "the PyTorch API", _NO_TF, origin="modeling_tf_*"),
    _refused("transformers.*", "the PyTorch API", _NO_TF, origin="*_tf"),
    _refused("transformers.load_tf_weights_in_*", "from_pretrained of a PyTorch or safetensors checkpoint",
             "5.x loads no TensorFlow checkpoints"),
    _refused("transformers.*", "a maintained model (or Transformers 4.x pinned)",
             "the model was removed from Transformers (deprecated models go after a release of warnings)",
             gone_model=True),
    _refused("transformers.*", "smolagents (pip install smolagents)",
             "5.x removed transformers.agents/tools; smolagents is their successor", origin="tools"),
    _refused("transformers.*Pipeline", "pipeline('text-generation') or the model's generate",
             "5.x removed these task pipelines", origin="pipelines"),
    _refused("transformers.Conversation", "a list of chat messages for pipeline('text-generation')",
             "5.x removed the conversational pipeline"),
    _refused("transformers.*", "the datasets library (load_dataset, evaluate)",
             "4.30 already deprecated the data processors and datasets of transformers.data",
             origin="data*"),
)

_TRAINER_AMP = "the Trainer integration serves it with its 4.30 meaning (issue 30, section 2)"
_TOK = "PreTrainedTokenizerBase"
_MODEL = "PreTrainedModel"

MEMBERS: tuple[Removed, ...] = (
    # Trainer and Seq2SeqTrainer: the 4.x internals Trainer subclasses read
    *(_served(f"*Trainer.{n}", f"self.{n} (4.30's meaning)", _TRAINER_AMP, None, _T)
      for n in ("sharded_ddp", "fsdp", "use_apex", "do_grad_scaling", "scaler", "use_cuda_amp", "use_cpu_amp",
                "amp_dtype")),
    _refused("*Trainer.backward_prefetch", "self.accelerator.state.fsdp_plugin.backward_prefetch",
             "5.x configures FSDP through Accelerate's plugin"),
    _refused("*Trainer.forward_prefetch", "self.accelerator.state.fsdp_plugin.forward_prefetch",
             "5.x configures FSDP through Accelerate's plugin"),
    _refused("*Trainer.limit_all_gathers", "self.accelerator.state.fsdp_plugin.limit_all_gathers",
             "5.x configures FSDP through Accelerate's plugin"),
    _refused("*Trainer.repo", "self.hub_model_id with huggingface_hub.upload_folder",
             "5.x pushes with the hub's HTTP API, not a git clone (huggingface_hub.Repository is gone)"),
    _refused("*Trainer.init_git_repo", "self.init_hf_repo()", "5.x pushes without a git clone"),
    _refused("*Trainer.jit_compilation_time", "none", "5.x removed --jit_mode_eval"),
    _refused("*Trainer.torch_jit_model_eval", "none", "5.x removed --jit_mode_eval"),
    _refused("*Trainer.ipex_optimize_model", "none", "5.x removed --use_ipex"),
    _refused("*Trainer.use_tune_checkpoints", "none", "a private flag of 4.30's Ray Tune integration"),
    _refused("*Trainer.prediction_loop", "self.evaluation_loop(...)",
             "evaluation_loop returns an EvalLoopOutput where prediction_loop returned a PredictionOutput"),
    # TrainingArguments
    _served("TrainingArguments.__init__(sharded_ddp=)", "--sharded_ddp (shardcompat's grammar)",
            "the option shardcompat exists for: parsed by shardcompat.options and sharded by the Trainer drop-in",
            None, _A),
    _served("TrainingArguments.sharded_ddp", "args.sharded_ddp", "4.30's list of ShardedDDPOption values",
            None, _A),
    _served("TrainingArguments.framework", '"pt"', "5.x is PyTorch only; 4.30 set it to \"pt\" too",
            f"{_LF}:FRAMEWORK", _C),
    # tokenizers
    _served(f"{_TOK}.as_target_tokenizer", "tokenizer(text_target=...)",
            "the same target mode: 5.x's tokenizer still switches into it for text_target", f"{_LF}:as_target_tokenizer",
            _C, deprecated="<=4.30"),
    _served(f"{_TOK}.prepare_seq2seq_batch", "tokenizer(src_texts, text_target=tgt_texts, ...)",
            "the same encodings: inputs with max_length, labels with max_target_length", f"{_LF}:prepare_seq2seq_batch",
            _C, deprecated="<=4.30"),
    _served(f"{_TOK}.encode_plus", "tokenizer(text, text_pair, ...)",
            "4.30's __call__ was encode_plus for one example", f"{_LF}:encode_plus", _C),
    _served(f"{_TOK}.batch_encode_plus", "tokenizer(batch, ...)",
            "4.30's __call__ was batch_encode_plus for a batch", f"{_LF}:batch_encode_plus", _C),
    _served(f"{_TOK}.sanitize_special_tokens", "nothing (5.x adds the special tokens itself)",
            "4.30 already made it a no-op that returned 0", f"{_LF}:sanitize_special_tokens", _C,
            served=N, deprecated="<=4.30"),
    _served(f"{_TOK}.*_token", "tokenizer.<name>_token", "5.x answers it on every tokenizer instance", None,
            _RL),
    _served(f"{_TOK}.*_token_id", "tokenizer.<name>_token_id", "5.x answers it on every tokenizer instance", None,
            _RL),
    _refused(f"{_TOK}.additional_special_tokens*", "tokenizer.extra_special_tokens (or all_special_tokens)",
             "5.x renamed the additional special tokens"),
    _refused(f"{_TOK}.*_extended", "tokenizer.special_tokens_map / all_special_tokens",
             "5.x keeps one map of special tokens (AddedToken objects included)"),
    _refused(f"{_TOK}.build_inputs_with_special_tokens", "tokenizer(text, add_special_tokens=True)",
             "5.x adds special tokens inside the tokenizers backend"),
    _refused(f"{_TOK}.create_token_type_ids_from_sequences", "tokenizer(text, text_pair)['token_type_ids']",
             "5.x computes them inside the tokenizers backend"),
    _refused(f"{_TOK}.prepare_for_model", "tokenizer(...) on the text",
             "5.x encodes ids inside the tokenizers backend"),
    _refused(f"{_TOK}.truncate_sequences", "tokenizer(..., truncation=..., max_length=...)",
             "5.x truncates inside the tokenizers backend"),
    _refused(f"{_TOK}.max_model_input_sizes", "tokenizer.model_max_length", "5.x removed the per-checkpoint tables"),
    _refused(f"{_TOK}.pretrained_init_configuration", "the checkpoint's tokenizer_config.json",
             "5.x removed the per-checkpoint tables"),
    _refused(f"{_TOK}.from_pretrained(resume_download=)", "drop it", "downloads always resume today"),
    # models
    _served(f"{_MODEL}.framework", '"pt"', "5.x is PyTorch only; 4.30 answered \"pt\" too", f"{_LF}:FRAMEWORK", _C),
    _served(f"{_MODEL}.is_parallelizable", "False",
            "no 5.x model has the naive parallelize() it flagged; 4.30 defaulted it to False", f"{_LF}:FALSE", _C),
    *(_served(f"{_MODEL}.{n}", f"model.{n}", "every 5.x model that generates has it (GenerationMixin)", None,
              _RL)
      for n in ("generate", "prepare_inputs_for_generation", "compute_transition_scores")),
    *(_refused(f"{_MODEL}.{n}", _GEN, "5.x runs every decoding strategy through generate()")
      for n in ("greedy_search", "sample", "beam_search", "beam_sample", "group_beam_search", "contrastive_search",
                "constrained_beam_search", "assisted_decoding", "adjust_logits_during_generation")),
    *(_refused(f"{_MODEL}.{n}", _MASKS, "5.x builds attention masks in transformers.masking_utils")
      for n in ("get_extended_attention_mask", "invert_attention_mask", "create_extended_attention_mask_for_decoder",
                "get_head_mask")),
    _refused(f"{_MODEL}.prune_heads", "none", "5.x removed head pruning"),
    _refused(f"{_MODEL}.*_memory_hooks*", "torch.cuda.max_memory_allocated()", "5.x removed the memory hooks"),
    _refused(f"{_MODEL}.floating_point_ops", "6 * model.num_parameters() * tokens",
             "5.x removed the FLOP estimate"),
    _refused(f"{_MODEL}.estimate_tokens", "the batch's input_ids.numel()", "5.x removed the FLOP estimate"),
    _refused(f"{_MODEL}.*bettertransformer", "attn_implementation='sdpa'",
             "5.x uses torch's SDPA attention itself (Optimum's BetterTransformer is gone)"),
    _refused(f"{_MODEL}.warnings_issued", "none", "a private dict of 4.30's one-time warnings"),
    _refused(f"{_MODEL}.from_pretrained(from_tf=)", "a PyTorch or safetensors checkpoint",
             "5.x loads no TensorFlow checkpoints"),
    _refused(f"{_MODEL}.from_pretrained(from_flax=)", "a PyTorch or safetensors checkpoint",
             "5.x loads no Flax checkpoints"),
    _refused(f"{_MODEL}.from_pretrained(load_in_8bit=)", "quantization_config=BitsAndBytesConfig(load_in_8bit=True)",
             "5.x takes quantization settings only in quantization_config"),
    _refused(f"{_MODEL}.from_pretrained(load_in_4bit=)", "quantization_config=BitsAndBytesConfig(load_in_4bit=True)",
             "5.x takes quantization settings only in quantization_config"),
    _refused(f"{_MODEL}.from_pretrained(low_cpu_mem_usage=)", "drop it", "5.x always loads with low memory use"),
    _refused(f"{_MODEL}.from_pretrained(offload_state_dict=)", "device_map= with offload_folder=",
             "5.x offloads through device_map"),
    _refused(f"{_MODEL}.from_pretrained(mirror=)", "drop it", "4.30 already ignored it"),
    _refused(f"{_MODEL}.from_pretrained(resume_download=)", "drop it", "downloads always resume today"),
    # 3.x names that 4.0 removed and 4.30's own examples/legacy scripts still called (they fail at their
    # end on 4.30 itself): each is today's name, served under the old one with a FutureWarning.
    _served("Trainer.is_world_master", "trainer.is_world_process_zero()", "3.x's name of the same question",
            f"{_LF}:is_world_master", _C, served=R, removed="4.0"),
    _served("Trainer.is_local_master", "trainer.is_local_process_zero()", "3.x's name of the same question",
            f"{_LF}:is_local_master", _C, served=R, removed="4.0"),
    _served(f"{_TOK}.max_len", "tokenizer.model_max_length", "3.x's name of the same number", f"{_LF}:max_len", _C,
            served=R, removed="4.0"),
)

SURFACE: tuple[Removed, ...] = (
    tuple(_moved(k, v) for k, v in MOVED.items()) + SERVED_NAMES + EXAMPLES + REFUSED_NAMES + MEMBERS
)
#: What the survey of 4.30.2 against the installed release found, per module and class:
#: (removed names found, served, refused, unlisted).  The docs page opens with it; the test over
#: the 4.30.2 wheel checks it against a fresh survey of the same pair of releases.  Regenerate with
#: ``python -m shardcompat.transformers.legacy_survey WHEEL --coverage``.
COVERAGE: dict[str, Any] = {
    "old": "4.30.2",
    "installed": "5.25.0",
    "by_where": {
        "PreTrainedModel": (35, 6, 29, 0),
        "PreTrainedTokenizerBase": (31, 20, 11, 0),
        "Seq2SeqTrainer": (20, 10, 10, 0),
        "Trainer": (20, 10, 10, 0),
        "TrainingArguments": (63, 61, 2, 0),
        "transformers": (1336, 123, 1213, 0),
        "transformers.data": (20, 19, 1, 0),
        "transformers.data.data_collator": (6, 3, 3, 0),
        "transformers.data.datasets": (9, 9, 0, 0),
        "transformers.data.datasets.glue": (10, 9, 1, 0),
        "transformers.data.datasets.language_modeling": (9, 7, 2, 0),
        "transformers.data.datasets.squad": (13, 10, 3, 0),
        "transformers.data.metrics": (8, 7, 1, 0),
        "transformers.data.metrics.squad_metrics": (19, 18, 1, 0),
        "transformers.data.processors": (16, 16, 0, 0),
        "transformers.data.processors.glue": (23, 21, 2, 0),
        "transformers.data.processors.squad": (19, 18, 1, 0),
        "transformers.data.processors.utils": (8, 7, 1, 0),
        "transformers.data.processors.xnli": (8, 7, 1, 0),
        "transformers.deepspeed": (15, 15, 0, 0),
        "transformers.file_utils": (29, 26, 3, 0),
        "transformers.modeling_utils": (45, 26, 19, 0),
        "transformers.optimization": (2, 2, 0, 0),
        "transformers.pytorch_utils": (6, 3, 3, 0),
        "transformers.trainer": (47, 39, 8, 0),
        "transformers.trainer_pt_utils": (9, 3, 6, 0),
        "transformers.trainer_utils": (6, 5, 1, 0),
        "transformers.training_args": (8, 5, 3, 0),
        "transformers.utils": (48, 37, 11, 0),
    },
}


#: The modules whose public names the survey compares, the import hook serves and the docs count.
SURVEYED_MODULES: tuple[str, ...] = ("transformers", "transformers.utils", "transformers.file_utils", "transformers.trainer",
                    "transformers.trainer_utils", "transformers.trainer_pt_utils", "transformers.training_args",
                    "transformers.deepspeed", "transformers.optimization", "transformers.modeling_utils",
                    "transformers.pytorch_utils", "transformers.data.data_collator", "transformers.data")
#: ``transformers.data``'s 4.x processors, metrics and datasets, which 5.0 removed.
_GONE_DATA = tuple(f"transformers.data.{m}" for m in (
    "processors", "processors.utils", "processors.glue", "processors.squad", "processors.xnli", "metrics",
    "metrics.squad_metrics", "datasets", "datasets.glue", "datasets.squad", "datasets.language_modeling"))
SURVEYED_MODULES += _GONE_DATA
#: 4.x modules the installed release no longer has, served as modules of forwarding names.
GONE_MODULES = ("transformers.deepspeed", "transformers.generation_utils", *_GONE_DATA)
_TODAYS_MODULES = frozenset(SURVEYED_MODULES) - frozenset(GONE_MODULES)
#: What the gone modules imported from Transformers modules that are not gone (spelling -> the
#: module 4.30 imported it from), generated from the 4.30.2 wheel (``python -m
#: shardcompat.transformers.legacy_survey WHEEL --reexports``; the wheel test checks it).  Where no
#: row serves such a name, it resolves at that origin, through the legacy layer's rows there, and
#: only where the origin no longer has it does the module's own row answer.
REEXPORTS: dict[str, str] = {
    "transformers.data.datasets.glue.PreTrainedTokenizerBase": "transformers.tokenization_utils_base",
    "transformers.data.datasets.glue.logging": "transformers.utils",
    "transformers.data.datasets.language_modeling.PreTrainedTokenizer": "transformers.tokenization_utils",
    "transformers.data.datasets.language_modeling.logging": "transformers.utils",
    "transformers.data.datasets.squad.MODEL_FOR_QUESTION_ANSWERING_MAPPING": "transformers.models.auto.modeling_auto",
    "transformers.data.datasets.squad.PreTrainedTokenizer": "transformers.tokenization_utils",
    "transformers.data.datasets.squad.logging": "transformers.utils",
    "transformers.data.metrics.is_sklearn_available": "transformers.utils",
    "transformers.data.metrics.requires_backends": "transformers.utils",
    "transformers.data.metrics.squad_metrics.BasicTokenizer": "transformers.models.bert",
    "transformers.data.metrics.squad_metrics.logging": "transformers.utils",
    "transformers.data.processors.glue.PreTrainedTokenizer": "transformers.tokenization_utils",
    "transformers.data.processors.glue.is_tf_available": "transformers.utils",
    "transformers.data.processors.glue.logging": "transformers.utils",
    "transformers.data.processors.squad.BatchEncoding": "transformers.tokenization_utils_base",
    "transformers.data.processors.squad.PreTrainedTokenizerBase": "transformers.tokenization_utils_base",
    "transformers.data.processors.squad.TruncationStrategy": "transformers.tokenization_utils_base",
    "transformers.data.processors.squad.is_tf_available": "transformers.utils",
    "transformers.data.processors.squad.is_torch_available": "transformers.utils",
    "transformers.data.processors.squad.logging": "transformers.utils",
    "transformers.data.processors.squad.whitespace_tokenize": "transformers.models.bert.tokenization_bert",
    "transformers.data.processors.utils.is_tf_available": "transformers.utils",
    "transformers.data.processors.utils.is_torch_available": "transformers.utils",
    "transformers.data.processors.utils.logging": "transformers.utils",
    "transformers.data.processors.xnli.logging": "transformers.utils",
    "transformers.deepspeed.dep_version_check": "transformers.dependency_versions_check",
    "transformers.deepspeed.is_accelerate_available": "transformers.utils",
    "transformers.deepspeed.is_torch_available": "transformers.utils",
    "transformers.deepspeed.logging": "transformers.utils",
}


def reexport_row(spelling: str) -> Removed | None:
    """The row serving a name a gone module re-exported (:data:`REEXPORTS`) at its origin, or None."""
    origin = REEXPORTS.get(spelling)
    if origin is None:
        return None
    name = spelling.rsplit(".", 1)[-1]
    return Removed(spelling, R, f"from {origin} import {name}", f"4.30 imported it here from {origin}",
                   target=f"{origin}:{name}")


def precise_family(r: Removed) -> bool:
    """Whether a family row's pattern alone names only removed names: one at the top level
    (``transformers.TF*``) or in a module today's release no longer has
    (``transformers.data.metrics.*``).  A family in a module that lives on
    (``transformers.modeling_utils.*_WEIGHTS_NAME``) may match a name it still has, and one narrowed
    by where 4.x defined the name needs the old wheel: only the installed release, or the survey,
    can tell those."""
    if not r.family or r.origin or r.backend or r.gone_model or r.alias or not r.pattern.startswith("transformers."):
        return False
    module = r.pattern.rsplit(".", 1)[0]
    return module == "transformers" or ("*" not in module and module not in _TODAYS_MODULES)


def _field_rows(name: Any) -> LegacyName | None:
    """The rows of the first table (fields, Trainer keywords, from_pretrained, top level, utils, datasets) for a
    surveyed name."""
    where, what, n = name.where, name.what, name.name
    keyword = n.rstrip(")").split("(")[1] if what == "keyword" else None
    method = n.split("(")[0]
    candidates: list[tuple[str, Kind]] = []
    if where == "TrainingArguments":
        candidates.append((keyword if keyword and method == "__init__" else n, Kind.FIELD))
    elif where.endswith("Trainer"):
        candidates.append((keyword if keyword and method == "__init__" else n, Kind.TRAINER))
    elif keyword and method == "from_pretrained":
        candidates.append((keyword, Kind.FROM_PRETRAINED))
    elif where == "transformers":
        candidates.append((n, Kind.TOP_LEVEL))
    elif where in ("transformers.utils", "transformers.file_utils"):
        candidates.append((n, Kind.UTILS))
    elif where == "datasets":
        candidates.append((keyword, Kind.DATASETS) if keyword else (n, Kind.DATASETS_FUNCTION))
    for cand, kind in candidates:
        for r in ROWS:
            if r.name == cand and r.kind is kind:
                return r
    return None


def _gone_model(origin: str) -> bool:
    import importlib.util

    if not origin.startswith("models."):
        return False
    try:
        return importlib.util.find_spec(f"transformers.{origin}") is None
    except (ImportError, ValueError):
        return True


def lookup(name: Any, rows: tuple[Removed, ...] | None = None) -> LegacyName | Removed | None:
    """The row that covers a surveyed name (:class:`.legacy_survey.Name`: ``where``, ``name``,
    ``what``, ``origin``, ``backend``), or None: the first table's rows first, then the first
    matching row of :data:`SURFACE`."""
    import fnmatch

    first = _field_rows(name)
    if first is not None:
        return first
    spelling = name.spelling
    for r in rows if rows is not None else SURFACE:
        if not fnmatch.fnmatchcase(spelling, r.pattern):
            continue
        if r.origin is not None and not fnmatch.fnmatchcase(name.origin, r.origin):
            continue
        if r.backend is not None and not fnmatch.fnmatchcase(name.backend, r.backend):
            continue
        if r.gone_model and not _gone_model(name.origin):
            continue
        if r.alias is not None:
            aliased = dataclasses.replace(name, where=r.alias) if hasattr(name, "where") else name
            return lookup(aliased, rows)
        return r
    return None
