"""Output values as canonical JSON: the direct writer of rows of scalars gives exactly what ``json.dumps`` gives."""

from __future__ import annotations

import json
from datetime import UTC, timedelta, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from reaqtive.spark.values import _json_default, canonical_json, plain

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text()
    | st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-3, minutes=-30))]))
    | st.datetimes() | st.timedeltas()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)


def reference(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=True)


@given(values)
def test_canonical_json_is_json_dumps_canonical(value: Any) -> None:
    assert canonical_json(value) == reference(value)


def test_a_struct_row_of_plain_values_is_kept_and_numpy_values_become_plain() -> None:
    import numpy as np

    row = {"reading": 1.5, "name": "a"}
    assert plain(row) is row
    converted = plain({"reading": np.float64(1.5), "counts": np.array([1, 2])})
    assert converted == {"reading": 1.5, "counts": [1, 2]} and type(converted["reading"]) is float
