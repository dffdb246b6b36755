"""The small adapters some rows of :data:`.legacy_table.SURFACE` are served by: a 4.x name whose
answer today is a constant, a question the installed release no longer asks, or a 4.x call form
written with today's API.  Each is written here from the row's description (nothing is copied
from Transformers); :mod:`._legacy_imports` puts them at their 4.x homes under ``shardcompat run``.
"""

from __future__ import annotations

import collections.abc
import contextlib
import importlib.util
import os
import tempfile
import urllib.parse
from collections.abc import Iterator
from typing import Any

import torch
from packaging import version

from ._api import load

TRUE, FALSE = True, False
FRAMEWORK = "pt"
SAVE_STATE_WARNING = ""
DOCSTRING = ""  # a 4.x docstring template (BERT_INPUTS_DOCSTRING): documentation only
TF2_WEIGHTS_NAME = "tf_model.h5"
TF2_WEIGHTS_INDEX_NAME = "tf_model.h5.index.json"
TF_WEIGHTS_NAME = "model.ckpt"
FLAX_WEIGHTS_NAME = "flax_model.msgpack"
FLAX_WEIGHTS_INDEX_NAME = "flax_model.msgpack.index.json"
USE_TORCH = os.environ.get("USE_TORCH", "AUTO").upper()
USE_TF = os.environ.get("USE_TF", "AUTO").upper()
USE_JAX = os.environ.get("USE_FLAX", "AUTO").upper()
parsed_torch_version_base = version.parse(version.parse(torch.__version__).base_version)


# Read when a row asks for one (see __getattr__): the hub releases beside 4.3x lack some, and
# this module serves other rows there too.
_HUB_CONSTANTS = {"HF_HUB_CACHE": "HF_HUB_CACHE", "HUGGINGFACE_CO_PREFIX": "HUGGINGFACE_CO_URL_TEMPLATE"}


def answer_true(*args: Any, **kwargs: Any) -> bool:
    return True


def answer_false(*args: Any, **kwargs: Any) -> bool:
    return False


def _importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a module in sys.modules without a spec
        return package in __import__("sys").modules


def is_fairscale_available() -> bool:
    return _importable("fairscale")


def is_ftfy_available() -> bool:
    return _importable("ftfy")


def is_jieba_available() -> bool:
    return _importable("jieba")


def is_soundfile_availble() -> bool:  # 4.30's spelling
    return _importable("soundfile")


def is_decord_available() -> bool:
    return _importable("decord")


def is_remote_url(url_or_filename: str) -> bool:
    return urllib.parse.urlparse(str(url_or_filename)).scheme in ("http", "https")


@contextlib.contextmanager
def working_or_temp_dir(working_dir: str, use_temp_dir: bool = False) -> Iterator[str]:
    if use_temp_dir:
        with tempfile.TemporaryDirectory() as tmp:
            yield tmp
    else:
        yield working_dir


def get_full_repo_name(model_id: str, organization: str | None = None, token: str | None = None) -> str:
    if organization is not None:
        return f"{organization}/{model_id}"
    return f"{load('huggingface_hub').whoami(token)['name']}/{model_id}"


def get_parameter_device(parameter: torch.nn.Module) -> torch.device:
    return next(parameter.parameters()).device


def get_first_parameter_dtype(parameter: torch.nn.Module) -> torch.dtype:
    return next(parameter.parameters()).dtype


def get_parameter_dtype(parameter: torch.nn.Module) -> torch.dtype:
    last = None
    for t in [*parameter.parameters(), *parameter.buffers()]:
        last = t.dtype
        if t.is_floating_point():
            return t.dtype
    if last is None:
        raise ValueError(f"{type(parameter).__name__} has no parameters or buffers to take a dtype from")
    return last


def dtype_byte_size(dtype: torch.dtype) -> float:
    if dtype == torch.bool:
        return 1 / 8
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return info.bits / 8


