"""Adversarial checkpoint-anywhere sweep of the other time-based operators: debounce, sample (by a period), take
and skip by a duration, take_until and skip_until a time, delay_subscription, timer-driven flat_map; drawn
scripts (bursts at one instant, long silences), drawn durations and drawn bounded demand. Each run is restarted
at every tick where something happens, then at all of them with differential saves, and must equal the
uninterrupted run, element for element and tick for tick."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive.testing import on_completed, on_error, on_next
from reaqtive.testing.checkpoint import Demand, check_checkpoint_anywhere
from tests.operators._adversarial_support import demands


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


def at(tick: int) -> datetime:
    return datetime.fromtimestamp(tick, UTC)


OPERATORS: dict[str, Callable[[Any, int], Any]] = {
    "debounce": lambda xs, d: xs.debounce(s(d)),
    "sample": lambda xs, d: xs.sample(s(d)),
    "take by duration": lambda xs, d: xs.take(s(d * 5)),
    "skip by duration": lambda xs, d: xs.skip(s(d * 3)),
    "take_until a time": lambda xs, d: xs.take_until(at(200 + d * 5)),
    "skip_until a time": lambda xs, d: xs.skip_until(at(200 + d * 3)),
    "delay_subscription": lambda xs, d: xs.delay_subscription(s(d)),
    "debounce then buffer by time": lambda xs, d: xs.debounce(s(d)).buffer(s(d * 2)),
}
"""(Two time-based operators whose timers come due in the same instant: PAIRS, below.)"""


@st.composite
def inputs(draw: st.DrawFn) -> list[Any]:
    tick, script = 200, []
    for value in range(draw(st.integers(0, 8))):
        tick += draw(st.sampled_from([0, 0, 1, 2, 5, 9, 30, 120]))
        script.append(on_next(max(tick, 201), value))
    end = draw(st.sampled_from(["complete", "error", "none"]))
    tick = max(tick, 201) + draw(st.integers(0, 30))
    if end == "complete":
        script.append(on_completed(tick))
    elif end == "error":
        script.append(on_error(tick, ValueError("boom")))
    return script


DEMANDS = demands(420)
CASES = (st.sampled_from(sorted(OPERATORS)), st.integers(1, 12), inputs(), DEMANDS)


def check(name: str, duration: int, script: list[Any], demand: Demand | None) -> None:
    ticks = {200} | {m.time for m in script} | {t for t, _ in (demand.requests if demand is not None else ())}
    make = OPERATORS[name]
    check_checkpoint_anywhere(lambda xs: make(xs, duration), script, demand=demand, disposed=600,
                              ticks=ticks | {t + 1 for t in ticks}).raise_on_failure()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*CASES)
def test_time_based_operators_recover_anywhere_under_drawn_demand(name: str, duration: int, script: list[Any],
                                                                  demand: Demand | None) -> None:
    check(name, duration, script, demand)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*CASES)
def test_time_based_operators_recover_anywhere_over_many_scripts(name: str, duration: int, script: list[Any],
                                                                 demand: Demand | None) -> None:
    check(name, duration, script, demand)


def test_a_sample_and_a_buffer_due_in_the_same_instant_keep_their_order_after_a_restart() -> None:
    check_checkpoint_anywhere(lambda xs: xs.buffer(s(1), 2).sample(s(2)), [on_next(201, 0), on_completed(203)],
                              disposed=600).raise_on_failure()


PAIRS: dict[str, Callable[[Any], Any]] = {
    "buffer(1 s or 2) then sample(2 s)": lambda xs: xs.buffer(s(1), 2).sample(s(2)),
    "buffer(2 s) then sample(2 s)": lambda xs: xs.buffer(s(2)).map(len).sample(s(2)),
    "window(1 s or 2) counted, then sample(2 s)": lambda xs: xs.window(s(1), 2).flat_map(lambda w: w.count())
    .sample(s(2)),
    "sample(1 s) then buffer(2 s)": lambda xs: xs.sample(s(1)).buffer(s(2)),
    "take(3 s) then sample(1 s)": lambda xs: xs.take(s(3)).sample(s(1)),
    "skip(2 s) then buffer(2 s)": lambda xs: xs.skip(s(2)).buffer(s(2)),
    "interval(1 s) merged with buffer(2 s)": lambda xs: xs.buffer(s(2)).map(len).merge(
        xs.sample(s(1)).map(lambda v: -1)),
}
"""Two timers of one query due in the same instant, armed at different times: a restart between their arming must
put them back in line in the order they first stood (the scheduler orders a recovered timer by when it was
first armed, see reaqtive.scheduler.tasks.ActionTask.armed)."""


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_two_timers_of_one_instant_keep_their_order_after_a_restart(name: str) -> None:
    script = [on_next(201, 0), on_next(202, 1), on_next(203, 2), on_next(205, 3), on_next(206, 4), on_completed(209)]
    check_checkpoint_anywhere(PAIRS[name], script, disposed=600).raise_on_failure()
