"""Windows inside groups run keyed (issue 32): ``group_by(k).flat_map(lambda g: g.window(...).flat_map(...))``.

The differential, bounded-demand, checkpoint-anywhere and skip-policy properties run these forms among the others
(``_keyed_cases_windows.py`` in ``test_keyed_groups.py`` and ``test_error_policy.py``). Here: the Rx form of a
per-key window average as users write it, what keeps the general path and why, a recovery after downtime (the
timer catches up every window it missed), a time at which more keys are due than one slice ticks, forged
records, and the keyed forms a query is bound with.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reaqtive import OperatorContext, Query, SimpleSubject, initialize, keyed_execution
from reaqtive.core.streams import LONG_MAX
from reaqtive.operators.keyed_groups import KeyedGroupProbe, KeyedGroups, keyed_chain
from reaqtive.operators.keyed_steps import FORM_BEFORE_WINDOWS, KEYED_FORM, in_keyed_form, keyed_form
from reaqtive.operators.keyed_timed import TICK_SLICE, KeyedGroupsTimed
from reaqtive.state import CheckpointMode, load_subscription, save_subscription
from reaqtive.testing import TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

SECOND = timedelta(seconds=1)  # a tick of the test scheduler


def tally(acc: tuple[int, int], x: int) -> tuple[int, int]:
    return acc[0] + 1, acc[1] + x


def rx_averages(xs: Query[int], window: timedelta = 10 * SECOND) -> Query[Any]:
    """The Rx form: per key, each window's average; windows open with the group (its first element), empty ones
    are dropped (an empty window's tally is (0, 0))."""
    return xs.group_by(lambda x: x % 3).flat_map(
        lambda g: g.window(window)
        .flat_map(lambda w: w.aggregate(tally, (0, 0)))
        .filter(lambda t: t[0] > 0)
        .map(lambda t: (g.key, t[1] / t[0]))
    )


SCRIPT = [on_next(201 + 2 * i, x) for i, x in enumerate([3, 4, 7, 1, 9, 0, 5, 2, 6, 8, 4, 10, 11, 16])]


def messages(create: Any, script: list[Any], *, keyed: bool) -> list[Any]:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*script)
    with keyed_execution(keyed):
        return list(scheduler.start(lambda: create(xs)).messages)


def bound(query: Query[Any]) -> object:
    handle = query.subscribe(Recorder(initial=LONG_MAX))
    return handle


def test_the_rx_form_of_a_per_key_window_average_runs_keyed_with_the_general_paths_messages() -> None:
    script = [*SCRIPT, on_next(260, 14), on_completed(300)]  # a gap: idle keys close empty windows
    assert isinstance(bound(rx_averages(Query.from_iterable([1]))), KeyedGroupsTimed)
    keyed = messages(rx_averages, script, keyed=True)
    assert keyed == messages(rx_averages, script, keyed=False)
    # key 0's first window: from its first element (201) to 211, with the element at 211 (sources run before
    # timers at equal times): 3, 9 and 0
    assert keyed[0] == on_next(211, (0, 4.0))
    assert len(keyed) == 9


def test_an_empty_windows_average_fails_the_query_as_on_the_general_path() -> None:
    def plain_average(xs: Query[int]) -> Query[Any]:
        return xs.group_by(lambda x: x % 2).flat_map(lambda g: g.window(5 * SECOND).flat_map(lambda w: w.average()))

    script = [on_next(201, 1), on_next(202, 2), on_next(203, 3), on_completed(230)]
    keyed = messages(plain_average, script, keyed=True)
    assert keyed == messages(plain_average, script, keyed=False)
    assert keyed[-1].value.kind.name == "ON_ERROR"  # key 1's second window (206-211) had no element


def test_the_rx_form_survives_a_checkpoint_anywhere_and_two_restarts() -> None:
    script = [*SCRIPT, on_next(262, 14), on_completed(290)]
    with keyed_execution(True):
        assert_checkpoint_anywhere(rx_averages, script, runs=[[215, 240], [205, 233, 271]])


