"""The processor's pieces that need no running Spark: rows of pandas frames grouped per key, as the host takes
them."""

from __future__ import annotations

from typing import Any

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from reaqtive.spark.processor import collect_events
from reaqtive.spark.values import canonical_json

rows = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 50), st.integers(0, 10**6),
                          st.floats(allow_nan=False, width=32)), max_size=40)


def frames_of(chunks: list[list[tuple[str, int, int, float]]]) -> list[pd.DataFrame]:
    return [pd.DataFrame({"key": [r[0] for r in chunk], "t": [r[1] for r in chunk], "s": [r[2] for r in chunk],
                          "v": [{"reading": r[3]} for r in chunk]}) for chunk in chunks]


@given(st.lists(rows, min_size=1, max_size=3), st.booleans())
def test_rows_are_grouped_per_key_in_arrival_order(chunks: list[list[Any]], has_sequence: bool) -> None:
    expected: dict[str, list[tuple[int, Any, Any]]] = {}
    for chunk in chunks:
        for key, when, seq, reading in chunk:
            payload = {"reading": reading}
            expected.setdefault(key, []).append((when, seq if has_sequence else canonical_json(payload), payload))
    assert collect_events(iter(frames_of(chunks)), has_sequence) == expected
