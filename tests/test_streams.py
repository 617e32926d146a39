"""The Reactive Streams module: demand arithmetic and the Python mapping of null / illegal arguments."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reaqtive.core.streams import (
    LONG_MAX,
    Publisher,
    Subscriber,
    Subscription,
    add_demand,
    is_unbounded,
    non_positive_request_error,
    require_not_none,
)


def test_long_max_is_the_java_long_maximum() -> None:
    assert LONG_MAX == 2**63 - 1


@given(st.integers(0, LONG_MAX), st.integers(1, 2**70))
def test_add_demand_sums_and_caps_at_long_max(current: int, n: int) -> None:
    total = add_demand(current, n)
    assert total == min(current + n, LONG_MAX)
    assert is_unbounded(total) == (current + n >= LONG_MAX)


def test_demand_summing_past_long_max_is_unbounded_not_an_error() -> None:
    assert add_demand(LONG_MAX - 1, LONG_MAX - 1) == LONG_MAX
    assert add_demand(LONG_MAX, 1) == LONG_MAX


def test_rule_3_9_error_is_a_value_error_naming_the_rule() -> None:
    error = non_positive_request_error(-3)
    assert isinstance(error, ValueError)
    assert "3.9" in str(error) and "-3" in str(error)


def test_require_not_none_raises_type_error_naming_argument_and_rule() -> None:
    assert require_not_none(5, "x", "2.13") == 5
    with pytest.raises(TypeError, match=r"rule 1\.9: subscriber must not be None"):
        require_not_none(None, "subscriber", "1.9")


def test_protocols_are_structural() -> None:
    class Sub:
        def on_subscribe(self, s: Subscription) -> None: ...
        def on_next(self, v: int) -> None: ...
        def on_error(self, e: BaseException) -> None: ...
        def on_complete(self) -> None: ...

    class Pub:
        def subscribe(self, s: Subscriber[int]) -> None: ...

    assert isinstance(Sub(), Subscriber)
    assert isinstance(Pub(), Publisher)
    assert not isinstance(object(), Subscription)
