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

import dataclasses
import enum
from typing import Any, Optional

__all__ = ["FIELDS", "NOT_GIVEN", "ROWS", "Kind", "LegacyName", "Served", "by_kind", "row"]


class Kind(str, enum.Enum):
    """Where a script used the name."""

    FIELD = "TrainingArguments field"  # keyword, --flag and attribute read alike
    TRAINER = "Trainer keyword"
    FROM_PRETRAINED = "from_pretrained keyword"
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
    LegacyName("use_auth_token", Kind.FROM_PRETRAINED, "4.31", "5.0", R, "token=",
               "renamed in 4.31; today it reaches the model's __init__ and fails there with a TypeError",
               new="token"),
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


def by_kind(kind: Kind) -> tuple[LegacyName, ...]:
    return tuple(r for r in ROWS if r.kind is kind)


def row(name: str, kind: Kind = Kind.FIELD) -> LegacyName:
    """The row for ``name`` of ``kind``; KeyError when the table has none."""
    for candidate in ROWS:
        if candidate.name == name and candidate.kind is kind:
            return candidate
    raise KeyError(f"{kind}: {name}")