class AdamW(torch.optim.AdamW):
    """4.30's ``transformers.AdamW`` call form on ``torch.optim.AdamW``: 4.30's defaults
    (``eps=1e-6``, ``weight_decay=0.0``); ``correct_bias=False`` has no torch equivalent."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, correct_bias: bool = True,
                 no_deprecation_warning: bool = False) -> None:
        if not correct_bias:
            raise ValueError(
                "transformers.AdamW(correct_bias=False): torch.optim.AdamW always corrects the bias and "
                "Transformers 5.x has no AdamW of its own; use torch.optim.AdamW (bias-corrected) or an "
                "optimizer of your own for the uncorrected update"
            )
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


# ---------------------------------------------------------------------- tokenizer methods
@contextlib.contextmanager
def as_target_tokenizer(self: Any) -> Iterator[None]:
    """Encode with the tokenizer's target settings inside the block (what ``text_target=`` does)."""
    switch = getattr(self, "_switch_to_target_mode", None)
    if switch is not None:
        switch()
    self._in_target_context_manager = True
    try:
        yield
    finally:
        self._in_target_context_manager = False
        back = getattr(self, "_switch_to_input_mode", None)
        if back is not None:
            back()


def prepare_seq2seq_batch(self: Any, src_texts: Any, tgt_texts: Any = None, max_length: int | None = None,
                          max_target_length: int | None = None, padding: str = "longest",
                          return_tensors: str | None = None, truncation: bool = True, **kwargs: Any) -> Any:
    """The inputs of ``src_texts`` and, with ``tgt_texts``, their ``labels`` (the targets' ids)."""
    common = dict(add_special_tokens=True, return_tensors=return_tensors, padding=padding,
                  truncation=truncation, **kwargs)
    inputs = self(src_texts, max_length=max_length, **common)
    if tgt_texts is None:
        return inputs
    labels = self(text_target=tgt_texts, max_length=max_target_length if max_target_length is not None
                  else max_length, **common)
    inputs["labels"] = labels["input_ids"]
    return inputs


def encode_plus(self: Any, text: Any, text_pair: Any = None, **kwargs: Any) -> Any:
    return self(text, text_pair, **kwargs)


def batch_encode_plus(self: Any, batch_text_or_text_pairs: Any, **kwargs: Any) -> Any:
    batch = list(batch_text_or_text_pairs)
    if batch and all(isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], str) for x in batch):
        return self([a for a, _ in batch], [b for _, b in batch], **kwargs)
    return self(batch, **kwargs)


def sanitize_special_tokens(self: Any) -> int:
    return 0


# ---------------------------------------------------------------------- 3.x names 4.0 removed
# (no import of transformers.trainer here: the layer installs these before the script imports it)
def is_world_master(self: Any) -> bool:
    return bool(self.is_world_process_zero())


def is_local_master(self: Any) -> bool:
    return bool(self.is_local_process_zero())


# the tokenizer's length limit, by 3.x's name
max_len = property(lambda self: self.model_max_length, doc="``tokenizer.model_max_length``, by 3.x's name.")


# ---------------------------------------------------------------------- datasets
def load_metric(path: str, config_name: str | None = None, process_id: int = 0, num_process: int = 1,
                cache_dir: str | None = None, experiment_id: str | None = None, keep_in_memory: bool = False,
                download_config: Any = None, download_mode: Any = None, revision: Any = None,
                **init_kwargs: Any) -> Any:
    """datasets 2.x's ``load_metric`` call form on ``evaluate.load``, its successor (same metric
    scripts and keywords; only the third positional argument differs, so all go by keyword)."""
    evaluate = _evaluate("load_metric", "load")
    return evaluate.load(path, config_name, process_id=process_id, num_process=num_process, cache_dir=cache_dir,
                         experiment_id=experiment_id, keep_in_memory=keep_in_memory,
                         download_config=download_config, download_mode=download_mode, revision=revision,
                         **init_kwargs)


def list_metrics(with_community_metrics: bool = True, with_details: bool = False) -> list[Any]:
    """datasets 2.x's ``list_metrics`` on evaluate's ``list_evaluation_modules``: the metrics alone,
    as it listed them."""
    return _evaluate("list_metrics", "list_evaluation_modules").list_evaluation_modules(  # type: ignore[no-any-return]
        module_type="metric", include_community=with_community_metrics, with_details=with_details)


