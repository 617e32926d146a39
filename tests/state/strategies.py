"""Hypothesis strategies for state values, and a type-exact comparison (``1 == 1.0 == True`` is not enough)."""

from __future__ import annotations

import math
import struct
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

OFFSETS = st.timedeltas(min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59))
TIMEZONES = st.one_of(st.just(UTC), st.builds(timezone, OFFSETS))
DATETIMES = st.one_of(st.datetimes(), st.datetimes(timezones=TIMEZONES))

HASHABLE_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=20), st.binary(max_size=20), st.timedeltas()
)
HASHABLES = st.recursive(
    HASHABLE_SCALARS,
    lambda inner: st.one_of(
        st.tuples(inner, inner), st.lists(inner, max_size=3).map(tuple), st.frozensets(inner, max_size=3)
    ),
    max_leaves=8,
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(),
    st.text(),
    st.binary(),
    DATETIMES,
    st.timedeltas(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=5).map(tuple),
        st.dictionaries(HASHABLES, inner, max_size=5),
        st.sets(HASHABLES, max_size=5),
        st.frozensets(HASHABLES, max_size=5),
    ),
    max_leaves=20,
)


def assert_same(expected: Any, actual: Any, where: str = "value") -> None:
    """Equal, of exactly the same types all the way down (dict order included, set order ignored)."""
    assert type(actual) is type(expected), f"{where}: {type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, float):
        if math.isnan(expected):
            assert math.isnan(actual), where
        else:
            assert struct.pack("<d", actual) == struct.pack("<d", expected), f"{where}: {actual!r} != {expected!r}"
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected), where
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(e, a, f"{where}[{index}]")
    elif isinstance(expected, dict):
        assert len(actual) == len(expected), where
        for index, ((ka, va), (ke, ve)) in enumerate(zip(actual.items(), expected.items(), strict=True)):
            assert_same(ke, ka, f"{where}.key{index}")
            assert_same(ve, va, f"{where}[{ke!r}]")
    elif isinstance(expected, set | frozenset):
        assert actual == expected, where
        by_value = {element: element for element in actual}
        for element in expected:
            assert_same(element, by_value[element], f"{where}{{{element!r}}}")
    elif isinstance(expected, datetime):
        assert actual.replace(tzinfo=None) == expected.replace(tzinfo=None), where
        assert actual.utcoffset() == expected.utcoffset(), where
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
