"""The ``Trainer`` override protocol of Transformers 4.2x-4.30 against today's, and how a 4.x
subclass is served.

:data:`PROTOCOL` is the one table: every overridable ``Trainer``/``Seq2SeqTrainer`` method whose
parameters differ between 4.30.2 and the release these rows were read from (5.x), found by
reading both sources' method signatures (``tests/transformers/test_subclasses.py`` reads them
again with ``ast``/``inspect`` and fails on a difference the table lacks), plus the hooks the
issue asked about whose signature stayed the same (``unchanged``, so the table says they were
checked).  Plain data and small functions, no Transformers import.

How a 4.x override is served (by the drop-in ``Trainer``, :func:`adapt_class` at class creation):

- the release calls the method in today's form; the override, read once per class with
  :mod:`inspect`, is called in the form it declares (the arguments it lacks left out, those
  4.x passed and today's release does not, such as ``_save_checkpoint``'s ``metrics``, filled
  in as 4.x filled them);
- the override's own ``super()`` call in the 4.x form reaches a base that takes that form
  (:func:`base_call`) and completes it with what today's caller passed (``grad_norm``,
  ``start_time``...);
- each served form warns once per process (``FutureWarning``) with today's form and the codemod.

Nothing here runs for a class whose overrides use today's signatures, or on a release that
still has the 4.x form (the adaptation is decided by probing the installed base method).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["PROTOCOL", "Change", "Served", "adapt_class", "base_call", "by_method", "signature_text"]

MIGRATE_HINT = "shardcompat-migrate --transformers-legacy PATH writes today's form for good"
_PENDING = "_shardcompat_pending"  # instance dict key: today's arguments a 4.x override was not given


class Served(str, enum.Enum):
    ADAPTED = "adapted"  # the 4.x override is called in its form, the base takes its super() call
    COMPATIBLE = "compatible"  # today's release calls a 4.x override fine and takes its super() call
    NOT_CALLED = "not called"  # the release no longer has the method: a 4.x override is never called
    UNCHANGED = "unchanged"  # checked: the same parameters in both

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Change:
    """One method of the override protocol.

    ``legacy`` and ``today`` are the parameters after ``self`` as the sources spell them
    (``None``: the release has no such method); ``served`` and ``how`` say what a 4.x override
    meets; ``fill`` names the 4.x-only parameters the 4.x caller passed, with how they are filled.
    """

    method: str
    legacy: str | None
    today: str | None
    served: Served
    how: str
    owner: str = "Trainer"
    fill: tuple[str, ...] = ()
    static: bool = False

    def parameters(self, which: str) -> list[inspect.Parameter]:
        text = self.legacy if which == "legacy" else self.today
        return _parse(text or "")

    @property
    def new(self) -> tuple[str, ...]:
        """Today's parameters a 4.x override lacks."""
        old = {p.name for p in self.parameters("legacy")}
        return tuple(p.name for p in self.parameters("today") if p.name not in old and p.kind is not p.VAR_KEYWORD)

    @property
    def removed(self) -> tuple[str, ...]:
        """4.x parameters today's release no longer has."""
        new = {p.name for p in self.parameters("today")}
        return tuple(p.name for p in self.parameters("legacy") if p.name not in new and p.kind is not p.VAR_KEYWORD)


def _default(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)  # not a literal (torch.float32): its source text


def _parse(text: str) -> list[inspect.Parameter]:
    """``"model, inputs, return_outputs=False, **kwargs"`` as parameters (defaults: literals, else their text)."""
    args = ast.parse(f"def f({text}): pass").body[0].args  # type: ignore[attr-defined]
    out: list[inspect.Parameter] = []
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    for i, a in enumerate(positional):
        default = _default(args.defaults[i - first_default]) if i >= first_default else inspect.Parameter.empty
        out.append(inspect.Parameter(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    if args.vararg:
        out.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        default = _default(d) if d is not None else inspect.Parameter.empty
        out.append(inspect.Parameter(a.arg, inspect.Parameter.KEYWORD_ONLY, default=default))
    if args.kwarg:
        out.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return out


def signature_text(parameters: list[inspect.Parameter]) -> str:
    """``(self, model, inputs, return_outputs=False)`` for the docs and the warnings."""
    return str(inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *parameters]))


