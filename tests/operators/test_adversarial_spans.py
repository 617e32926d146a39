"""Adversarial checkpoint-anywhere tests of buffer and window by time (they share ``reaqtive/operators/_spans.py``):
drawn durations, shifts smaller and larger than the duration, counts, scripts with bursts at one instant and long
silences (the virtual clock jumping over many spans), completion or an error, and drawn bounded demand. Every
run is checked by :func:`check_checkpoint_anywhere`: a restart at every tick where something happens, then one
run restarted at all of them with differential saves (state that survives one restart but not two), against the
uninterrupted run, element for element and tick for tick."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive.testing.checkpoint import Demand, check_checkpoint_anywhere
from tests.operators._adversarial_support import demands, restarts, scripts


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


# (elements at increasing ticks, several at one tick, gaps up to 150 ticks: many spans of a short duration)
inputs = partial(scripts, [0, 0, 1, 3, 7, 10, 25, 150], (1, 40))


DEMANDS = demands(420)


@st.composite
def spans(draw: st.DrawFn) -> tuple[str, Callable[[Any], Any]]:
    """One of: by duration; by duration and a shift smaller, equal or larger; by duration or count."""
    duration = draw(st.integers(1, 40))
    form = draw(st.sampled_from(["duration", "shift", "count"]))
    if form == "duration":
        return f"({duration})", lambda xs, op: getattr(xs, op)(s(duration))
    if form == "shift":
        shift = draw(st.integers(1, 50))
        return f"({duration}, shift {shift})", lambda xs, op: getattr(xs, op)(s(duration), s(shift))
    count = draw(st.integers(1, 4))
    return f"({duration} or {count})", lambda xs, op: getattr(xs, op)(s(duration), count)


def check(create: Callable[[Any], Any], script: list[Any], demand: Demand | None) -> None:
    check_checkpoint_anywhere(create, script, demand=demand, disposed=600,
                              ticks=restarts(script, demand)).raise_on_failure()


def buffers(span: Any, script: list[Any], demand: Demand | None) -> None:
    _, make = span
    check(lambda xs: make(xs, "buffer"), script, demand)


def windows(span: Any, script: list[Any], demand: Demand | None, concurrent: int | None) -> None:
    _, make = span
    check(lambda xs: make(xs, "window").flat_map(lambda w: w.to_list(), max_concurrent=concurrent), script, demand)


BUFFERS = (spans(), inputs(), DEMANDS)
WINDOWS = (spans(), inputs(), DEMANDS, st.sampled_from([None, 1, 2]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*BUFFERS)
def test_time_buffers_recover_anywhere_under_drawn_demand(span: Any, script: list[Any], demand: Demand | None) -> None:
    buffers(span, script, demand)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*WINDOWS)
def test_time_windows_recover_anywhere_under_drawn_demand(span: Any, script: list[Any], demand: Demand | None,
                                                          concurrent: int | None) -> None:
    windows(span, script, demand, concurrent)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*BUFFERS)
def test_time_buffers_recover_anywhere_over_many_scripts(span: Any, script: list[Any], demand: Demand | None) -> None:
    buffers(span, script, demand)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*WINDOWS)
def test_time_windows_recover_anywhere_over_many_scripts(span: Any, script: list[Any], demand: Demand | None,
                                                         concurrent: int | None) -> None:
    windows(span, script, demand, concurrent)
