"""The option grammar: one vocabulary table, one canonical form, errors that say what to do.

Every spelling users have in the wild (Transformers' list syntax after PR #10354, the legacy
boolean, the later ``--fsdp`` words, DeepSpeed's ``stage=N``) parses to one frozen
:class:`ShardingOptions`.  ``str(options)`` is the canonical list string and parses back to
an equal value, so the canonical form can be logged, stored in configs and diffed.

The tables below (:data:`TOKENS`, :data:`TUNABLES`, :data:`RULES`) are the single source of
truth: the docs' option reference and the CLI help are generated from them.
"""

from __future__ import annotations

import difflib
import enum
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple, Union

__all__ = [
    "BACKEND_CHOICES",
    "BACKEND_NAMES",
    "RULES",
    "TOKENS",
    "TUNABLES",
    "HfFsdp",
    "OptionsInput",
    "Precision",
    "Prefetch",
    "Rule",
    "ShardingOptions",
    "ShardingOptionsConflict",
    "ShardingOptionsError",
    "ShardingOptionsWarning",
    "Stage",
    "Token",
    "Tunable",
    "legacy_simple",
    "parse_integer",
    "parse_number",
    "parse_options",
]


class Stage(str, enum.Enum):
    """What is sharded. ``SIMPLE`` is fairscale's ShardedDDP+OSS (optimizer state and gradients)."""

    SIMPLE = "simple"
    ZERO_DP_1 = "zero_dp_1"
    ZERO_DP_2 = "zero_dp_2"
    ZERO_DP_3 = "zero_dp_3"
    NO_SHARD = "no_shard"

    @property
    def zero_stage(self) -> int:
        """The ZeRO paper's stage number (``simple`` shards optimizer state and gradients: 2)."""
        return _ZERO_STAGE[self]

    def __str__(self) -> str:
        return self.value


_ZERO_STAGE = {
    Stage.SIMPLE: 2,
    Stage.ZERO_DP_1: 1,
    Stage.ZERO_DP_2: 2,
    Stage.ZERO_DP_3: 3,
    Stage.NO_SHARD: 0,
}
_FSDP_STAGES = frozenset({Stage.ZERO_DP_2, Stage.ZERO_DP_3, Stage.NO_SHARD})
_SHARDING_STAGES = frozenset({Stage.ZERO_DP_2, Stage.ZERO_DP_3})


class Precision(str, enum.Enum):
    """Mixed precision for parameters, gradients and buffers during compute."""

    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"

    def __str__(self) -> str:
        return self.value


class Prefetch(str, enum.Enum):
    """When FSDP prefetches the next unit's parameters during backward."""

    PRE = "pre"
    POST = "post"
    NONE = "none"

    def __str__(self) -> str:
        return self.value


BACKEND_NAMES = ("torch-zero", "torch-fsdp1", "torch-fsdp2", "fairscale-sdp", "fairscale-fsdp")
BACKEND_CHOICES = ("auto", "torch", "fairscale", *BACKEND_NAMES)


class ShardingOptionsError(ValueError):
    """A sharding option string that cannot be understood.

    ``token`` is the offending piece, ``choices`` what would have been valid there and
    ``suggestion`` the closest valid spelling (or ``None``).
    """

    def __init__(
        self,
        message: str,
        *,
        token: str | None = None,
        choices: Iterable[str] = (),
        suggestion: str | None = None,
    ) -> None:
        super().__init__(message)
        self.token = token
        self.choices = tuple(choices)
        self.suggestion = suggestion


class ShardingOptionsConflict(ShardingOptionsError):
    """Options that are each valid but cannot be combined; ``rule`` names the broken rule."""

    def __init__(self, message: str, *, rule: str, token: str | None = None) -> None:
        super().__init__(message, token=token)
        self.rule = rule


class ShardingOptionsWarning(UserWarning):
    """Options that parse, but not as written: a word given twice, or text with no words.

    The message says what they became (the canonical form), so nothing changes silently.
    """


# --------------------------------------------------------------------------- vocabulary


@dataclass(frozen=True)
class Token:
    """One word of the list syntax and what it sets."""

    name: str
    help: str
    origin: str
    stage: Stage | None = None
    offload: bool = False
    auto_wrap: bool = False
    hybrid: bool = False

    @property
    def canonical(self) -> str:
        """The canonical spelling this word stands for."""
        return " ".join(_canonical_words(self.stage, self.hybrid, self.offload, self.auto_wrap))


_LIST = "Transformers --sharded_ddp (PR #10354)"
_FSDP = "Transformers --fsdp"
_SHORT = "short alias"
_OURS = "shardcompat"