# Trainer.__init__ in 4.30 (Seq2SeqTrainer's is the same).
_INIT_4X = ("model=None, args=None, data_collator=None, train_dataset=None, eval_dataset=None, "
            "tokenizer=None, model_init=None, compute_metrics=None, callbacks=None, optimizers=(None, None), "
            "preprocess_logits_for_metrics=None")


_NEVER = ("the installed release no longer has this method, so an override of it is never called "
          "and a super() call to it fails; ")

# Read from transformers 4.30.2 (trainer.py, trainer_seq2seq.py) and 5.x (5.25).
PROTOCOL: tuple[Change, ...] = (
    Change("compute_loss", "model, inputs, return_outputs=False",
           "model, inputs, return_outputs=False, num_items_in_batch=None", Served.ADAPTED,
           "called without num_items_in_batch, and the loss it returns is a per-batch mean that "
           "training_step divides by the accumulation steps, as 4.x did; (loss, outputs) with "
           "return_outputs=True is taken as 4.x took it"),
    Change("training_step", "model, inputs", "model, inputs, num_items_in_batch=None", Served.ADAPTED,
           "called without num_items_in_batch (the loss is a per-batch mean, as in 4.x); a "
           "self.accelerator.backward(loss) in the override's own body divides by the accumulation "
           "steps as 4.x's Accelerator did, and it returns loss / accumulation steps as 4.x did"),
    Change("_get_train_sampler", "", "train_dataset=None", Served.ADAPTED,
           "called without train_dataset (the override reads self.train_dataset, as in 4.x)"),
    Change("_save_checkpoint", "model, trial, metrics=None", "model, trial", Served.ADAPTED,
           "called with metrics= the evaluation of this step gave (None without one), as 4.x "
           "called it; super()._save_checkpoint(model, trial, metrics) is taken and metrics "
           "dropped (today's release picks the best checkpoint before saving)", fill=("metrics",)),
    Change("create_optimizer", "", "model=None", Served.ADAPTED,
           "called without model; where the release passes a model other than self.model, "
           "self.model is that model for the call (4.x had set self.model to the wrapped model)"),
    Change("get_optimizer_cls_and_kwargs", "args", "args, model=None", Served.ADAPTED,
           "a 4.x staticmethod override is called without model", static=True),
    Change("log", "logs", "logs, start_time=None", Served.ADAPTED,
           "called without start_time; super().log(logs) gets the start_time the release passed"),
    Change("_maybe_log_save_evaluate", "tr_loss, model, trial, epoch, ignore_keys_for_eval",
           "tr_loss, grad_norm, model, trial, epoch, ignore_keys_for_eval, start_time, learning_rate=None",
           Served.ADAPTED,
           "called without grad_norm, start_time and learning_rate; its super() call in the 4.x form "
           "gets those the release passed"),
    Change("_tune_save_checkpoint", "", "checkpoint_dir", Served.ADAPTED,
           "called without checkpoint_dir; super()._tune_save_checkpoint() gets the one the release passed"),
    Change("__init__", _INIT_4X,
           "model=None, args=None, data_collator=None, train_dataset=None, eval_dataset=None, "
           "processing_class=None, model_init=None, compute_loss_func=None, compute_metrics=None, "
           "callbacks=None, optimizers=(None, None), optimizer_cls_and_kwargs=None, "
           "preprocess_logits_for_metrics=None", Served.ADAPTED,
           "Trainer(...) with more than 7 positional arguments takes them in 4.x order "
           "(compute_metrics 8th, not compute_loss_func); tokenizer= is processing_class= (the legacy-names table)"),
    Change("__init__", _INIT_4X,
           "model=None, args=None, data_collator=None, train_dataset=None, eval_dataset=None, "
           "processing_class=None, model_init=None, compute_loss_func=None, compute_metrics=None, "
           "callbacks=None, optimizers=(None, None), preprocess_logits_for_metrics=None", Served.ADAPTED,
           "as Trainer(...)", owner="Seq2SeqTrainer"),
    Change("train", "resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs",
           "resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None", Served.COMPATIBLE,
           "4.x's **kwargs only took the deprecated model_path=, served as resume_from_checkpoint=; an override is "
           "called and its super() call taken; "
           "resume_from_checkpoint= a folder without trainer_state.json (the 4.x examples passed their local "
           "model_name_or_path) loads its weights and starts fresh, as 4.x did, where today's release raises"),
    Change("push_to_hub", "commit_message='End of training', blocking=True, **kwargs",
           "commit_message='End of training', blocking=True, token=None, revision=None, private=None, **kwargs",
           Served.COMPATIBLE, "the new keywords reach a 4.x override's **kwargs"),
    Change("prediction_step", "model, inputs, prediction_loss_only, ignore_keys=None",
           "model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs", Served.COMPATIBLE,
           "the release calls it without generation keywords, and the base reads self._gen_kwargs",
           owner="Seq2SeqTrainer"),
    Change("prediction_step", "model, inputs, prediction_loss_only, ignore_keys=None",
           "model, inputs, prediction_loss_only, ignore_keys=None", Served.UNCHANGED,
           "returns (loss, logits, labels) in both"),
    Change("_get_eval_sampler", "eval_dataset", "eval_dataset", Served.UNCHANGED, "same call, same result"),
    Change("evaluate", "eval_dataset=None, ignore_keys=None, metric_key_prefix='eval'",
           "eval_dataset=None, ignore_keys=None, metric_key_prefix='eval'", Served.UNCHANGED,
           "same call; the metrics dict it returns is read as in 4.x"),
    Change("predict", "test_dataset, ignore_keys=None, metric_key_prefix='test'",
           "test_dataset, ignore_keys=None, metric_key_prefix='test'", Served.UNCHANGED,
           "same call, a PredictionOutput back"),
    *(Change(name, legacy, None, Served.NOT_CALLED, _NEVER + instead) for name, legacy, instead in (
        ("_rotate_checkpoints", "use_mtime=False, output_dir=None",
         "transformers.trainer_utils.rotate_checkpoints does it now (save_total_limit)"),
        ("_sorted_checkpoints", "output_dir=None, checkpoint_prefix='checkpoint', use_mtime=False",
         "transformers.trainer_utils.sort_checkpoints"),
        ("_nested_gather", "tensors, name=None", "self.accelerator.gather_for_metrics(tensors)"),
        ("_pad_across_processes", "tensor, pad_index=-100", "self.accelerator.pad_across_processes(tensor)"),
        ("_gather_and_numpify", "tensors, name", "self.accelerator.gather_for_metrics, then .cpu().numpy()"),
        ("prediction_loop", "dataloader, description, prediction_loss_only=None, ignore_keys=None, "
                            "metric_key_prefix='eval'", "evaluation_loop (use_legacy_prediction_loop is gone)"),
        ("init_git_repo", "at_init=False", "init_hf_repo()"),
        ("_save_tpu", "output_dir=None", "_save() (XLA saving lives there now)"),
        ("ipex_optimize_model", "model, training=False, dtype=torch.float32",
         "nothing: --use_ipex is gone (Intel's extension is applied outside the Trainer)"),
        ("torch_jit_model_eval", "model, dataloader, training=False", "nothing: --jit_mode_eval is gone"),
        ("_add_sm_patterns_to_gitignore", "", "nothing: the SageMaker gitignore patterns are gone"),
    )),
)


