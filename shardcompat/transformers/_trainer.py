"""``Trainer`` and ``Seq2SeqTrainer`` that shard with :func:`shardcompat.prepare` when
``args.sharded_ddp`` is set, and otherwise behave as the installed classes.

How it fits every release: the optimizer is built inside ``prepare`` (on the shards, by the
Trainer's own ``create_optimizer``), and ``_wrap_model`` returns a :class:`ShardedModule`,
which is not ``self.model``: every release then leaves the model alone instead of handing it
to Accelerate's ``prepare``.  The first training step checks that this release did.  The
optimizer goes through Accelerate (gradient accumulation) with the backend's grad scaler;
checkpoints are the project's portable ones, so a run resumes on another backend.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from ..memory import count_state
from ..options import Precision, ShardingOptions, Stage
from . import _overrides, _sharding_report
from ._api import accepts, load
from ._arguments import sharding_options
from ._group import check_one_group, ensure_group
from ._legacy import add_trainer_attributes, trainer_keywords
from ._model import CHECKPOINT_DIR, ShardedModule, TrainerOptimizer
from ._sharded_ddp_option import ATTRIBUTES, trainer_value
from ._staged_save import save_staged
from ._start_from import MODEL_PATH, message, release_requires_state, weights_folder

if TYPE_CHECKING:
    from ..prepared import Prepared

__all__ = ["Seq2SeqTrainer", "ShardedTrainerError", "Trainer"]

_hf = load()
# The installed release's own classes (under `shardcompat run` the module's names are the drop-ins).
_RELEASE = {"Trainer": _hf.Trainer, "Seq2SeqTrainer": _hf.Seq2SeqTrainer}
# Under the Trainer's own logger, so the plan shows where its "***** Running training *****"
# does: at --log_level info on the main process.
logger = logging.getLogger("transformers.shardcompat")

# How each backend's Transformers model runs generate(), which calls the model outside the
# wrapper's forward: as is (whole parameters on every rank), with FSDP2's hooks registered for
# the method, or inside FSDP1's summon_full_params (every rank holds the whole model then).
_GENERATE = {"torch-zero": "as is", "fairscale-sdp": "as is", "torch-fsdp2": "forward method",
             "torch-fsdp1": "full parameters"}


class ShardedTrainerError(ValueError):
    """The Trainer was asked for something a sharded run cannot do; the message says why and what to do."""


def _refuse_legacy(name: str) -> TypeError:
    return TypeError(f"Trainer({name}=...) without args=: 3.x set args.{name}, and there are no arguments to set it "
                     f"on here; pass args=TrainingArguments(..., {name}=...) instead")


def _refuse(what: str, fix: str) -> ShardedTrainerError:
    return ShardedTrainerError(f"--sharded_ddp: {what}. {fix}")


class Trainer(_hf.Trainer):  # type: ignore[misc,name-defined]
    """The installed ``transformers.Trainer``; with ``args.sharded_ddp`` set, the model is
    sharded by :func:`shardcompat.prepare` on CPU or CUDA.

    ``backend=`` picks the implementation as everywhere in shardcompat (``auto``, ``torch``,
    ``fairscale`` or a backend name; a ``backend=`` inside ``sharded_ddp`` counts when this
    is ``auto``).  ``trainer.prepared`` is the :class:`~shardcompat.prepared.Prepared` once
    the model is wrapped (the first ``train``, ``evaluate`` or ``predict``).  Whatever the
    arguments ask that the sharded run cannot do is refused here, with the fix.
    """

    model: Any  # the installed release's attributes this class reads and sets

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's overrides in the Transformers 4.x form are called in that form (see :mod:`._overrides`)."""
        super().__init_subclass__(**kwargs)
        _overrides.adapt_class(cls, _release_class(cls))

    def __init__(self, *args: Any, backend: str = "auto", **kwargs: Any) -> None:
        args, kwargs = _legacy_positional(type(self), args, kwargs)  # Trainer(...) in 4.x's order
        # 4.x keywords this release renamed (tokenizer=), and 3.x's that moved into the arguments
        kwargs, settings = trainer_keywords(kwargs)
        given = inspect.signature(super().__init__).bind(*args, **kwargs).arguments
        training_args = given.get("args")
        for name, value in settings.items():  # prediction_loss_only=: set on the arguments, as 3.x did
            if training_args is None:
                raise _refuse_legacy(name)
            setattr(training_args, name, value)
        self._sharding = sharding_options(training_args) if training_args is not None else ShardingOptions()
        self._sharding_backend = backend
        self._sharded_module: ShardedModule | None = None
        self._building_optimizer = False
        self._start_from: str | None = None  # a model folder train() loads into model_init's model
        self.prepared: Prepared | None = None
        if training_args is not None:
            check_one_group(training_args)  # before the model is placed or anything is built
        if self._sharding:
            _refuse_constructor_arguments(given)
        # A release that still has the field must not wrap the model with fairscale itself.
        field = getattr(training_args, "sharded_ddp", None)
        hide = training_args if isinstance(field, list) and field else None
        if hide is not None:
            hide.sharded_ddp = []
        try:
            super().__init__(*args, **kwargs)
        finally:
            if hide is not None:
                hide.sharded_ddp = field
        check_one_group(self.args)
        # As 4.30 set it; a release with the field reads its own None (it must not shard; see _ReleaseSeesNone).
        self.sharded_ddp = trainer_value(self._sharding) if self._sharding else None
        if self._sharding.stage in (Stage.ZERO_DP_2, Stage.ZERO_DP_3):
            self.place_model_on_device = False  # 4.30 left the placement of a sharded model to the sharding
        if self._sharding:
            self._sharding = self._with_precision(self._sharding)
            self._refuse_arguments()
            self._check_plan()

    # ------------------------------------------------------------------ checks at start
    def _with_precision(self, options: ShardingOptions) -> ShardingOptions:
        """--fp16/--bf16 become the backend's mixed precision (and, for fp16, its grad scaler)."""
        wanted = Precision.FP16 if self.args.fp16 else Precision.BF16 if self.args.bf16 else None
        if wanted is Precision.FP16 and not getattr(self.accelerator, "native_amp", True):
            # Accelerate enables fp16 only where autocast and a grad scaler run (not on CPU):
            # the release's own Trainer then trains in fp32, and so does the sharded run.
            logger.warning(
                "--fp16 on %s: Accelerate trains in fp32 here (no fp16 autocast or grad scaler), as the "
                "release's own Trainer does; the sharded run does the same", self.args.device.type,
            )
            wanted = None
        if wanted is None or options.mixed_precision is wanted:
            return options
        if options.mixed_precision is not None:
            raise _refuse(
                f"'{options}' asks for mixed_precision={options.mixed_precision} but --{wanted} is set",
                "Keep one of the two.",
            )
        return options.replace(mixed_precision=wanted)

    def _refuse_arguments(self) -> None:
        args = self.args
        refusals = [
            (args.n_gpu > 1, f"one process drives {args.n_gpu} GPUs (torch.nn.DataParallel), which cannot shard",
             "Start one process per GPU: shardcompat run --nproc N script.py ... (or torchrun)."),
            (getattr(args, "fp16_full_eval", False) or getattr(args, "bf16_full_eval", False),
             "--fp16_full_eval/--bf16_full_eval cast the whole model for evaluation, which would cast the shards",
             "Drop it; evaluation runs in the training precision."),
            (getattr(args, "torch_compile", False),
             "--torch_compile is applied by Accelerate's prepare, which a sharded model does not go through",
             "Drop --torch_compile."),
            (getattr(args, "auto_find_batch_size", False),
             "--auto_find_batch_size rebuilds the model wrapping after an out-of-memory error",
             "Set --per_device_train_batch_size yourself."),
            (getattr(args, "load_best_model_at_end", False),
             "--load_best_model_at_end loads full weights into the unsharded model",
             "Drop it and load trainer.state.best_model_checkpoint with from_pretrained afterwards."),
        ]
        for refused, what, fix in refusals:
            if refused:
                raise _refuse(what, fix)

    def _check_plan(self) -> None:
        """Resolve the backend's plan for this job now, so that what it cannot serve fails at start."""
        from ..backends import Placement, resolve

        world = int(self.args.world_size)
        placement = Placement(
            world_size=world, rank=int(self.args.process_index),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", world)), device=str(self.args.device),
        )
        plan = resolve(self._sharding, self._sharding_backend, placement)
        if getattr(self.args, "predict_with_generate", False) and plan.backend not in _GENERATE:
            raise _refuse(
                f"--predict_with_generate runs model.generate() outside the wrapper's forward, where "
                f"{plan.backend} keeps the parameters sharded",
                f"Use a backend that serves it ({', '.join(_GENERATE)}), e.g. backend=torch-fsdp2.",
            )

    # ------------------------------------------------------------------ wrapping
    def _shard(self) -> ShardedModule:
        """Wrap the model with ``prepare`` (once); the optimizer is built on its shards."""
        if self._sharded_module is not None:
            return self._sharded_module
        from ..adapter import prepare
        from ..backends._optim import UnsupportedOptimizer

        device = self.args.device
        ensure_group(device)
        module: nn.Module = self.model
        model_bytes = count_state(("param", p) for p in module.parameters()).params  # before it is sharded
        # prepare() leaves every random stream as it found it (shardcompat._rng), so the dropout
        # masks of the run are those of the stock Trainer.
        try:
            prepared = prepare(module, self._optimizer_factory(module), self._sharding,
                               backend=self._sharding_backend,
                               device=device if device.type == "cuda" else "cpu",  # Accelerate says cpu:0
                               find_unused_parameters=getattr(self.args, "ddp_find_unused_parameters", None))
        except UnsupportedOptimizer as error:
            raise _refuse(
                str(error).rstrip("."),
                f"With the Trainer: --optim chooses another optimizer; --weight_decay 0 makes the "
                f"Trainer's two groups one (weight_decay={self.args.weight_decay} now)",
            ) from error
        if hasattr(module, "generate"):
            _generate_on_shards(prepared)
        self.prepared = prepared
        self.model = prepared.module
        optimizer = TrainerOptimizer(prepared)
        optimizer._is_accelerate_prepared = True  # the Trainer's own accelerator.prepare keeps it as is
        self.optimizer = self.accelerator.prepare_optimizer(optimizer)
        self.accelerator.scaler = prepared.scaler  # what accelerator.backward scales the loss with
        self._sharded_module = ShardedModule(prepared)
        _sharding_report.watch(prepared, self._sharding_backend, str(self.args.output_dir), model_bytes)
        if self.args.process_index == 0:
            logger.info("sharded_ddp '%s' on %s: %s", prepared.options, prepared.backend, prepared.plan.call)
            for note in prepared.plan.notes:
                logger.info("  note: %s", note)
        return self._sharded_module

    def _optimizer_factory(self, module: nn.Module) -> Any:
        """``params -> optimizer`` for ``prepare``: the Trainer's own optimizer, on the shards.

        Backends check what it builds before the first step (``backends._optim``): fairscale
        FSDP refuses the Trainer's two groups when their weight decay differs, FSDP refuses
        Adafactor; :meth:`_shard` turns that into the Trainer's own refusal.
        """

        def build(params: Any) -> torch.optim.Optimizer:
            params = list(params)
            own = {id(p) for p in module.parameters()}
            if params and all(id(p) in own for p in params):
                # The wrapped model's parameters are the model's own (DDP and ZeRO, OSS, FSDP1
                # with use_orig_params, FSDP2 in place): create_optimizer (with any override of
                # a subclass) builds its parameter groups from them, and the backend keeps them.
                saved, self.optimizer, self._building_optimizer = self.optimizer, None, True
                try:
                    optimizer: torch.optim.Optimizer = self.create_optimizer()
                finally:
                    self.optimizer, self._building_optimizer = saved, False
                return _unshard_oss(optimizer)
            # Flat parameters (fairscale FSDP), each holding weights, biases and norms alike:
            # one group, which is the Trainer's two because the backend found their decay the same.
            cls, kwargs = self._optimizer_class_and_kwargs(module)
            if accepts(cls, "weight_decay"):
                kwargs = {"weight_decay": self.args.weight_decay, **kwargs}
            built: torch.optim.Optimizer = cls([p for p in params if p.requires_grad], **kwargs)
            return built

        return build

    def _optimizer_class_and_kwargs(self, module: nn.Module) -> tuple[Any, dict[str, Any]]:
        given = getattr(self, "optimizer_cls_and_kwargs", None)
        if given is not None:
            cls, kwargs = given
        elif accepts(self.get_optimizer_cls_and_kwargs, "model"):
            cls, kwargs = self.get_optimizer_cls_and_kwargs(self.args, module)
        else:
            cls, kwargs = self.get_optimizer_cls_and_kwargs(self.args)
        return cls, dict(kwargs)

    def create_optimizer(self, *args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        """With sharding: wrap the model first; the optimizer is built on its shards."""
        args, kwargs = _overrides.base_call(self, "create_optimizer", args, kwargs)
        if not self._sharding or self._building_optimizer:
            optimizer: torch.optim.Optimizer = super().create_optimizer(*args, **kwargs)
            return optimizer
        self._shard()
        result: torch.optim.Optimizer = self.optimizer
        return result

    def _wrap_model(self, model: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        if not self._sharding:
            wrapped: nn.Module = super()._wrap_model(model, *args, **kwargs)
            return wrapped
        return self._shard()

    def training_step(self, model: nn.Module, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self._sharding and model is not self._sharded_module:
            raise ShardedTrainerError(
                f"this Transformers release trains a {type(model).__name__} instead of the model "
                "shardcompat prepared (it wrapped the model again after Trainer._wrap_model); "
                "sharded_ddp cannot work with it: please report the Transformers version"
            )
        args, kwargs = _overrides.base_call(self, "training_step", (model, *args), kwargs)
        if getattr(type(self).compute_loss, "__shardcompat_legacy__", None) is not None:
            # A 4.x compute_loss returns a per-batch mean: the release divides it by the
            # accumulation steps only when it was given no num_items_in_batch.
            args, kwargs = _without(args, kwargs, 2, "num_items_in_batch")
        outer = self.__dict__.get("_shardcompat_in_base_step", False)
        self._shardcompat_in_base_step = True
        try:
            loss: torch.Tensor = super().training_step(*args, **kwargs)
        finally:
            self._shardcompat_in_base_step = outer
        return loss

    # ------------------------------------------------------------------ 4.x super() call forms
    def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        """The release's checkpoint (4.x call forms accepted), written beside and renamed into
        place once every rank is done."""
        args, kwargs = _overrides.base_call(self, "_save_checkpoint", args, kwargs)
        trial = args[1] if len(args) > 1 else kwargs.get("trial")
        save_staged(self, lambda: super(Trainer, self)._save_checkpoint(*args, **kwargs), trial)

    def _maybe_log_save_evaluate(self, *args: Any, **kwargs: Any) -> None:
        args, kwargs = _overrides.base_call(self, "_maybe_log_save_evaluate", args, kwargs)
        self._shardcompat_metrics = None  # what _save_checkpoint(metrics=) gets, as in 4.x
        super()._maybe_log_save_evaluate(*args, **kwargs)

    def _evaluate(self, *args: Any, **kwargs: Any) -> Any:
        metrics = super()._evaluate(*args, **kwargs)
        self._shardcompat_metrics = metrics
        return metrics

    def log(self, *args: Any, **kwargs: Any) -> None:
        args, kwargs = _overrides.base_call(self, "log", args, kwargs)
        super().log(*args, **kwargs)

    def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = _overrides.base_call(self, "_get_train_sampler", args, kwargs)
        return super()._get_train_sampler(*args, **kwargs)

    def _tune_save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        args, kwargs = _overrides.base_call(self, "_tune_save_checkpoint", args, kwargs)
        super()._tune_save_checkpoint(*args, **kwargs)

    # ------------------------------------------------------------------ clipping (5.x loop)
    def _clip_grad_norm(self, model: nn.Module) -> Any:
        if isinstance(model, ShardedModule):
            return model.clip_grad_norm_(self.args.max_grad_norm)
        return super()._clip_grad_norm(model)

    def _get_grad_norm(self, model: nn.Module, grad_norm: Any = None) -> Any:
        if grad_norm is None and isinstance(model, ShardedModule):
            grad_norm = model.clip_grad_norm_(float("inf"))
        return super()._get_grad_norm(model, grad_norm=grad_norm)

    # ------------------------------------------------------------------ starting from a model folder
    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        """A ``resume_from_checkpoint`` folder without a Trainer state starts from its weights, as
        4.x did (:mod:`._start_from`): where the release would raise, and in a sharded run.
        ``model_path=`` (4.2's name, which 4.3-4.x still took) is ``resume_from_checkpoint``."""
        if "model_path" in kwargs and not _TRAIN_TAKES_KEYWORDS:
            _overrides._warn(("train", "model_path"), MODEL_PATH)
            resume_from_checkpoint = kwargs.pop("model_path")  # it won over resume_from_checkpoint in 4.x
        folder = weights_folder(resume_from_checkpoint)
        own_engine = getattr(self, "is_deepspeed_enabled", False) or getattr(self, "is_fsdp_enabled", False)
        if folder is None or own_engine or not (_REQUIRES_STATE or self._sharding):
            return super().train(resume_from_checkpoint, *args, **kwargs)
        if _REQUIRES_STATE:
            _overrides._warn(("train", "resume_from_checkpoint"), message(folder))
        if self.model_init is None:
            self._load_from_checkpoint(folder)  # before the model is wrapped, as 4.x loaded it
            return super().train(None, *args, **kwargs)
        self._start_from = folder  # into the model model_init builds (call_model_init)
        try:
            return super().train(None, *args, **kwargs)
        finally:
            self._start_from = None

    def call_model_init(self, trial: Any = None) -> Any:
        model = super().call_model_init(trial)
        if self._start_from is not None:
            self._load_from_checkpoint(self._start_from, model)  # 4.x loaded the folder into the model just built
        return model

    # ------------------------------------------------------------------ saving and resuming
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """A full state dict gathered from the shards, saved by rank 0 with ``save_pretrained``.

        For the Trainer's own checkpoints (``save_steps``) every rank also writes the portable
        checkpoint (model, optimizer, scheduler, RNG, grad scaler) into ``shardcompat/``.
        """
        if self.prepared is None:
            super().save_model(output_dir, _internal_call)
            return
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        state = self.prepared.full_state_dict()  # collective; {} on ranks other than 0
        if self.args.should_save:
            model = self.model
            if next(iter(model.parameters()), None) is None:
                # The backend flattened the parameters into its wrapper (fairscale FSDP), and
                # save_pretrained reads the dtype from them: save through an empty twin.
                self.model = _empty_twin(model)
            try:
                self._save(output_dir, state_dict=state)
            finally:
                self.model = model
        if _internal_call:
            extra = {"scaler": self.prepared.scaler.state_dict()} if self.prepared.scaler is not None else {}
            self.prepared.save_checkpoint(
                Path(output_dir) / CHECKPOINT_DIR, step=self.state.global_step, scheduler=self.lr_scheduler, **extra
            )
        elif self.args.push_to_hub:
            self.push_to_hub(commit_message="Model save")

    def _load_rng_state(self, checkpoint: str | None) -> None:
        """Each rank's random state from the portable checkpoint, at the moment the release restores it."""
        if self.prepared is None or checkpoint is None:
            super()._load_rng_state(checkpoint)
            return
        from ..checkpoint import load_rng_state

        load_rng_state(Path(checkpoint) / CHECKPOINT_DIR, group=self.prepared.placement.process_group)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if self.prepared is None or checkpoint is None:
            super()._load_optimizer_and_scheduler(checkpoint)
            return
        portable = Path(checkpoint) / CHECKPOINT_DIR
        if not portable.is_dir():
            raise _refuse(
                f"{checkpoint} has no {CHECKPOINT_DIR}/ folder: it was not written by a sharded run, "
                "so there is no optimizer state keyed by parameter name to resume from",
                "Resume it without --sharded_ddp, or start from its weights (model_name_or_path) instead.",
            )
        # The release restores each rank's RNG later, after it has drawn the data order from it
        # as a fresh run would (see _load_rng_state).
        extra = self.prepared.load_checkpoint(portable, scheduler=self.lr_scheduler, restore_rng=False)
        if self.prepared.scaler is not None and "scaler" in extra:
            self.prepared.scaler.load_state_dict(extra["scaler"])


add_trainer_attributes(Trainer)  # trainer.tokenizer where this release dropped it

_SHARDED_DDP = "_shardcompat_sharded_ddp"


class _ReleaseSeesNone:
    """``trainer.sharded_ddp``: 4.30's member for every reader but the installed release's own code.

    A release that still has the field branches on it into fairscale (OSS in ``create_optimizer``,
    ``consolidate_state_dict`` in ``_save_checkpoint``, a delayed optimizer); shardcompat shards
    instead, so the release's own modules read the None its ``__init__`` set, while the code of
    the era (a subclass, a script) reads the member 4.30 set.
    """

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.split(".")[0] != "transformers" and _SHARDED_DDP in obj.__dict__:
            return obj.__dict__[_SHARDED_DDP]
        return obj.__dict__.get("_release_sharded_ddp")

    def __set__(self, obj: Any, value: Any) -> None:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        obj.__dict__["_release_sharded_ddp" if caller.split(".")[0] == "transformers" else _SHARDED_DDP] = value


# ---------------------------------------------------------------------- 4.x internals
def _amp(self: Any) -> tuple[str, Any]:
    """4.30's mixed-precision setup: set only for a sharded run (else Accelerate's, and all False)."""
    options = getattr(self, "_sharding", None)
    wanted = options.mixed_precision if options else None
    if wanted is None:
        return "", None
    dtype = torch.float16 if wanted is Precision.FP16 else torch.bfloat16
    if self.args.device.type == "cuda":
        return "cuda", dtype
    return ("cpu", dtype) if dtype is torch.bfloat16 else ("", None)


def _legacy_attribute(name: str, get: Any, doc: str) -> property:
    key = f"_shardcompat_set_{name}"

    def getter(self: Any) -> Any:
        value = self.__dict__[key] if key in self.__dict__ else get(self)
        if value is _UNSET:  # 4.30 never set it in such a run: hasattr() and getattr(..., default) say so
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}' ({doc})")
        return value

    def setter(self: Any, value: Any) -> None:
        self.__dict__[key] = value

    return property(getter, setter, doc=doc)


def _fsdp(self: Any) -> Any:
    """4.30's ``trainer.fsdp``: None unless the release's own FSDP runs, then its ShardingStrategy."""
    if not getattr(self, "is_fsdp_enabled", False):
        return None
    from torch.distributed.fsdp import ShardingStrategy

    plugin = self.accelerator.state.fsdp_plugin
    strategy = getattr(plugin, "sharding_strategy", None)
    if isinstance(strategy, ShardingStrategy):
        return strategy
    # FSDP2's plugin says it with reshard_after_forward (FSDP1's strategies by name in some releases)
    reshard = getattr(plugin, "reshard_after_forward", True)
    if isinstance(reshard, ShardingStrategy):
        return reshard
    if isinstance(reshard, str):
        return ShardingStrategy[reshard.upper()]
    return ShardingStrategy.FULL_SHARD if reshard else ShardingStrategy.SHARD_GRAD_OP


def _scaler(self: Any) -> Any:
    if _amp(self) != ("cuda", torch.float16):  # 4.30 set self.scaler only where it scaled the loss
        return _UNSET
    prepared = getattr(self, "prepared", None)
    if prepared is not None and prepared.scaler is not None:
        return prepared.scaler
    return getattr(getattr(self, "accelerator", None), "scaler", None)


_UNSET: Any = object()  # an attribute 4.30 left unset in this run


# What 4.30's Trainer.__init__ set and code of its era reads, where this release lacks it (the
# descriptions: _sharded_ddp_option.ATTRIBUTES, which lists every sharding attribute of 4.30's).
_GETTERS: dict[str, Any] = {
    "sharded_ddp": lambda self: None,
    "fsdp": _fsdp,
    "use_apex": lambda self: False,
    "use_cuda_amp": lambda self: _amp(self)[0] == "cuda",
    "use_cpu_amp": lambda self: _amp(self)[0] == "cpu",
    "amp_dtype": lambda self: _UNSET if _amp(self)[1] is None else _amp(self)[1],
    "do_grad_scaling": lambda self: _amp(self) == ("cuda", torch.float16),
    "scaler": _scaler,
}
_ATTRIBUTES = {name: (get, "4.30: " + ATTRIBUTES[("Trainer", name)]) for name, get in _GETTERS.items()}


def _release_sets(name: str) -> bool:
    try:
        source = inspect.getsource(_RELEASE["Trainer"].__init__)
    except (OSError, TypeError):
        return True
    return f"self.{name} =" in source or hasattr(_RELEASE["Trainer"], name)


_LEGACY_ATTRIBUTES = {name: not _release_sets(name) for name in _ATTRIBUTES}
_REQUIRES_STATE = release_requires_state(_RELEASE["Trainer"].train)
_TRAIN_TAKES_KEYWORDS = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(_RELEASE["Trainer"].train).parameters.values())
for _name, (_get, _doc) in _ATTRIBUTES.items():
    if _LEGACY_ATTRIBUTES[_name]:
        setattr(Trainer, _name, _legacy_attribute(_name, _get, _doc))
if not _LEGACY_ATTRIBUTES["sharded_ddp"]:  # the release's own field: its modules keep reading None
    Trainer.sharded_ddp = _ReleaseSeesNone()  # type: ignore[assignment]


def _without(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call with argument ``name`` (at position ``index``) set to None."""
    if len(args) > index:
        return (*args[:index], None, *args[index + 1:]), kwargs
    return args, {**kwargs, name: None}


def _legacy_positional(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``Trainer(model, args, ..., compute_metrics)`` by position in 4.x's order, where it differs from today's."""
    owner = "Seq2SeqTrainer" if issubclass(cls, _RELEASE["Seq2SeqTrainer"]) else "Trainer"
    row = _overrides.by_method(owner).get("__init__")
    if row is None or not args:
        return args, kwargs
    legacy = [p.name for p in row.parameters("legacy")]
    today = [n for n in inspect.signature(_release_class(cls).__init__).parameters if n != "self"]
    shared = next((i for i, (a, b) in enumerate(zip(legacy, today)) if a != b and b != "processing_class"), len(legacy))
    if len(args) <= shared or today[:len(args)] == legacy[:len(args)]:
        return args, kwargs
    _overrides._warn(("super", "__init__"), f"{cls.__name__}(...) got {len(args)} positional arguments: taken in "
                     f"Transformers 4.x's order ({', '.join(legacy[:len(args)])}), where today's release has "
                     f"{', '.join(today[:len(args)])}. Pass them by keyword", stacklevel=4)
    named = dict(zip(legacy, args))  # tokenizer= then goes where the keyword goes (trainer_keywords)
    clash = sorted(set(named) & set(kwargs))
    if clash:
        raise TypeError(f"{cls.__name__}() got multiple values for {', '.join(clash)}")
    return (), {**named, **kwargs}


def _release_class(cls: type) -> Any:
    return _RELEASE["Seq2SeqTrainer"] if issubclass(cls, _RELEASE["Seq2SeqTrainer"]) else _RELEASE["Trainer"]


class Seq2SeqTrainer(Trainer, _hf.Seq2SeqTrainer):  # type: ignore[misc,name-defined]
    """The installed ``transformers.Seq2SeqTrainer`` with ``sharded_ddp``; see :class:`Trainer`."""

    def prediction_step(
        self, model: nn.Module, inputs: dict[str, Any], prediction_loss_only: bool,
        ignore_keys: list[str] | None = None, **gen_kwargs: Any,
    ) -> Any:
        if self.prepared is not None and dist.get_world_size() > 1:
            # generate() stops when its sequences end, at a different step on each rank; the
            # sharded forward is collective, so every rank keeps stepping until all are done.
            if not gen_kwargs:  # the release then reads self._gen_kwargs: keep them
                gen_kwargs = dict(getattr(self, "_gen_kwargs", None) or {})
            gen_kwargs.setdefault("synced_gpus", True)
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs)


def _unshard_oss(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """What a 4.30-era ``create_optimizer`` built as ``OSS(groups, optim=cls, **kwargs)`` (its
    ``self.sharded_ddp == ShardedDDPOption.SIMPLE`` branch), as ``cls(groups, **kwargs)``: the
    backend shards it, as 4.30's ShardedDDP sharded that OSS."""
    constructor = getattr(optimizer, "_optim_constructor", None)  # fairscale's OSS and torch's ZeRO
    if constructor is None or not isinstance(constructor, type) or not issubclass(constructor, torch.optim.Optimizer):
        return optimizer
    defaults = dict(getattr(optimizer, "_optim_defaults", {}))
    groups = [{**g, "params": list(g["params"])} for g in optimizer.param_groups]
    rebuilt: torch.optim.Optimizer = constructor(groups, **defaults)
    return rebuilt


def _generate_on_shards(prepared: Prepared) -> None:
    """Let ``prepared.module.generate()`` see whole parameters (see :data:`_GENERATE`)."""
    how = _GENERATE.get(prepared.backend)
    module: Any = prepared.module
    if how == "forward method":
        from torch.distributed.fsdp import register_fsdp_forward_method

        register_fsdp_forward_method(module, "generate")
    elif how == "full parameters":
        from torch.distributed.fsdp import FullyShardedDataParallel

        generate = module.generate

        @functools.wraps(generate)
        def generate_with_full_parameters(*args: Any, **kwargs: Any) -> Any:
            with FullyShardedDataParallel.summon_full_params(prepared.model, writeback=False):
                return generate(*args, **kwargs)

        module.generate = generate_with_full_parameters


def _empty_twin(model: Any) -> Any:
    """The same Transformers model class and configuration, parameters on the meta device."""
    with torch.device("meta"):
        twin = type(model)(copy.deepcopy(model.config))
    if getattr(model, "generation_config", None) is not None:
        twin.generation_config = model.generation_config
    return twin


def _refuse_constructor_arguments(given: dict[str, Any]) -> None:
    optimizers = given.get("optimizers") or (None, None)
    if any(o is not None for o in optimizers):
        raise _refuse(
            "optimizers=(optimizer, scheduler) were built on the unsharded model; the optimizer must "
            "be built on the shards, after wrapping",
            "Leave optimizers= out and choose with --optim/--learning_rate/--weight_decay, or subclass "
            "the Trainer and override create_optimizer (it is called on the wrapped model's parameters).",
        )
    if given.get("model_init") is not None:
        raise _refuse(
            "model_init= builds a new model for each train(), and the sharded wrapping belongs to one model",
            "Pass model= instead.",
        )
