"""Adversarial checkpoint-anywhere sweep of the other time-based operators: debounce, sample (by a period), take
and skip by a duration, take_until and skip_until a time, delay_subscription, timer-driven flat_map; drawn
scripts (bursts at one instant, long silences), drawn durations and drawn bounded demand. Each run is restarted
at every tick where something happens, then at all of them with differential saves, and must equal the
uninterrupted run, element for element and tick for tick."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.core.visitors import initialize
from reaqtive.operators.buffer_time import BufferTime, BufferTimeOrCount, BufferTimeShift
from reaqtive.operators.debounce import Debounce
from reaqtive.operators.delay_subscription import DelaySubscription
from reaqtive.operators.group_by import GroupByExpiring
from reaqtive.operators.skip_until import SkipUntilTime
from reaqtive.operators.take import SkipDuration, TakeDuration
from reaqtive.operators.take_until import TakeUntilTime
from reaqtive.operators.timer import PeriodicTimer, SingleTimer
from reaqtive.operators.window_time import WindowTime, WindowTimeOrCount, WindowTimeShift
from reaqtive.state import save_subscription, state_loader
from reaqtive.testing import TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import Demand, check_checkpoint_anywhere
from tests.operators._adversarial_support import demands, scripts
from tests.operators._versions_support import save_as_version


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


inputs = partial(scripts, [0, 0, 1, 2, 5, 9, 30, 120], (0, 30))


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


def script_at(*ticks: int, end: int = 216) -> list[Any]:
    """An element at each tick (0, 1, 2, ...), then the completion at ``end``."""
    return [*(on_next(tick, value) for value, tick in enumerate(ticks)), on_completed(end)]


SCRIPT: Final = (201, 202, 203, 205, 206, 208, 211)

ARMED_ELSEWHERE: dict[str, tuple[Callable[[Any], Any], tuple[int, ...]]] = {
    "debounce(2 s) merged with buffer(10 s every 7 s)": (
        lambda xs: xs.debounce(s(2)).merge(xs.buffer(s(10), s(7)).map(len)), SCRIPT),
    "debounce(3 s) then buffer(5 s every 3 s)": (
        lambda xs: xs.debounce(s(3)).buffer(s(5), s(3)).map(len), (205, 209, 214)),
    "debounce(4 s) then buffer(2 s every 5 s)": (
        lambda xs: xs.debounce(s(4)).buffer(s(2), s(5)).map(len), (201, 206, 209, 210, 214)),
    "debounce(2 s) merged with window(5 s every 3 s) counted": (
        lambda xs: xs.debounce(s(2)).merge(xs.window(s(5), s(3)).flat_map(lambda w: w.count())),
        (201, 202, 204, 205, 206, 212, 213)),
    "buffer(7 s every 5 s) then sample(2 s)": (
        lambda xs: xs.buffer(s(7), s(5)).map(len).sample(s(2)), (201, 207, 209)),
    "buffer(3 s every 6 s) then window(5 s every 3 s) counted": (
        lambda xs: xs.buffer(s(3), s(6)).map(len).window(s(5), s(3)).flat_map(lambda w: w.count()),
        (201, 203, 205, 210, 211, 214)),
    "take_until(215) then buffer(2 s every 5 s)": (
        lambda xs: xs.take_until(at(215)).buffer(s(2), s(5)).map(len), (203, 207, 210)),
    "buffer(3 s) then take_until(209)": (lambda xs: xs.buffer(s(3)).map(len).take_until(at(209)), SCRIPT),
    "buffer(3 s) then skip_until(206)": (lambda xs: xs.buffer(s(3)).map(len).skip_until(at(206)), SCRIPT),
    "buffer(3 s) then delay_subscription(until 206), sampled every 3 s": (
        lambda xs: xs.buffer(s(3)).map(len).delay_subscription(at(206)).sample(s(3)), SCRIPT),
    "buffer(3 s) then delay_subscription(6 s), sampled every 3 s": (
        lambda xs: xs.buffer(s(3)).map(len).delay_subscription(s(6)).sample(s(3)), SCRIPT),
    # (start_with keeps the inner query off the keyed path: the plain group_by stage's expiry timer)
    "buffer(2 s) merged with groups expiring after 3 s, counted": (
        lambda xs: xs.buffer(s(2)).map(lambda b: -len(b) - 1).merge(
            xs.group_by(lambda v: v % 2, expire_after=s(3)).flat_map(lambda g: g.start_with(-9).count())), SCRIPT),
}
"""Two timers of one query due in the same instant, one of them re-armed at recovery by a stage that cannot
derive from its other fields when it was armed: debounce (its timer re-arms when a newer element moved the due
time), buffers and windows with a shift (at the previous open or close, or at the subscription), take_until and
skip_until a time and delay_subscription (at the subscription), group_by's expiry (at a group's element, or when
the previous expiry ran). Each saves when its timer was armed."""


@pytest.mark.parametrize("name", sorted(ARMED_ELSEWHERE))
def test_a_timer_armed_at_a_time_its_state_saves_keeps_its_place_after_restarts(name: str) -> None:
    create, ticks = ARMED_ELSEWHERE[name]
    script = script_at(*ticks)
    twice = [(t, t + 2) for t in range(200, 214)]  # two crashes, a checkpoint in between
    check_checkpoint_anywhere(create, script, disposed=600, runs=twice).raise_on_failure()


SAME_TICK: dict[str, tuple[Callable[[Any], Any], tuple[int, ...]]] = {
    "buffer(1 s) then debounce(1 s)": (lambda xs: xs.buffer(s(1)).debounce(s(1)), SCRIPT),
    "debounce(2 s) then buffer(1 s)": (lambda xs: xs.debounce(s(2)).buffer(s(1)), (201, 202, 203, 205, 206)),
    "buffer(5 s every 8 s) merged with debounce(5 s)": (
        lambda xs: xs.buffer(s(5), s(8)).map(len).merge(xs.debounce(s(5))), (203, 207, 208)),
    "buffer(1 s) then debounce(1 s) then buffer(1 s)": (lambda xs: xs.buffer(s(1)).debounce(s(1)).buffer(s(1)),
                                                       SCRIPT),
    "debounce(1 s) then window(1 s)": (
        lambda xs: xs.debounce(s(1)).window(s(1)).flat_map(lambda w: w.to_list()), SCRIPT),
    "interval(1 s) merged with debounce(1 s)": (
        lambda xs: Query.interval(s(1)).take(14).map(lambda v: -v - 1).merge(xs.debounce(s(1))), SCRIPT),
    "timer(3 s, 1 s) merged with debounce(1 s)": (
        lambda xs: Query.timer(s(3), s(1)).take(12).map(lambda v: -v - 1).merge(xs.debounce(s(1))), SCRIPT),
    "debounce(1 s) merged with timer(3 s, 1 s)": (
        lambda xs: xs.debounce(s(1)).merge(Query.timer(s(3), s(1)).take(12).map(lambda v: -v - 1)), SCRIPT),
    # (start_with keeps the inner query off the keyed path: the plain group_by stage's expiry timer)
    "groups expiring after 2 s, counted, merged with buffer(2 s)": (
        lambda xs: xs.group_by(lambda v: v % 2, expire_after=s(2)).flat_map(lambda g: g.start_with(-9).count())
        .merge(xs.buffer(s(2)).map(lambda b: -len(b) - 1)), SCRIPT),
    # Both armed at the subscription or by timers of one phase: the order stages start in was already theirs.
    "window(2 s) counted, merged with sample(2 s)": (
        lambda xs: xs.window(s(2)).flat_map(lambda w: w.count()).merge(xs.sample(s(2)).map(lambda v: -v - 1)),
        SCRIPT),
    "buffer(6 s) then take_until(206)": (lambda xs: xs.buffer(s(6)).map(len).take_until(at(206)), SCRIPT),
    "take_until(206) then buffer(6 s)": (lambda xs: xs.take_until(at(206)).buffer(s(6)).map(len), SCRIPT),
    "skip_until(204) then buffer(2 s)": (lambda xs: xs.skip_until(at(204)).buffer(s(2)).map(len), SCRIPT),
    "take(6 s) then buffer(2 s)": (lambda xs: xs.take(s(6)).buffer(s(2)).map(len), SCRIPT),
    "delay_subscription(2 s) then buffer(2 s), merged with buffer(4 s)": (
        lambda xs: xs.delay_subscription(s(2)).buffer(s(2)).map(len).merge(xs.buffer(s(4)).map(lambda b: -len(b))),
        SCRIPT),
}
"""Two timers of one query armed in the same instant and due in the same instant (the list closed at 201 arms the
debounce at 201, as the buffer arms its own next close): live they run in the order they were armed in that
instant; a recovered query re-arms them in the order its stages start, which is not always that order. Each stage
saves its timer's number among the timers armed in its tick, as the scheduler told it, and passes it back (see
reaqtive.scheduler.ActionTask.arrival), so a restart at any tick, and twice, gives the uninterrupted output."""


@pytest.mark.parametrize("name", sorted(SAME_TICK))
def test_two_timers_armed_in_one_instant_keep_their_order_after_a_restart(name: str) -> None:
    create, ticks = SAME_TICK[name]
    twice = [(t, t + 1) for t in range(200, 214)] + [(t, t + 3) for t in range(200, 214, 2)]
    check_checkpoint_anywhere(create, script_at(*ticks), disposed=600, ticks=range(200, 218),
                              runs=twice).raise_on_failure()


OLDER_STATES: dict[str, tuple[Callable[[Any], Any], type[Any], tuple[int, ...], int]] = {
    "debounce, version 1": (lambda xs: xs.debounce(s(4)), Debounce, (1,), 3),
    "buffer(6 s every 4 s), version 2": (lambda xs: xs.buffer(s(6), s(4)), BufferTimeShift, (2,), 2),
    "buffer(6 s every 4 s), version 1": (lambda xs: xs.buffer(s(6), s(4)), BufferTimeShift, (1,), 3),
    "window(6 s every 4 s), version 1": (lambda xs: xs.window(s(6), s(4)).map(lambda w: "opened"),
                                         WindowTimeShift, (1,), 2),
    "take_until a time, version 1": (lambda xs: xs.take_until(at(209)), TakeUntilTime, (1,), 2),
    "skip_until a time, version 1": (lambda xs: xs.skip_until(at(209)), SkipUntilTime, (1,), 2),
    "delay_subscription(5 s), version 1": (lambda xs: xs.delay_subscription(s(5)), DelaySubscription, (1,), 2),
    "delay_subscription(until 207), version 1": (lambda xs: xs.delay_subscription(at(207)), DelaySubscription,
                                                 (1,), 2),
    "group_by expiring after 3 s, version 1": (
        lambda xs: xs.group_by(lambda v: v % 2, expire_after=s(3)).map(lambda g: g.key), GroupByExpiring, (1,), 3),
    # (the stages that derive when their timer was armed, and saved no number before)
    "buffer(3 s), version 2": (lambda xs: xs.buffer(s(3)), BufferTime, (2,), 1),
    "buffer(3 s), version 1": (lambda xs: xs.buffer(s(3)), BufferTime, (1,), 2),
    "buffer(3 s or 2), version 2": (lambda xs: xs.buffer(s(3), 2), BufferTimeOrCount, (2,), 1),
    "buffer(3 s or 2), version 1": (lambda xs: xs.buffer(s(3), 2), BufferTimeOrCount, (1,), 3),
    "window(3 s), version 1": (lambda xs: xs.window(s(3)).map(lambda w: "opened"), WindowTime, (1,), 1),
    "window(3 s or 2), version 2": (lambda xs: xs.window(s(3), 2).map(lambda w: "opened"), WindowTimeOrCount,
                                    (2,), 1),
    "take(9 s), version 1": (lambda xs: xs.take(s(9)), TakeDuration, (1,), 1),
    "skip(5 s), version 1": (lambda xs: xs.skip(s(5)), SkipDuration, (1,), 1),
    "interval(3 s) sampling, version 1": (lambda xs: xs.sample(s(3)), PeriodicTimer, (1,), 1),
    "timer(5 s) merged in, version 1": (lambda xs: xs.merge(Query.timer(s(5)).map(lambda v: -1)), SingleTimer,
                                        (1,), 1),
}
"""The stages that now save when their timer was armed and its number (or its number only, where they derive when
it was armed), and the versions before, which did not: the number of fields the current version adds."""


@pytest.mark.parametrize("name", sorted(OLDER_STATES))
@pytest.mark.parametrize("stop", [202, 204, 207])
def test_a_state_saved_before_the_arming_time_was_saved_still_loads(name: str, stop: int) -> None:
    create, stage, version, dropped = OLDER_STATES[name]
    script = script_at(*SCRIPT)
    scheduler = TestScheduler()
    expected = scheduler.start(lambda: create(scheduler.create_hot_observable(*script)), disposed=600).messages

    scheduler = TestScheduler()
    scheduler.advance_to(200)
    observer = scheduler.create_observer()
    handle = initialize(create(scheduler.create_hot_observable(*script)).subscribe(observer),
                        scheduler.create_context())
    scheduler.advance_to(stop)
    blob = save_as_version(stage, version, dropped, handle)
    assert stage.name.encode() in blob  # (the stage is in the tree: its older layout was written)
    handle.dispose()
    later = scheduler.create_hot_observable(*(m for m in script if m.time > stop))
    recovered = scheduler.create_observer()
    handle = initialize(create(later).subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(stop)  # (a timer re-armed at load: not yet due)
    again = save_subscription(handle)  # the current version, written by a stage that loaded the older one
    assert again is not None
    handle.dispose()
    latest = scheduler.create_hot_observable(*(m for m in script if m.time > stop))
    last = scheduler.create_observer()
    initialize(create(latest).subscribe(last), scheduler.create_context(), state_loader(again))
    scheduler.advance_to(600)
    assert [*observer.messages, *recovered.messages, *last.messages] == expected