def by_method(owner: str = "Trainer") -> dict[str, Change]:
    """The rows for ``owner``'s methods (a ``Seq2SeqTrainer`` row wins over the ``Trainer`` one)."""
    rows = {c.method: c for c in PROTOCOL if c.owner == "Trainer" and c.served is not Served.UNCHANGED}
    if owner != "Trainer":
        rows.update({c.method: c for c in PROTOCOL if c.owner == owner and c.served is not Served.UNCHANGED})
    return rows


# ---------------------------------------------------------------------- warnings
_warned: set[tuple[str, str]] = set()


def _warn(key: tuple[str, str], message: str, stacklevel: int = 3) -> None:
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(f"{message} ({MIGRATE_HINT}; every hook: docs/transformers-legacy.md).", FutureWarning,
                  stacklevel=stacklevel)


def _form(c: Change, which: str) -> str:
    return f"{c.method}{signature_text(c.parameters(which))}"


# ---------------------------------------------------------------------- the override side
def _declared(fn: Any) -> list[inspect.Parameter] | None:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    return params


def is_legacy(c: Change, fn: Any) -> bool:
    """Whether ``fn`` (an override, ``self`` included unless static) is written in ``c``'s 4.x form."""
    params = _declared(fn)
    if params is None or c.legacy is None or c.today is None:
        return False
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return False  # takes whatever it is given
    names = {p.name for p in params}
    if any(n in names for n in c.removed):
        return True
    return len(params) - (0 if c.static else 1) < len(c.parameters("today")) and not all(n in names for n in c.new)