TOKENS: Mapping[str, Token] = {
    t.name: t
    for t in (
        Token("simple", "fairscale ShardedDDP + OSS: optimizer state and gradients sharded.", _LIST, stage=Stage.SIMPLE),
        Token("zero_dp_1", "ZeRO stage 1: only optimizer state sharded (OSS or ZeroRedundancyOptimizer).", _OURS, stage=Stage.ZERO_DP_1),
        Token("zero_dp_2", "ZeRO stage 2: optimizer state and gradients sharded; parameters gathered after forward stay.", _LIST, stage=Stage.ZERO_DP_2),
        Token("zero_dp_3", "ZeRO stage 3: parameters, gradients and optimizer state sharded.", _LIST, stage=Stage.ZERO_DP_3),
        Token("offload", "Keep the sharded parameters and optimizer state in CPU memory.", _LIST, offload=True),
        Token("auto_wrap", "Wrap submodules into their own sharded units (by wrap=, _no_split_modules or min_num_params).", _LIST, auto_wrap=True),
        Token("hybrid", "Shard within a node, replicate across nodes (needs zero_dp_2 or zero_dp_3).", _OURS, hybrid=True),
        Token("full_shard", "Same as zero_dp_3.", _FSDP, stage=Stage.ZERO_DP_3),
        Token("shard_grad_op", "Same as zero_dp_2.", _FSDP, stage=Stage.ZERO_DP_2),
        Token("no_shard", "FSDP without sharding (plain data parallel through FSDP).", _FSDP, stage=Stage.NO_SHARD),
        Token("hybrid_shard", "zero_dp_3 within a node, replicated across nodes.", _FSDP, stage=Stage.ZERO_DP_3, hybrid=True),
        Token("hybrid_shard_zero2", "zero_dp_2 within a node, replicated across nodes.", _FSDP, stage=Stage.ZERO_DP_2, hybrid=True),
        Token("zero1", "Same as zero_dp_1.", _SHORT, stage=Stage.ZERO_DP_1),
        Token("zero2", "Same as zero_dp_2.", _SHORT, stage=Stage.ZERO_DP_2),
        Token("zero3", "Same as zero_dp_3.", _SHORT, stage=Stage.ZERO_DP_3),
        Token("zero2_offload", "Same as zero_dp_2 offload.", _SHORT, stage=Stage.ZERO_DP_2, offload=True),
        Token("zero3_offload", "Same as zero_dp_3 offload.", _SHORT, stage=Stage.ZERO_DP_3, offload=True),
    )
}

_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})
_LEGACY_TRUE = frozenset({"true", "1", "yes"})
_LEGACY_FALSE = frozenset({"false", "0", "no"})


def _parse_bool(text: str) -> bool:
    word = text.lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError("expected true or false")


# Numbers are written in ASCII digits only: int() and float() also read other scripts' digits
# ("٣", "３"), which would make 'stage=٣' mean what 'zero_dp_٣' does not.
_DIGITS = r"[0-9](?:_?[0-9])*"  # Python's own digit grouping (1_000) is ASCII too
_INTEGER = re.compile(rf"[+-]?{_DIGITS}")
_NUMBER = re.compile(rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?")
_MAX_BUCKET_CAP_MB = 2.0**20  # 1 TiB: more than any model's gradients, far below an overflow in DDP
_MAX_COUNT = 2**63 - 1  # torch's largest tensor size (int64)


def parse_number(text: str) -> float:
    """A finite number written in ASCII (``50``, ``0.5``, ``1e8``); ValueError otherwise."""
    if not _NUMBER.fullmatch(text.strip()):
        raise ValueError(f"not a number in ASCII digits: {_quoted(text)}")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {_quoted(text)}")
    return value


def parse_integer(text: str) -> int:
    """A whole number written in ASCII digits (an optional sign, no ``_``); ValueError otherwise."""
    if not _INTEGER.fullmatch(text.strip()):
        raise ValueError(f"not a whole number in ASCII digits: {_quoted(text)}")
    return int(text)


def _parse_bucket_cap(text: str) -> float:
    value = parse_number(text)
    if not 0 < value <= _MAX_BUCKET_CAP_MB:
        raise ValueError("out of range")
    return value


def _parse_count(text: str) -> int:
    if _INTEGER.fullmatch(text.strip()):
        value = int(text)
    else:
        number = parse_number(text)  # "1e8" style
        if number != int(number):
            raise ValueError("expected a whole number")
        value = int(number)
    if not 0 <= value <= _MAX_COUNT:
        raise ValueError("out of range")
    return value


_CLASS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _parse_class_names(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n for n in text.split(",") if n))
    if not names or not all(_CLASS_NAME.match(n) for n in names):
        raise ValueError("expected comma-separated class names such as GPT2Block,T5Block")
    return names