def _evaluate(name: str, successor: str) -> Any:
    """The evaluate library, which took over datasets' metrics; without it, what to install."""
    if importlib.util.find_spec("evaluate") is None:
        raise ImportError(f"datasets.{name} was removed in datasets 3.0; shardcompat serves it with its "
                          f"successor evaluate.{successor}, which is not installed: pip install evaluate")
    import evaluate

    return evaluate


# ---------------------------------------------------------------------- classes
#: Keywords that say where a checkpoint is, which the config's loading needs as much as the model's.
_HUB_KEYWORDS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")


class AutoModelWithLMHead:
    """4.30's deprecated auto class: the model with a language-modeling head that 4.30 chose for
    the config's model type (:data:`.legacy_table.LM_HEAD_MODELS`: masked for BERT, causal for
    GPT-2, seq2seq for T5), loaded by that class's own ``from_pretrained`` / ``from_config``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise OSError("AutoModelWithLMHead is instantiated with AutoModelWithLMHead.from_pretrained(path) or "
                      "AutoModelWithLMHead.from_config(config)")

    @staticmethod
    def model_class(config: Any) -> Any:
        from .legacy_table import LM_HEAD_MODELS

        name = LM_HEAD_MODELS.get(getattr(config, "model_type", ""))
        if name is None:
            raise ValueError(
                f"AutoModelWithLMHead: Transformers 4.30 had no language-modeling class for model type "
                f"{getattr(config, 'model_type', '?')!r}; use AutoModelForCausalLM, AutoModelForMaskedLM or "
                f"AutoModelForSeq2SeqLM (4.30's types: {', '.join(sorted(LM_HEAD_MODELS))})")
        found = getattr(load(), name, None)
        if found is None:
            raise ImportError(
                f"AutoModelWithLMHead: 4.30 loaded model type {config.model_type!r} as {name}, which the "
                f"installed Transformers removed; keep Transformers 4.x for this model or pick a maintained one")
        return found

    @classmethod
    def from_config(cls, config: Any, **kwargs: Any) -> Any:
        return cls.model_class(config)._from_config(config, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *model_args: Any, **kwargs: Any) -> Any:
        config = kwargs.pop("config", None)
        hub = {k: kwargs.pop(k) for k in _HUB_KEYWORDS if k in kwargs}
        if not isinstance(config, load().PretrainedConfig):
            config, kwargs = load().AutoConfig.from_pretrained(
                config or pretrained_model_name_or_path, return_unused_kwargs=True, **hub, **kwargs)
        return cls.model_class(config).from_pretrained(pretrained_model_name_or_path, *model_args, config=config,
                                                       **hub, **kwargs)


class _LmHeadMapping(collections.abc.Mapping):  # type: ignore[type-arg]
    """4.30's ``MODEL_WITH_LM_HEAD_MAPPING``: config class -> the class ``AutoModelWithLMHead`` chose,
    for the model types whose class the installed release still has; classes load when asked for."""

    def __init__(self) -> None:
        from .legacy_table import LM_HEAD_MODELS

        transformers = load()
        auto = importlib.import_module("transformers.models.auto.modeling_auto")
        today = {c for names in (auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
                                 auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES) for c in names.values()}
        self._types = {t: c for t, c in LM_HEAD_MODELS.items() if c in today and t in transformers.CONFIG_MAPPING}

    def _config(self, model_type: str) -> Any:
        return load().CONFIG_MAPPING[model_type]

    def __getitem__(self, config_class: Any) -> Any:
        for model_type, name in self._types.items():
            if self._config(model_type) is config_class:
                return getattr(load(), name)
        raise KeyError(config_class)

    def __iter__(self) -> Iterator[Any]:
        return (self._config(t) for t in self._types)

    def __len__(self) -> int:
        return len(self._types)


def __getattr__(name: str) -> Any:
    """The hub's constants, and ``MODEL_WITH_LM_HEAD_MAPPING`` (it reads the installed auto
    mappings), each made on first use."""
    if name in _HUB_CONSTANTS:
        # huggingface_hub comes with the 'transformers' extra; load() names the extra when it is absent
        return getattr(load("huggingface_hub.constants"), _HUB_CONSTANTS[name])
    if name != "MODEL_WITH_LM_HEAD_MAPPING":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    mapping = globals()[name] = _LmHeadMapping()
    return mapping
