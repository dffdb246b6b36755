"""Any text given to ``parse_options`` round-trips through ``str()`` or raises
``ShardingOptionsError``: never another exception (10,000 examples)."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcompat import ShardingOptionsError, parse_options
from shardcompat.options import TOKENS, TUNABLES

pytestmark = pytest.mark.reliability

_WORDS = sorted(TOKENS) + [f"{name}=" for name in TUNABLES] + ["True", "False", "none", "backend=torch"]
_VALUES = st.one_of(
    st.integers(-5, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["bf16", "fp16", "fp32", "pre", "post", "none", "Block,Linear", "torch-fsdp2", ""]),
    st.text(max_size=6),
)
_TOKEN = st.one_of(
    st.sampled_from(_WORDS),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(sorted(TUNABLES)), _VALUES),
    st.text(max_size=8),
)
_SEPARATORS = st.sampled_from([" ", ",", ", ", "  ", "\t", ";", "\n"])
_TEXT = st.one_of(
    st.builds(lambda parts, sep: sep.join(parts), st.lists(_TOKEN, max_size=6), _SEPARATORS),
    st.text(max_size=40),
)


def _check(value: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy spellings warn; that is tested elsewhere
        try:
            options = parse_options(value)  # type: ignore[arg-type]
        except ShardingOptionsError:
            return
        canonical = str(options)
        again = parse_options(canonical)
    assert again == options, f"{value!r} -> {canonical!r} -> {again!r}"
    assert str(again) == canonical, f"canonical form is not stable: {canonical!r} -> {again}"


@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(_TEXT)
def test_any_text_round_trips_or_raises_options_error(text: str) -> None:
    _check(text)


@settings(max_examples=2_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.one_of(st.lists(_TOKEN, max_size=5), st.booleans(), st.none()))
def test_lists_and_booleans_round_trip_or_raise(value: object) -> None:
    _check(value)
