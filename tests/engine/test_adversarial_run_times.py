"""The store's read path: a run's times kept as the row's differences (``RunTimes``, ``unpack_run_times``) read as
the plain list of times would be, whatever is asked and in whatever order: an index after another (the running sum
carried on), before it (added up again), negative, past the end, a slice, iteration, the run without its first
events (``after``) asked before or after its parent was summed; rows with times out of order (a late event: the
slow path) and runs that start inside a row."""

from __future__ import annotations

from itertools import accumulate, pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive.engine.database import RunTimes, pack_times, unpack_run_times

_ASK = st.one_of(
    st.tuples(st.just("index"), st.integers(-12, 12)),
    st.tuples(st.just("slice"), st.integers(-12, 12), st.integers(-12, 12)),
    st.tuples(st.just("after"), st.integers(0, 12)),
    st.tuples(st.just("list")),
    st.tuples(st.just("len")),
)


def ask(times: RunTimes, expected: list[int], question: tuple[Any, ...]) -> tuple[RunTimes, list[int]]:
    """Ask ``times`` and the plain list the same; returns what to go on asking (``after`` moves on)."""
    kind = question[0]
    if kind == "index":
        index = question[1]
        if -len(expected) <= index < len(expected):
            assert times[index] == expected[index]
        else:
            with pytest.raises(IndexError):
                times[index]
    elif kind == "slice":
        assert times[question[1]:question[2]] == expected[question[1]:question[2]]
    elif kind == "after":
        taken = min(question[1], len(expected))
        return times.after(taken), expected[taken:]
    elif kind == "list":
        assert list(times) == expected and times.as_list() == expected and times == expected
    else:
        assert len(times) == len(expected)
    return times, expected


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**52), st.lists(st.integers(-5, 10**7), min_size=0, max_size=10), st.integers(0, 11),
       st.lists(_ASK, max_size=12))
def test_run_times_read_as_the_list_of_times(first: int, gaps: list[int], offset: int,
                                             questions: list[tuple[Any, ...]]) -> None:
    micros = list(accumulate([first, *gaps]))
    offset = min(offset, len(micros) - 1)
    times, ordered = unpack_run_times(pack_times(micros), len(micros), offset)
    assert ordered == all(b >= a for a, b in pairwise(micros))
    expected = micros[offset:]
    for question in questions:
        times, expected = ask(times, expected, question)
    assert list(times) == expected