# -- what keeps the general path ------------------------------------------------------------------------------------


def groups() -> Query[int]:
    return Query.from_iterable(range(6)).group_by(lambda x: x % 2)


def other() -> Query[int]:
    return Query.from_iterable([9])


GENERAL: dict[str, Any] = {
    "window(duration, shift)": lambda: groups().flat_map(
        lambda g: g.window(2 * SECOND, SECOND).flat_map(lambda w: w.count())
    ),
    "window(duration, count)": lambda: groups().flat_map(
        lambda g: g.window(2 * SECOND, 3).flat_map(lambda w: w.count())
    ),
    "two time windows": lambda: groups().flat_map(
        lambda g: g.window(2 * SECOND).flat_map(lambda w: w.count()).window(4 * SECOND).flat_map(lambda w: w.sum())
    ),
    "a time window inside a window": lambda: groups().flat_map(
        lambda g: g.window(4).flat_map(lambda w: w.window(SECOND).flat_map(lambda v: v.count()))
    ),
    "expire_after with a time window": lambda: Query.from_iterable(range(6))
    .group_by(lambda x: x % 2, expire_after=5 * SECOND)
    .flat_map(lambda g: g.window(2 * SECOND).flat_map(lambda w: w.count())),
    "a window's result selector": lambda: groups().flat_map(
        lambda g: g.window(2).flat_map(lambda w: w.count(), lambda w, n: n)
    ),
    "a window's inner query reads another stream": lambda: groups().flat_map(
        lambda g: g.window(2).flat_map(lambda w: w.merge(other()))
    ),
    "a window's inner query that is not a chain": lambda: groups().flat_map(
        lambda g: g.window(2).flat_map(lambda w: other())
    ),
    "a window selector that reads the key while selecting": lambda: groups().flat_map(
        lambda g: g.window(2).flat_map(lambda w: w.take(1) if g.key else w)  # type: ignore[attr-defined]
    ),
    "a window selector that fails": lambda: groups().flat_map(lambda g: g.window(2).flat_map(lambda w: 1 // 0)),
    "windows merged without flat_map": lambda: groups().flat_map(lambda g: g.window(2).merge_all()),
}


@pytest.mark.parametrize("label", sorted(GENERAL))
def test_what_keeps_the_general_path(label: str) -> None:
    assert not isinstance(bound(GENERAL[label]()), KeyedGroups)


def test_windows_keep_the_general_path_for_a_query_bound_in_the_form_before_them() -> None:
    """A subscription recorded before windows ran keyed (keyed form 2) is recovered in that form: its window chain
    binds on the general path, where its stored state is, and the reason says so."""
    from reaqtive.operators.keyed_groups import plan_keyed_groups

    query = rx_averages(Query.from_iterable([1]))
    with in_keyed_form(FORM_BEFORE_WINDOWS):
        assert keyed_form() == FORM_BEFORE_WINDOWS
        assert not isinstance(bound(query), KeyedGroups)
        assert isinstance(bound(groups().flat_map(lambda g: g.count())), KeyedGroups)  # the earlier forms still
        group_by = query.args[0]
        reason = plan_keyed_groups(group_by, query.args[1], None, None)
        assert isinstance(reason, str) and "before it ran keyed" in reason
    with keyed_execution(True):
        assert keyed_form() == KEYED_FORM
        assert isinstance(bound(query), KeyedGroupsTimed)


def test_the_chain_names_the_window_and_its_inner_query() -> None:
    def inner(g: Any) -> Any:
        return g.window(10 * SECOND).flat_map(lambda w: w.aggregate(tally, (0, 0))).filter(bool)

    chain = keyed_chain(inner, KeyedGroupProbe.new())
    assert chain is not None
    assert chain[1] == ("window_time.flat_map[aggregate]", "filter")


# -- a restart after downtime, many keys due at once, forged records -------------------------------------------------


def counts(xs: Query[tuple[int, int]]) -> Query[Any]:
    return xs.group_by(lambda e: e[0]).flat_map(
        lambda g: g.window(10 * SECOND).flat_map(lambda w: w.count()).map(lambda n: (g.key, n))
    )


def start(scheduler: TestScheduler, blob: bytes | None = None) -> tuple[SimpleSubject[Any], Recorder, Any]:
    source: SimpleSubject[tuple[int, int]] = SimpleSubject()
    recorder = Recorder(initial=LONG_MAX)
    handle = counts(source.as_query()).subscribe(recorder)
    load = None if blob is None else (lambda h: load_subscription(h, blob))
    initialize(handle, OperatorContext("sub://windows", scheduler), load)
    return source, recorder, handle


def test_a_restart_after_downtime_closes_every_window_missed_in_order() -> None:
    scheduler = TestScheduler()
    source, recorder, handle = start(scheduler)
    scheduler.advance_to(100)
    source.on_next((1, 0))  # key 1: windows end at 110, 120, ...
    scheduler.advance_to(105)
    source.on_next((2, 0))  # key 2: windows end at 115, 125, ...
    source.on_next((2, 0))
    scheduler.advance_to(112)
    assert recorder.values == [(1, 1)]
    blob = save_subscription(handle, CheckpointMode.FULL)
    handle.dispose()

    later = TestScheduler()
    later.advance_to(141)  # down from 112 to 141: key 2's 115, 125, 135 and key 1's 120, 130, 140 were missed
    _, recorder, _ = start(later, blob)
    later.advance_to(142)
    # Each key catches up every window it missed at once (as a window stage's late timer does), keys in the order
    # of their first missed end.
    assert recorder.values == [(2, 2), (2, 0), (2, 0), (1, 0), (1, 0), (1, 0)]
    later.advance_to(146)
    assert recorder.values[6:] == [(2, 0)]  # key 2's window ending at 145: the clock is back on time


def test_more_keys_due_at_once_than_a_slice_give_way_between_slices_and_lose_nothing() -> None:
    scheduler = TestScheduler()
    source, recorder, handle = start(scheduler)
    assert isinstance(handle, KeyedGroupsTimed)
    keys = 2 * TICK_SLICE + 10
    scheduler.advance_to(100)
    for key in range(keys):
        source.on_next((key, key))  # every key's first window ends at 110
    scheduler.yield_source = lambda: True  # the host asks every yieldable task to give way
    slices = 0
    while not scheduler.advance_to(110, yielding=True):
        slices += 1
        assert len(recorder.values) == slices * TICK_SLICE  # a slice's results went out before it gave way
        assert handle._table.get(keys - 1)[0][0] == 110_000_000  # type: ignore[index]  # the rest wait, as they were
    assert slices == 2
    assert recorder.values == [(key, 1) for key in range(keys)]  # every key, once, in order


def test_a_forged_window_record_is_refused_naming_the_key() -> None:
    from reaqtive.state import StateFormatError

    scheduler = TestScheduler()
    source, _, handle = start(scheduler)
    source.on_next((1, 0))
    assert isinstance(handle, KeyedGroupsTimed)
    field = handle._table.get(1)
    assert field is not None
    handle._table.put(1, ((field[0][0], -1, 0), None))  # a negative sequence number
    with pytest.raises(StateFormatError, match=r"key 1.*keyed_page"):
        handle._check_records("here")


def test_a_stored_window_end_outside_the_checkpoints_clock_bounds_is_refused_naming_the_key() -> None:
    from reaqtive.state import StateFormatError
    from reaqtive.state.fields import SAVED_BY

    scheduler = TestScheduler()
    source, _, handle = start(scheduler)
    scheduler.advance_to(100)
    source.on_next((1, 0))  # its window ends at 110
    blob = save_subscription(handle, CheckpointMode.FULL)

    saved_by = scheduler.now - 60 * SECOND  # a checkpoint that says it was taken a minute before that end was set
    handle = counts(SimpleSubject[tuple[int, int]]().as_query()).subscribe(Recorder(initial=LONG_MAX))
    context = OperatorContext("sub://windows", TestScheduler(), settings={SAVED_BY: saved_by})
    with pytest.raises(StateFormatError, match=r"key 1.*checkpoint's bounds"):
        initialize(handle, context, lambda h: load_subscription(h, blob))


@pytest.mark.parametrize("gives_way", [False, True], ids=["at once", "giving way"])
def test_an_element_or_the_end_while_a_timer_gives_way_comes_after_the_keys_it_left_due(gives_way: bool) -> None:
    """The keys a timer left due when it gave way tick before an element or the source's completion that the host
    delivers meanwhile (their timer came first): the outputs are those of a timer that ticked them all at once."""
    scheduler = TestScheduler()
    source, recorder, _ = start(scheduler)
    keys = TICK_SLICE + 10
    scheduler.advance_to(100)
    for key in range(keys):
        source.on_next((key, key))
    if gives_way:
        scheduler.yield_source = lambda: True
        assert not scheduler.advance_to(110, yielding=True)  # one slice ticked, the rest wait
        assert len(recorder.values) == TICK_SLICE
    else:
        scheduler.advance_to(110)
    source.on_next((keys - 1, 0))  # the last key: its first window closed at 110, this is in its second
    source.on_complete()
    assert recorder.values[:keys] == [(key, 1) for key in range(keys)]
    assert recorder.values[keys:] == [(key, 1 if key == keys - 1 else 0) for key in range(keys)]


# -- idle keys: an empty window that puts nothing out only moves the key's time ---------------------------------------


def averages_of(create: Any) -> Any:
    """``create(g)`` per key of ``x % 3`` (a window chain), bound over a source."""
    return lambda xs: xs.group_by(lambda x: x % 3).flat_map(create)


def dropped_tallies(g: Any) -> Query[Any]:
    return g.window(10 * SECOND).flat_map(lambda w: w.aggregate(tally, (0, 0))).filter(lambda t: t[0] > 0)


QUIET: dict[str, tuple[Any, bool]] = {
    "tally dropped by a filter": (dropped_tallies, True),
    "tally mapped, then dropped": (
        lambda g: g.window(10 * SECOND).flat_map(lambda w: w.aggregate(tally, (0, 0))).map(list).filter(any),
        True,
    ),
    "an inner query that puts nothing out when empty": (
        lambda g: g.window(10 * SECOND).flat_map(lambda w: w.map(lambda x: x * 2)),
        True,
    ),
    "count (an empty window's count is 0)": (lambda g: g.window(10 * SECOND).flat_map(lambda w: w.count()), False),
    "a filter that reads the key": (
        lambda g: g.window(10 * SECOND)
        .flat_map(lambda w: w.aggregate(tally, (0, 0)))
        .filter(lambda t: t[0] > 0 or g.key == 1),
        False,
    ),
    "a scan sees the empty tally first": (
        lambda g: g.window(10 * SECOND)
        .flat_map(lambda w: w.aggregate(tally, (0, 0)))
        .scan((0, 0), lambda a, t: (a[0] + 1, t[0]))  # (windows closed, the last one's count)
        .filter(lambda a: a[0] % 4 == 0),
        False,
    ),
    "an average (an empty window's fails)": (lambda g: g.window(10 * SECOND).flat_map(lambda w: w.average()), False),
}

IDLE_SCRIPT = [
    on_next(201, 3),
    on_next(203, 4),
    on_next(204, 6),  # keys 0 and 1, then idle for many periods
    on_next(287, 9),  # key 0 again, after 8 empty windows
    on_next(291, 5),  # key 2's first element
    on_next(333, 1),  # key 1 again
    on_completed(370),
]


@pytest.mark.parametrize("label", sorted(QUIET))
def test_idle_keys_over_many_periods_then_an_event_give_the_general_paths_messages(label: str) -> None:
    create, quiet = QUIET[label]
    keyed = messages(averages_of(create), IDLE_SCRIPT, keyed=True)
    assert keyed == messages(averages_of(create), IDLE_SCRIPT, keyed=False)
    assert len(keyed) >= 2
    handle = bound(averages_of(create)(Query.from_iterable([1, 2])))  # (ticks nothing: asks directly)
    assert isinstance(handle, KeyedGroupsTimed)
    assert handle._quiet_ticks() is quiet


def test_an_idle_keys_empty_windows_run_no_user_code_after_the_first() -> None:
    calls: list[object] = []

    def non_empty(t: tuple[int, int]) -> bool:
        calls.append(t)
        return t[0] > 0

    def create(g: Any) -> Query[Any]:
        return g.window(10 * SECOND).flat_map(lambda w: w.aggregate(tally, (0, 0))).filter(non_empty)

    keyed = messages(averages_of(create), IDLE_SCRIPT, keyed=True)
    keyed_calls, calls[:] = list(calls), []
    assert keyed == messages(averages_of(create), IDLE_SCRIPT, keyed=False)
    assert [t for t in keyed_calls if t != (0, 0)] == [t for t in calls if t != (0, 0)]
    assert calls.count((0, 0)) > 10  # the general path asks the filter about every empty window
    # keyed: once to learn that an empty window's tally is dropped, then only for the windows the completion closes
    assert keyed_calls.count((0, 0)) == 1 + 3


def saved_after(create: Any, quiet: bool, until: int) -> bytes:
    """The subscription's state after IDLE_SCRIPT's elements up to ``until``, the idle keys' windows closed quietly
    or by the full tick."""
    scheduler = TestScheduler()
    source: SimpleSubject[int] = SimpleSubject()
    with keyed_execution(True):
        handle = averages_of(create)(source.as_query()).subscribe(Recorder(initial=LONG_MAX))
    initialize(handle, OperatorContext("sub://idle", scheduler))
    assert isinstance(handle, KeyedGroupsTimed)
    handle._quiet = quiet
    for recorded in IDLE_SCRIPT:
        if recorded.time > until or recorded.value.kind.name != "ON_NEXT":
            break
        scheduler.advance_to(recorded.time)
        source.on_next(recorded.value.value)
    scheduler.advance_to(until)
    return save_subscription(handle, CheckpointMode.FULL)


@pytest.mark.parametrize("until", [250, 290, 340])
def test_an_idle_keys_quiet_ticks_save_the_records_a_full_tick_saves(until: int) -> None:
    """A store written while idle keys' windows closed by the full tick (the release before quiet ticks) holds
    what quiet ticks save: the same bytes, so it loads and goes on as it would have."""
    assert saved_after(dropped_tallies, True, until) == saved_after(dropped_tallies, False, until)


def test_idle_keys_survive_a_checkpoint_anywhere_and_two_restarts() -> None:
    with keyed_execution(True):
        assert_checkpoint_anywhere(
            averages_of(dropped_tallies), IDLE_SCRIPT, runs=[[230, 289], [250, 300, 335]], disposed=400
        )


def test_one_timer_task_moves_from_window_end_to_window_end() -> None:
    scheduler = TestScheduler()
    source, recorder, handle = start(scheduler)
    assert isinstance(handle, KeyedGroupsTimed)
    scheduler.advance_to(100)
    source.on_next((1, 0))  # windows end at 110, 120, ...
    scheduler.advance_to(103)
    source.on_next((2, 0))  # 113, 123, ...
    timer = handle._timer
    for end in (110, 113, 120, 123, 130):
        scheduler.advance_to(end)
        assert handle._timer is timer  # the same task, moved to the next end
        assert scheduler.queue_length == 1
    assert recorder.values == [(1, 1), (2, 1), (1, 0), (2, 0), (1, 0)]