def _enum_parser(kind: type[enum.Enum]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return kind(text.lower())

    return parse


def _parse_backend(text: str) -> str:
    name = text.lower().replace("_", "-")
    if name not in BACKEND_CHOICES:
        raise ValueError("unknown backend")
    return name


def _parse_stage_number(text: str) -> Stage | None:
    if text not in ("0", "1", "2", "3"):
        raise ValueError("expected 0, 1, 2 or 3")
    return (None, Stage.ZERO_DP_1, Stage.ZERO_DP_2, Stage.ZERO_DP_3)[int(text)]


def _format_number(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _format_number(value)
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


@dataclass(frozen=True)
class Tunable:
    """A ``key=value`` setting; ``field`` is the :class:`ShardingOptions` field it fills."""

    key: str
    field: str
    help: str
    values: str
    parse: Callable[[str], Any]
    fsdp_only: bool = False


TUNABLES: Mapping[str, Tunable] = {
    t.key: t
    for t in (
        Tunable("bucket_cap_mb", "bucket_cap_mb", "Gradient bucket size in MiB (DDP, ShardedDDP, fairscale FSDP reduce-scatter).", "a number of MiB above 0, at most 1048576 (1 TiB)", _parse_bucket_cap),
        Tunable("min_num_params", "min_num_params", "auto_wrap: wrap every submodule with at least this many parameters.", "a whole number from 0 to 2**63-1, 1e8 style accepted", _parse_count, fsdp_only=True),
        Tunable("wrap", "wrap", "auto_wrap: wrap every submodule of these classes.", "comma-separated class names", _parse_class_names, fsdp_only=True),
        Tunable("mixed_precision", "mixed_precision", "Compute dtype for parameters and gradient reduction.", "fp16, bf16 or fp32", _enum_parser(Precision)),
        Tunable("backward_prefetch", "backward_prefetch", "When to prefetch the next unit's parameters in backward.", "pre, post or none", _enum_parser(Prefetch), fsdp_only=True),
        Tunable("forward_prefetch", "forward_prefetch", "Prefetch the next unit's parameters in forward.", "true or false", _parse_bool, fsdp_only=True),
        Tunable("limit_all_gathers", "limit_all_gathers", "Rate-limit all-gathers to bound memory (FSDP1).", "true or false", _parse_bool, fsdp_only=True),
        Tunable("reshard_after_forward", "reshard_after_forward", "Free gathered parameters after forward (true is zero_dp_3, false is zero_dp_2).", "true or false", _parse_bool, fsdp_only=True),
        Tunable("backend", "backend", "Which implementation serves the options.", ", ".join(BACKEND_CHOICES), _parse_backend),
        Tunable("stage", "stage", "DeepSpeed-style stage number: 0 (off), 1, 2 or 3.", "0, 1, 2 or 3", _parse_stage_number),
    )
}
_TUNABLE_FIELDS = tuple(t.field for t in TUNABLES.values() if t.key != "stage")


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    """A combination rule: ``broken(options)`` returns the message when the rule is broken.

    ``example`` breaks the rule (the docs show its exact error).  Rules about the words
    themselves (two stages, a repeated setting) are checked while parsing: ``broken`` is None.
    """

    id: str
    summary: str
    example: str
    broken: Callable[[ShardingOptions], str | None] | None = None


def _with_stage(o: ShardingOptions) -> str:
    return f"with '{o.stage}'" if o.stage else "on its own"


def _simple_alone(o: ShardingOptions) -> str | None:
    if o.stage is Stage.SIMPLE:
        extra = _canonical_words(None, o.hybrid, o.offload, o.auto_wrap)
        if extra:
            return (
                f"'simple' is not compatible with any other option (got {' '.join(extra)}); "
                "use 'zero_dp_2' or 'zero_dp_3' to combine with " + ", ".join(extra)
            )
    return None


def _offload_needs_stage(o: ShardingOptions) -> str | None:
    if not o.offload or o.stage in _SHARDING_STAGES or o.stage is Stage.SIMPLE:
        return None
    if o.stage is Stage.ZERO_DP_1:
        return (
            "'offload' is not supported with 'zero_dp_1' (only optimizer state is sharded there); "
            "use 'zero_dp_2 offload' or 'zero_dp_3 offload'"
        )
    what = _with_stage(o)
    return f"'offload' can't work {what}; it needs 'zero_dp_2' or 'zero_dp_3', e.g. 'zero_dp_3 offload'"


def _auto_wrap_needs_fsdp(o: ShardingOptions) -> str | None:
    if not o.auto_wrap or o.stage in _FSDP_STAGES or o.stage is Stage.SIMPLE:
        return None
    what = _with_stage(o)
    return f"'auto_wrap' can't work {what}; it needs 'zero_dp_2' or 'zero_dp_3', e.g. 'zero_dp_3 auto_wrap'"


def _hybrid_needs_sharding(o: ShardingOptions) -> str | None:
    if not o.hybrid or o.stage in _SHARDING_STAGES or o.stage is Stage.SIMPLE:
        return None
    what = _with_stage(o)
    return f"'hybrid' can't work {what}; write 'hybrid_shard' (zero_dp_3) or 'hybrid_shard_zero2' (zero_dp_2)"


def _wrap_exclusive(o: ShardingOptions) -> str | None:
    if o.wrap and o.min_num_params is not None:
        return "'wrap=' and 'min_num_params=' choose the auto_wrap policy in two ways; keep one"
    return None


def _fsdp_tunables(o: ShardingOptions) -> str | None:
    if o.stage in _FSDP_STAGES:
        return None
    given = [t.key for t in TUNABLES.values() if t.fsdp_only and getattr(o, t.field) not in (None, ())]
    if not given:
        return None
    what = f"'{o.stage}'" if o.stage else "sharding off"
    return (
        f"{', '.join(k + '=' for k in given)} can only be used with FSDP modes (zero_dp_2, "
        f"zero_dp_3, no_shard), not {what}"
    )


def _reshard_consistent(o: ShardingOptions) -> str | None:
    if o.reshard_after_forward is None:
        return None
    if o.stage is Stage.ZERO_DP_3 and o.reshard_after_forward is False:
        return "'zero_dp_3 reshard_after_forward=false' is zero_dp_2: write 'zero_dp_2'"
    if o.stage is Stage.ZERO_DP_2 and o.reshard_after_forward is True:
        return "'zero_dp_2 reshard_after_forward=true' is zero_dp_3: write 'zero_dp_3'"
    if o.stage is Stage.NO_SHARD:
        return "'reshard_after_forward=' has no effect with 'no_shard': remove it"
    return None


RULES: tuple[Rule, ...] = (
    Rule("two-stages", "One stage only: two different stage words conflict.", "zero_dp_2 zero_dp_3"),
    Rule("repeated-setting", "A key=value setting may repeat only with the same value.", "zero_dp_2 bucket_cap_mb=1 bucket_cap_mb=2"),
    Rule("simple-alone", "'simple' combines with no other mode word (offload, auto_wrap, hybrid).", "simple offload", _simple_alone),
    Rule("offload-needs-stage", "'offload' needs zero_dp_2 or zero_dp_3 (not zero_dp_1, no_shard or nothing).", "zero_dp_1 offload", _offload_needs_stage),
    Rule("auto-wrap-needs-fsdp", "'auto_wrap' (and wrap=, min_num_params=) need zero_dp_2, zero_dp_3 or no_shard.", "zero_dp_1 auto_wrap", _auto_wrap_needs_fsdp),
    Rule("hybrid-needs-sharding", "'hybrid' needs zero_dp_2 or zero_dp_3.", "no_shard hybrid", _hybrid_needs_sharding),
    Rule("wrap-exclusive", "'wrap=' and 'min_num_params=' exclude each other.", "zero_dp_3 wrap=GPT2Block min_num_params=1e6", _wrap_exclusive),
    Rule("fsdp-tunables", "FSDP tunables need an FSDP mode.", "simple backward_prefetch=pre", _fsdp_tunables),
    Rule("reshard-consistent", "'reshard_after_forward=' must agree with the stage.", "zero_dp_3 reshard_after_forward=false", _reshard_consistent),
)


# --------------------------------------------------------------------------- the value


def _canonical_words(stage: Stage | None, hybrid: bool, offload: bool, auto_wrap: bool) -> list[str]:
    words = [stage.value] if stage else []
    words += [w for w, on in (("hybrid", hybrid), ("offload", offload), ("auto_wrap", auto_wrap)) if on]
    return words


class HfFsdp(NamedTuple):
    """Transformers ``TrainingArguments(fsdp=..., fsdp_config=...)`` values.

    ``caveats`` says, one sentence each, what the options ask for that these values do not
    carry over exactly, so a translation never loses a setting without a word.
    """

    fsdp: str | bool
    fsdp_config: dict[str, Any]
    caveats: tuple[str, ...] = ()

    def trainer_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``TrainingArguments`` (none when sharding is off)."""
        if not self.fsdp:
            return {}
        kwargs: dict[str, Any] = {"fsdp": self.fsdp}
        if self.fsdp_config:
            kwargs["fsdp_config"] = dict(self.fsdp_config)
        return kwargs


@dataclass(frozen=True)
class ShardingOptions:
    """Parsed, validated sharding options; ``str()`` gives the canonical list string.

    ``bool(options)`` is False when sharding is off (plain DDP).  Build one with
    :func:`parse_options`; constructing it directly runs the same combination rules.
    """

    stage: Stage | None = None
    offload: bool = False
    auto_wrap: bool = False
    hybrid: bool = False
    bucket_cap_mb: float | None = None
    min_num_params: int | None = None
    wrap: tuple[str, ...] = ()
    mixed_precision: Precision | None = None
    backward_prefetch: Prefetch | None = None
    forward_prefetch: bool | None = None
    limit_all_gathers: bool | None = None
    reshard_after_forward: bool | None = None
    backend: str = "auto"

    def __post_init__(self) -> None:
        coerce: dict[str, Callable[[Any], Any]] = {
            "stage": lambda v: None if v is None else Stage(v),
            "mixed_precision": lambda v: None if v is None else Precision(v),
            "backward_prefetch": lambda v: None if v is None else Prefetch(v),
            "wrap": tuple,
            "backend": _parse_backend,
            "bucket_cap_mb": lambda v: None if v is None else float(v),
        }
        for name, fn in coerce.items():
            object.__setattr__(self, name, fn(getattr(self, name)))
        for key, value in (("bucket_cap_mb", self.bucket_cap_mb), ("min_num_params", self.min_num_params)):
            if value is not None:  # built directly, not parsed: the same bounds as the grammar's
                try:
                    TUNABLES[key].parse(_format_value(value))
                except ValueError:
                    raise ShardingOptionsError(f"{key}={_format_value(value)[:_QUOTE_LIMIT]} is out of range: "
                                               f"expected {TUNABLES[key].values}", token=key,
                                               choices=[TUNABLES[key].values]) from None
        if (self.wrap or self.min_num_params is not None) and not self.auto_wrap:
            object.__setattr__(self, "auto_wrap", True)
        for rule in RULES:
            message = rule.broken(self) if rule.broken else None
            if message:
                raise ShardingOptionsConflict(message, rule=rule.id)

    def __bool__(self) -> bool:
        return self.stage is not None

    def __str__(self) -> str:
        words = _canonical_words(self.stage, self.hybrid, self.offload, self.auto_wrap)
        for name in _TUNABLE_FIELDS:
            value = getattr(self, name)
            if value not in (None, (), "auto"):
                words.append(f"{name}={_format_value(value)}")
        return " ".join(words)

    def __repr__(self) -> str:
        return f"ShardingOptions({str(self)!r})"

    @property
    def zero_stage(self) -> int:
        """ZeRO stage number (0 when off or ``no_shard``)."""
        return self.stage.zero_stage if self.stage else 0

    def replace(self, **changes: Any) -> ShardingOptions:
        """A copy with some fields changed, validated again."""
        return replace(self, **changes)

    def to_hf_fsdp(self) -> HfFsdp:
        """The Transformers 4.x ``fsdp`` string and ``fsdp_config`` dict (FSDP1).

        For releases that take ``fsdp="full_shard offload auto_wrap"``; current releases
        deprecate that string form in favour of :meth:`to_hf_fsdp_config`.  Transformers has
        no ZeRO-1 and no ShardedDDP: ``simple`` and ``zero_dp_1`` map to ``shard_grad_op``,
        the nearest mode that shards at least as much (see ``caveats``).
        """
        if self.stage is None:
            return HfFsdp("", {}, self._hf_caveats())
        words = [_HF_STAGE[(self.stage, self.hybrid)]]
        words += [w for w, on in (("offload", self.offload), ("auto_wrap", self.auto_wrap)) if on]
        config: dict[str, Any] = {}
        if self.min_num_params is not None:
            config["min_num_params"] = self.min_num_params
        if self.wrap:
            config["transformer_layer_cls_to_wrap"] = list(self.wrap)
        if self.backward_prefetch is not None:
            config["backward_prefetch"] = _HF_PREFETCH[self.backward_prefetch]
        for name in ("forward_prefetch", "limit_all_gathers", "reshard_after_forward"):
            if getattr(self, name) is not None:
                config[name] = getattr(self, name)
        return HfFsdp(" ".join(words), config, self._hf_caveats())

    def to_hf_fsdp_config(self) -> HfFsdp:
        """``fsdp=True`` and the ``fsdp_config`` dict current Transformers releases prefer.

        Transformers 5 deprecates the ``fsdp`` string ("Use ``fsdp=True`` and configure
        everything via ``fsdp_config``") and defaults to FSDP2, where the stage is the boolean
        ``reshard_after_forward``.  Hybrid and ``no_shard`` exist only in FSDP1, so they get
        ``version: 1``; FSDP1-only tunables are not carried to FSDP2 and are named in ``caveats``.
        Without ``auto_wrap`` the policy is ``NO_WRAP``, because Transformers now wraps every
        ``_no_split_modules`` block unless told otherwise.
        """
        if self.stage is None:
            return HfFsdp(False, {}, self._hf_caveats())
        fsdp1 = self.hybrid or self.stage is Stage.NO_SHARD
        config: dict[str, Any] = {"version": 1 if fsdp1 else 2}
        if fsdp1:
            config["reshard_after_forward"] = _HF_STAGE[(self.stage, self.hybrid)]
        else:
            config["reshard_after_forward"] = self.stage is Stage.ZERO_DP_3
        if self.offload:
            config["cpu_offload"] = True
        if not self.auto_wrap:
            config["auto_wrap_policy"] = "NO_WRAP"
        elif self.min_num_params is not None and not self.wrap:
            config["auto_wrap_policy"] = "SIZE_BASED_WRAP"
            config["min_num_params"] = self.min_num_params
        else:
            config["auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP"
        if self.wrap:
            config["transformer_layer_cls_to_wrap"] = list(self.wrap)
        caveats = list(self._hf_caveats())
        if fsdp1:
            caveats.append(f"'{config['reshard_after_forward']}' exists only in FSDP1, which "
                           "Transformers deprecates (fsdp_config version 1)")
            if self.backward_prefetch is not None:
                config["backward_prefetch"] = _HF_PREFETCH[self.backward_prefetch]
            for name in ("forward_prefetch", "limit_all_gathers"):
                if getattr(self, name) is not None:
                    config[name] = getattr(self, name)
        else:
            dropped = [n for n in ("backward_prefetch", "forward_prefetch", "limit_all_gathers")
                       if getattr(self, n) is not None]
            if dropped:
                caveats.append(f"{', '.join(dropped)}: FSDP1 settings with no FSDP2 fsdp_config key "
                               "(FSDP2 prefetches by itself); not carried over")
        if self.min_num_params is not None and self.wrap:
            caveats.append("min_num_params: ignored next to wrap= (Transformers wraps by class then)")
        return HfFsdp(True, config, tuple(caveats))

    def _hf_caveats(self) -> tuple[str, ...]:
        """What no Transformers FSDP setting carries, whichever form is written."""
        caveats = []
        if self.stage in (Stage.SIMPLE, Stage.ZERO_DP_1):
            caveats.append(f"'{self.stage.value}' shards only optimizer state (ZeRO-1); Transformers' "
                           "nearest FSDP mode, shard_grad_op, shards gradients too (ZeRO-2)")
        if self.mixed_precision is not None:
            caveats.append(f"mixed_precision={self.mixed_precision.value}: pass --{self.mixed_precision.value}"
                           " to TrainingArguments instead" if self.mixed_precision is not Precision.FP32
                           else "mixed_precision=fp32: Transformers' default, nothing to pass")
        if self.bucket_cap_mb is not None:
            caveats.append("bucket_cap_mb: FSDP has no bucket setting; for plain DDP pass "
                           "ddp_bucket_cap_mb to TrainingArguments")
        if self.backend != "auto":
            caveats.append(f"backend={self.backend}: Transformers always uses torch FSDP (through Accelerate)")
        return tuple(caveats)

    def to_deepspeed(self) -> dict[str, Any]:
        """The matching DeepSpeed ``zero_optimization`` dict.

        ``bucket_cap_mb`` becomes ``reduce_bucket_size`` in fp32 elements (DeepSpeed counts
        elements, DDP counts MiB).  Hybrid sharding has no DeepSpeed equivalent that can be
        written without knowing the node size, so it is refused rather than dropped.
        """
        if self.hybrid:
            raise ShardingOptionsError(
                "'hybrid' has no DeepSpeed zero_optimization equivalent without a node size; "
                "set zero_hpz_partition_size by hand",
                token="hybrid",
            )
        config: dict[str, Any] = {"stage": self.zero_stage}
        if self.offload:
            config["offload_optimizer"] = {"device": "cpu"}
            if self.stage is Stage.ZERO_DP_3:
                config["offload_param"] = {"device": "cpu"}
        if self.bucket_cap_mb is not None:
            config["reduce_bucket_size"] = int(self.bucket_cap_mb * 2**20 / 4)
        return config


_HF_STAGE = {
    (Stage.SIMPLE, False): "shard_grad_op",
    (Stage.ZERO_DP_1, False): "shard_grad_op",
    (Stage.ZERO_DP_2, False): "shard_grad_op",
    (Stage.ZERO_DP_3, False): "full_shard",
    (Stage.NO_SHARD, False): "no_shard",
    (Stage.ZERO_DP_2, True): "hybrid_shard_zero2",
    (Stage.ZERO_DP_3, True): "hybrid_shard",
}
_HF_PREFETCH = {Prefetch.PRE: "backward_pre", Prefetch.POST: "backward_post", Prefetch.NONE: "no_prefetch"}


# --------------------------------------------------------------------------- parsing

OptionsInput = Union[ShardingOptions, str, bool, int, Iterable[str], None]

_SEPARATORS = re.compile(r"[\s;]+")
_COMMA_SPACES = re.compile(r"\s*,\s*")


_QUOTE_LIMIT = 60  # characters of an input an error quotes before it shortens it


def _quoted(text: str) -> str:
    """``text`` quoted for an error, shortened when long: a huge input is not echoed back."""
    if len(text) > _QUOTE_LIMIT:
        half = _QUOTE_LIMIT // 2
        text = f"{text[:half]}...{text[-10:]} ({len(text)} characters)"
    return repr(text)


def _in(source: str, word: str) -> str:
    """Where ``word`` was found, for an error that has quoted ``word`` already: ``" in '<source>'"``,
    or nothing when that would quote the same (or a long) input a second time."""
    if source.strip() == word.strip() or len(word) > _QUOTE_LIMIT:
        return ""
    return f" in {_quoted(source)}"


def _closest(word: str, choices: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word[:_QUOTE_LIMIT], list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def _unknown(word: str, source: str, *, choices: Iterable[str], what: str) -> ShardingOptionsError:
    choices = tuple(choices)
    guess = _closest(word, choices)
    hint = f"; did you mean '{guess}'?" if guess else "."
    return ShardingOptionsError(
        f"unknown {what} {_quoted(word)}{_in(source, word)}{hint} Valid: {', '.join(choices)}",
        token=word,
        choices=choices,
        suggestion=guess,
    )


def _word_choices() -> tuple[str, ...]:
    return (*TOKENS, *(f"{k}=" for k in TUNABLES))


def _split(text: str) -> list[str]:
    """Split on spaces, ';' and ',' while keeping ``wrap=A,B`` together."""
    pieces: list[str] = []
    for chunk in _SEPARATORS.split(_COMMA_SPACES.sub(",", text.strip())):
        in_wrap = False
        for part in chunk.split(","):
            if not part:
                continue
            key = _normalise(part.split("=", 1)[0]) if "=" in part else None
            if key is None and in_wrap and _normalise(part) not in TOKENS:
                pieces[-1] += "," + part
                continue
            in_wrap = key == "wrap"
            pieces.append(part)
    return pieces


def _normalise(word: str) -> str:
    return word.strip().lower().replace("-", "_")


def _legacy(value: bool, source: str, stacklevel: int) -> ShardingOptions:
    if not value:
        return ShardingOptions()
    return legacy_simple(f"sharded_ddp={source}", stacklevel)


def legacy_simple(source: str, stacklevel: int = 2) -> ShardingOptions:
    """``simple``, with the ``FutureWarning`` that names the new spelling of ``source``.

    ``stacklevel`` is what ``warnings.warn`` would take if the caller warned itself.
    """
    warnings.warn(
        f"{source} is the legacy boolean form; it means 'simple'. "
        "Write --sharded_ddp simple (or sharded_ddp=\"simple\") instead.",
        FutureWarning,
        stacklevel=stacklevel + 1,
    )
    return ShardingOptions(stage=Stage.SIMPLE)


def parse_options(value: OptionsInput, *, stacklevel: int = 2) -> ShardingOptions:
    """Parse any accepted spelling of sharding options into :class:`ShardingOptions`.

    Accepts a ``ShardingOptions`` (returned as is), ``None``/``""`` (off), the legacy boolean
    (``True``/``"yes"``/... means ``simple`` with a ``FutureWarning``), a string of words
    separated by spaces, ``,`` or ``;``, or a list of such strings.  Raises
    :class:`ShardingOptionsError` naming the bad token, the valid choices and the closest match.
    """
    if isinstance(value, ShardingOptions):
        return value
    if value is None:
        return ShardingOptions()
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return _legacy(bool(value), repr(bool(value)), stacklevel + 1)
    if isinstance(value, str):
        source = value
    elif isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        items = list(value)
        if not all(isinstance(item, str) for item in items):
            raise ShardingOptionsError(
                f"sharding options must be strings, got {items!r}", token=repr(items)
            )
        # Words as a shell splits them (--sharded_ddp zero_dp_3 wrap=A, B) parse as the quoted
        # text would: the same answer for the same input, quoted or not.
        source = " ".join(items)
    else:
        raise ShardingOptionsError(
            f"sharding options must be a string, a list of strings or a bool, got {type(value).__name__}",
            token=repr(value),
        )
    words = _split(source)
    if not words and source.strip():
        _warn(f"sharding options {_quoted(source)} hold no option (only separators): they mean off, plain DDP "
              "(no sharding); leave them out (or pass None) for that", stacklevel + 1)
    if len(words) == 1 and _normalise(words[0]) in _LEGACY_TRUE | _LEGACY_FALSE:
        return _legacy(_normalise(words[0]) in _LEGACY_TRUE, repr(words[0]), stacklevel + 1)
    options, repeated = _from_words(words, source)
    if repeated:
        verb = "repeats" if len(repeated) == 1 else "repeat"
        _warn(f"{', '.join(repr(w) for w in repeated)} {verb} what {_quoted(source)} already says; "
              f"the options are '{options}'", stacklevel + 1)
    return options


def _warn(message: str, stacklevel: int) -> None:
    warnings.warn(message, ShardingOptionsWarning, stacklevel=stacklevel + 1)


def _from_words(words: list[str], source: str) -> tuple[ShardingOptions, list[str]]:
    """The options, and the words that only repeat what an earlier word said."""
    found: dict[str, Any] = {}
    stage_from: str | None = None
    repeated: list[str] = []

    def set_stage(stage: Stage | None, word: str) -> None:
        nonlocal stage_from
        if stage_from is not None and found.get("stage") != stage:
            raise ShardingOptionsConflict(
                f"{_quoted(stage_from)} and {_quoted(word)} choose two different stages{_in(source, word)}; keep one",
                rule="two-stages",
                token=word,
            )
        if stage_from is not None:
            repeated.append(word)
        found["stage"], stage_from = stage, word

    for word in words:
        if "=" in word:
            raw_key, raw_value = word.split("=", 1)
            key = _normalise(raw_key)
            tunable = TUNABLES.get(key)
            if tunable is None:
                raise _unknown(raw_key, source, choices=[f"{k}=" for k in TUNABLES], what="setting")
            try:
                parsed = tunable.parse(raw_value.strip())
            except (ValueError, OverflowError):
                raise ShardingOptionsError(
                    f"bad value {_quoted(raw_value)} for {key}={_in(source, word)}: expected {tunable.values}",
                    token=word,
                    choices=[tunable.values],
                ) from None
            if key == "stage":
                set_stage(parsed, word)
                continue
            if key in found and found[key] != parsed:
                raise ShardingOptionsConflict(
                    f"{key}= is given twice with different values{_in(source, word)}; keep one",
                    rule="repeated-setting",
                    token=word,
                )
            if key in found:
                repeated.append(word)
            found[key] = parsed
            continue
        name = _normalise(word)
        if name in _LEGACY_TRUE | _LEGACY_FALSE:
            raise ShardingOptionsError(
                f"the boolean {_quoted(word)} cannot be combined with other options{_in(source, word)}; "
                "use the list syntax alone, e.g. 'simple' or 'zero_dp_2 offload'",
                token=word,
                choices=TOKENS,
            )
        token = TOKENS.get(name)
        if token is None:
            raise _unknown(word, source, choices=_word_choices(), what="sharding option")
        flags = [flag for flag in ("offload", "auto_wrap", "hybrid") if getattr(token, flag)]
        if token.stage is None and flags and all(found.get(flag) for flag in flags):
            repeated.append(word)
        if token.stage is not None:
            set_stage(token.stage, word)
        for flag in flags:
            found[flag] = True
    if "stage" in found and found["stage"] is None:
        found.pop("stage")  # stage=0: explicitly off
    known = {f.name for f in fields(ShardingOptions)}
    return ShardingOptions(**{k: v for k, v in found.items() if k in known}), repeated
