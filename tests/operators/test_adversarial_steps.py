"""Adversarial checkpoint-anywhere tests of the step-derived operators (``step_operator``: min/max, sum, average,
aggregate with and without a seed, distinct with and without a comparer, skip_while_indexed) where they are
hardest to keep right: inside windows by time (a unit per window), after a fused ``map -> filter`` run, under drawn
bounded demand, with user functions that raise on drawn elements under a policy that skips, and with the keyed
path on and off. Each run is restarted at every tick where something happens, then at all of them with
differential saves, and must equal the uninterrupted run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import keyed_execution
from reaqtive.testing import Demand, RecordingPolicy, on_completed, on_next
from reaqtive.testing.checkpoint import check_checkpoint_anywhere
from tests.operators._adversarial_support import demands, restarts

BAD = 3
"""The element every user function raises on."""


def checked(x: int) -> int:
    if x == BAD:
        raise ValueError(f"bad element {x}")
    return x


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


def add(acc: int, x: int) -> int:
    return acc + checked(x)


def same_parity(x: int, y: int) -> bool:
    return checked(x) % 2 == checked(y) % 2


def below(x: int, i: int) -> bool:
    return checked(x) + i < 6


STEPS: dict[str, Callable[[Any], Any]] = {
    "min": lambda w: w.min(lambda x: -checked(x)),
    "max": lambda w: w.max(checked),
    "sum": lambda w: w.map(checked).sum(),
    "average": lambda w: w.map(checked).average(),
    "aggregate": lambda w: w.aggregate(add),
    "aggregate-seed": lambda w: w.aggregate(add, 100),
    "distinct": lambda w: w.distinct(lambda x: checked(x) % 3).to_list(),
    "distinct-comparer": lambda w: w.distinct(None, same_parity).to_list(),
    "skip-while-indexed": lambda w: w.skip_while_indexed(below).to_list(),
}
"""Per window: one step operator whose function raises on :data:`BAD` (min and max raise on an empty window:
the first test's windows are by count)."""

STANDING: dict[str, Callable[[Any], Any]] = {
    "distinct": lambda xs: xs.distinct(lambda x: checked(x) % 4),
    "distinct-comparer": lambda xs: xs.distinct(None, same_parity),
    "skip-while-indexed": lambda xs: xs.skip_while_indexed(below),
    "fused-distinct": lambda xs: xs.map(checked).filter(lambda x: x != 5).distinct(),
    "scan-aggregate": lambda xs: xs.scan(0, add).distinct_until_changed(),
}
"""Step operators that emit as elements come (no completion needed)."""


@st.composite
def inputs(draw: st.DrawFn) -> list[Any]:
    tick, script = 200, []
    for _ in range(draw(st.integers(1, 8))):
        tick += draw(st.sampled_from([0, 1, 2, 5, 12, 40]))
        script.append(on_next(max(tick, 201), draw(st.integers(0, 7))))
    if draw(st.booleans()):
        script.append(on_completed(max(tick, 201) + draw(st.integers(1, 20))))
    return script


DEMANDS = demands(330)
SKIP = RecordingPolicy(skip=True).settings


def check(create: Callable[[Any], Any], script: list[Any], demand: Demand | None, keyed: bool) -> None:
    with keyed_execution(keyed):
        check_checkpoint_anywhere(create, script, demand=demand, settings=SKIP, disposed=400,
                                  ticks=restarts(script, demand)).raise_on_failure()


WINDOWED = (st.tuples(st.sampled_from(sorted(STEPS)), st.integers(1, 3), st.integers(1, 15)), inputs(), DEMANDS,
            st.booleans())
"""(the step, the windows' count and duration), the input, the demand, keyed or not."""


def windowed(shape: tuple[str, int, int], script: list[Any], demand: Demand | None, keyed: bool) -> None:
    name, count, duration = shape
    step = STEPS[name]
    if name in ("min", "max"):
        check(lambda xs: xs.window(count).flat_map(step), script, demand, keyed)
    else:
        check(lambda xs: xs.window(s(duration), count).flat_map(step, max_concurrent=1), script, demand, keyed)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*WINDOWED)
def test_step_operators_in_windows_recover_anywhere_while_skipping(
        shape: tuple[str, int, int], script: list[Any], demand: Demand | None, keyed: bool) -> None:
    windowed(shape, script, demand, keyed)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*WINDOWED)
def test_step_operators_in_windows_recover_anywhere_while_skipping_many(
        shape: tuple[str, int, int], script: list[Any], demand: Demand | None, keyed: bool) -> None:
    windowed(shape, script, demand, keyed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(STANDING)), inputs(), DEMANDS, st.booleans())
def test_standing_step_operators_recover_anywhere_while_skipping(
        name: str, script: list[Any], demand: Demand | None, keyed: bool) -> None:
    check(STANDING[name], script, demand, keyed)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(STANDING)), inputs(), st.booleans())
def test_standing_step_operators_grouped_recover_anywhere_while_skipping(
        name: str, script: list[Any], keyed: bool) -> None:
    """The same operators per group (the keyed path runs their steps in a table)."""
    step = STANDING[name]
    check(lambda xs: xs.group_by(lambda x: x % 2).flat_map(step), script, None, keyed)


def test_the_scripts_reach_the_bad_element() -> None:
    """Not vacuous: a skipped element leaves the sum as if it had not come."""
    report = check_checkpoint_anywhere(lambda xs: xs.window(2).flat_map(STEPS["sum"]),
                                       [on_next(210, 1), on_next(220, BAD), on_next(230, 2), on_completed(240)],
                                       settings=SKIP, disposed=400)
    report.raise_on_failure()
    assert [m.value for m in report.expected] == [on_next(0, 1).value, on_next(0, 2).value, on_completed(0).value]
    assert len(report.outcomes) > 1