def _release_accepts_today(c: Change, release: Any) -> bool:
    """Whether the installed release's base method has today's form (else nothing to adapt)."""
    fn = getattr(release, c.method, None)
    params = _declared(fn) if fn is not None else None
    if params is None:
        return False
    names = {p.name for p in params}
    return all(n in names for n in c.new) and not any(n in names for n in c.removed)


def _bind(c: Change, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The call's arguments by today's or 4.x names, and whether it was the 4.x form."""
    today = inspect.Signature(c.parameters("today"))
    try:
        return dict(today.bind(*args, **kwargs).arguments), False
    except TypeError:
        legacy = inspect.Signature(c.parameters("legacy"))
        return dict(legacy.bind(*args, **kwargs).arguments), True


def _legacy_args(c: Change, given: dict[str, Any]) -> list[Any]:
    """Positional arguments for a 4.x override, in its order, up to the last one given."""
    order = c.parameters("legacy")
    last = max((i for i, p in enumerate(order) if p.name in given), default=-1)
    return [given.get(p.name, p.default) for p in order[: last + 1]]


def _adapter(c: Change, cls_name: str, override: Callable[..., Any], release: Any) -> Callable[..., Any]:
    special = _SPECIAL.get(c.method)

    @functools.wraps(override)
    def served(self: Any, *args: Any, **kwargs: Any) -> Any:
        _warn(("override", f"{cls_name}.{c.method}"),
              f"{cls_name}.{_form(c, 'legacy')} is the Transformers 4.x form of this Trainer hook, which "
              f"the installed release calls as {_form(c, 'today')}; shardcompat calls it as 4.x did "
              f"({c.how}). Write {_form(c, 'today')}", stacklevel=3)
        given, legacy_call = _bind(c, args, kwargs)
        stack = self.__dict__.setdefault(_PENDING, {})
        previous = stack.get(c.method)
        # A 4.x-form call (a subclass's super() into this override) keeps what the release passed.
        pending = (previous or {}) if legacy_call else {n: given[n] for n in c.new if n in given}
        for n in c.new:
            given.pop(n, None)
        for name in c.fill:
            if name not in given:
                given[name] = _FILL[name](self)
        stack[c.method] = pending
        try:
            call: Callable[[], Any] = functools.partial(override, self, *_legacy_args(c, given))
            return special(self, call, pending) if special is not None else call()
        finally:
            if previous is None:
                stack.pop(c.method, None)
            else:
                stack[c.method] = previous

    served.__shardcompat_legacy__ = c  # type: ignore[attr-defined]
    return served


def _static_adapter(c: Change, cls_name: str, override: Callable[..., Any]) -> Any:
    @functools.wraps(override)
    def served(*args: Any, **kwargs: Any) -> Any:
        given, _ = _bind(c, args, kwargs)
        _warn(("override", f"{cls_name}.{c.method}"),
              f"{cls_name}.{c.method}({c.legacy}) is the Transformers 4.x form of this Trainer hook, which the "
              f"installed release calls as {c.method}({c.today}); shardcompat calls it as 4.x did ({c.how}). "
              f"Write {c.method}({c.today})", stacklevel=3)
        for n in c.new:
            given.pop(n, None)
        return override(*_legacy_args(c, given))

    return staticmethod(served)


def _create_optimizer(self: Any, call: Callable[[], Any], pending: dict[str, Any]) -> Any:
    model = pending.get("model")
    if model is None or model is self.model:
        return call()
    saved, self.model = self.model, model
    try:
        return call()
    finally:
        self.model = saved


def _training_step(self: Any, call: Callable[[], Any], pending: dict[str, Any]) -> Any:
    """4.x's Accelerator divided the loss by the accumulation steps in ``backward``; today's does not."""
    accelerator = self.accelerator
    steps = int(getattr(self, "current_gradient_accumulation_steps", None) or self.args.gradient_accumulation_steps)
    if steps <= 1 or getattr(accelerator, "gradient_accumulation_steps", 1) != 1:
        return call()
    inner = accelerator.backward

    def backward(loss: Any, **kwargs: Any) -> Any:
        if self.__dict__.get("_shardcompat_in_base_step"):
            return inner(loss, **kwargs)  # the base training_step divided already
        return inner(loss / steps, **kwargs)

    accelerator.backward = backward
    try:
        return call()
    finally:
        del accelerator.backward  # the class's method again


_SPECIAL: dict[str, Callable[[Any, Callable[[], Any], dict[str, Any]], Any]] = {
    "create_optimizer": _create_optimizer,
    "training_step": _training_step,
}
_FILL: dict[str, Callable[[Any], Any]] = {"metrics": lambda self: self.__dict__.get("_shardcompat_metrics")}


def adapt_class(cls: type, release: Any) -> list[str]:
    """Wrap ``cls``'s own 4.x-form overrides (read once, here); warn about overrides never called.

    ``release`` is the installed ``Trainer`` (or ``Seq2SeqTrainer``) class.  Returns the
    methods adapted, for the tests.
    """
    owner = "Seq2SeqTrainer" if any(k.__name__ == "Seq2SeqTrainer" for k in cls.__mro__[1:]) else "Trainer"
    adapted = []
    for name, fn in list(vars(cls).items()):
        c = by_method(owner).get(name)
        if c is None or name == "__init__" or c.served not in (Served.ADAPTED, Served.NOT_CALLED):
            continue
        if c.served is Served.NOT_CALLED:
            if not hasattr(release, name):
                _warn(("never", f"{cls.__name__}.{name}"),
                      f"{cls.__name__} overrides {name}{signature_text(c.parameters('legacy'))}, a Transformers "
                      f"4.x Trainer hook: {c.how}", stacklevel=4)
            continue
        static = isinstance(fn, staticmethod)
        target = fn.__func__ if static else fn
        if not callable(target) or getattr(target, "__shardcompat_legacy__", None) is not None:
            continue
        if static != c.static or not _release_accepts_today(c, release) or not is_legacy(c, target):
            continue
        setattr(cls, name, _static_adapter(c, cls.__name__, target) if static else
                _adapter(c, cls.__name__, target, release))
        adapted.append(name)
    return adapted


# ---------------------------------------------------------------------- the base side
def base_call(self: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A ``super().method(...)`` call as today's release takes it: unchanged in today's form; in
    the 4.x form, completed with what today's caller passed the override (warned once)."""
    c = by_method().get(method)
    if c is None or c.today is None or not _base_takes_today(self.__class__, method):
        return args, kwargs  # a release that still has the 4.x form takes its own calls as they are
    try:
        given, legacy_call = _bind(c, args, kwargs)
    except TypeError:
        return args, kwargs  # neither form: let the release say what is wrong
    pending = self.__dict__.get(_PENDING, {}).get(method)
    if not legacy_call:
        if pending is None or method in _NO_SUPER_FILL or all(n in given for n in c.new):
            return args, kwargs
        # super().log(logs) inside a 4.x log override: what the release passed that override.
        return (), {**given, **{n: v for n, v in pending.items() if n not in given}}
    _warn(("super", method),
          f"super().{method}(...) in the Transformers 4.x form {_form(c, 'legacy')}; the installed release "
          f"takes {_form(c, 'today')}, and shardcompat completes the call as 4.x meant it ({c.how}). "
          f"Write {_form(c, 'today')}", stacklevel=4)
    for name in c.removed:
        given.pop(name, None)
    for p in c.parameters("today"):
        if p.name not in given and p.kind is not p.VAR_KEYWORD:
            given[p.name] = (pending or {}).get(p.name, None if p.default is inspect.Parameter.empty else p.default)
    return (), given


@functools.cache
def _base_takes_today(cls: type, method: str) -> bool:
    """Whether the installed release's class under ``cls`` (the first from ``transformers``) has
    today's form of ``method``."""
    release = next((k for k in cls.__mro__ if k.__module__.startswith("transformers.")), None)
    return release is not None and _release_accepts_today(by_method()[method], release)


# A 4.x compute_loss's own loss is a per-batch mean: its super() call gets no num_items_in_batch.
_NO_SUPER_FILL = frozenset({"compute_loss"})
