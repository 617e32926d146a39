"""Restart order of the keyed stages' shared timers: a per-key window query run keyed (one stage, one timer queue,
see reaqtive/operators/keyed_timed.py) beside another time-based operator whose timer comes due in the same
instant. The other operator's recovered timer goes back in line where it first stood (``armed=``); the keyed
stage's must too, or a restart between the two armings swaps them and changes what the other one sees. Each run
is restarted at every tick (once, then chained with differential saves) and must equal the uninterrupted run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, Query, SimpleSubject, initialize
from reaqtive.core.streams import LONG_MAX
from reaqtive.operators import keyed_window
from reaqtive.operators.keyed_groups import KeyedGroups, KeyedGroupsExpiring
from reaqtive.operators.keyed_timed import KeyedGroupsTimed
from reaqtive.operators.keyed_window import AggregateByKey, Hopping, Session, Tumbling
from reaqtive.state import CheckpointMode, StateFormatError, load_subscription, save_subscription
from reaqtive.testing import TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import Demand, check_checkpoint_anywhere
from tests.support import Recorder


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


def counted_windows(xs: Any, period: int) -> Any:
    """Per key (parity), the count of each window of ``period`` seconds (the keyed timed stage)."""
    return xs.group_by(lambda v: v % 2).flat_map(lambda g: g.window(s(period)).flat_map(lambda w: w.count()))


def summed_windows(xs: Any, period: int) -> Any:
    return xs.group_by(lambda v: v % 3).flat_map(
        lambda g: g.window(s(period)).flat_map(lambda w: w.aggregate(lambda a, v: a + v, 0)))


QUERIES: dict[str, Callable[[Any, int], Any]] = {
    "keyed windows, then sample": lambda xs, d: counted_windows(xs, d).sample(s(d)),
    "keyed windows, then sample by the double": lambda xs, d: counted_windows(xs, d).sample(s(2 * d)),
    "keyed windows merged with a sample of the source": lambda xs, d: counted_windows(xs, d).merge(
        xs.sample(s(d)).map(lambda v: -1 - v)),
    "two keyed window queries merged": lambda xs, d: counted_windows(xs, d).merge(
        summed_windows(xs, d).map(lambda v: -1 - v)),
    "keyed windows, then buffer by time": lambda xs, d: counted_windows(xs, d).buffer(s(d)),
    "keyed windows whose chains end early, then sample": lambda xs, d: xs.group_by(lambda v: v % 2).flat_map(
        lambda g: g.take(2).window(s(d)).flat_map(lambda w: w.count())).sample(s(d)),
}
"""Each holds a keyed window stage and another timer due every ``d`` (or ``2 d``) seconds: their timers come due in
the same instants, armed at different ticks (a key's first element, the other's period) or in one tick (each moved
by its own run then, or one by an element and one by its run: their numbers in that tick keep them apart)."""


def check(name: str, period: int, script: list[Any]) -> None:
    check_checkpoint_anywhere(lambda xs: QUERIES[name](xs, period), script, disposed=600,
                              ticks=set(range(200, max(m.time for m in script) + 2))).raise_on_failure()


def test_the_window_stage_of_these_queries_runs_keyed() -> None:
    handle = counted_windows(Query.from_iterable([1]), 2).subscribe(Recorder(initial=LONG_MAX))
    assert isinstance(handle, KeyedGroupsTimed)


SCRIPT = [on_next(201, 0), on_next(202, 1), on_next(203, 2), on_next(204, 3), on_next(206, 4), on_next(207, 5),
          on_completed(211)]
BEFORE = [on_next(202, 3), on_next(204, 0), on_next(204, 2), on_next(206, 2), on_next(208, 1), on_next(209, 0),
          on_completed(212)]
"""A script whose restarts swapped the keyed timer and the sample's before the keyed stage saved its timer."""


@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize("script", [SCRIPT, BEFORE], ids=["steady", "late keys"])
def test_a_keyed_window_timer_keeps_its_place_in_line_after_a_restart(name: str, script: list[Any]) -> None:
    check(name, 2, script)


@st.composite
def scripts(draw: st.DrawFn) -> list[Any]:
    tick, script = 201, []
    for value in draw(st.lists(st.integers(0, 5), max_size=7)):
        tick += draw(st.sampled_from([0, 1, 1, 2, 3]))
        script.append(on_next(tick, value))
    script.append(on_completed(tick + draw(st.integers(1, 4))))
    return script


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(QUERIES)), st.integers(1, 3), scripts())
@example("keyed windows, then sample", 2, [on_next(202, 3), on_completed(205)])
@example("keyed windows merged with a sample of the source", 2, BEFORE)
@example("keyed windows, then buffer by time", 2, [on_next(202, 0), on_completed(206)])
@example("two keyed window queries merged", 2, [on_next(203, 2), on_next(204, 5), on_next(205, 4), on_next(206, 0),
                                                on_next(209, 4), on_completed(210)])
def test_keyed_window_timers_beside_other_timers_recover_at_every_tick(name: str, period: int,
                                                                  script: list[Any]) -> None:
    check(name, period, script)


@pytest.mark.parametrize(("period", "script"), [
    (2, [on_next(201, 0), on_next(201, 2), on_next(202, 1), on_completed(205)]),
    (3, [on_next(204, 2), on_next(204, 0), on_next(206, 5), on_next(208, 2), on_next(209, 4), on_next(211, 2),
         on_next(214, 3), on_completed(215)]),
])
def test_a_keyed_timer_pending_after_every_chain_ended_keeps_its_place(period: int, script: list[Any]) -> None:
    """Every key's chain ended (``take(2)``) while the timer waits for their window end: live it still runs then,
    finds no key, and arms the next key's timer there; a recovered one must too (it was dropped: the next key's
    timer was armed at its element, earlier in line)."""
    check("keyed windows whose chains end early, then sample", period, script)


def counts_by_key(xs: Any) -> Any:
    return xs.group_by(lambda e: e[0]).flat_map(
        lambda g: g.window(s(10)).flat_map(lambda w: w.count()).map(lambda n: (g.key, n)))


def started(scheduler: TestScheduler, blob: bytes | None = None) -> tuple[SimpleSubject[Any], Recorder, Any]:
    source: SimpleSubject[tuple[int, int]] = SimpleSubject()
    recorder = Recorder(initial=LONG_MAX)
    handle = counts_by_key(source.as_query()).subscribe(recorder)
    initialize(handle, OperatorContext("sub://keyed-timers", scheduler),
               None if blob is None else (lambda h: load_subscription(h, blob)))
    return source, recorder, handle


def test_a_state_of_version_1_without_the_timer_loads_and_re_arms_at_the_restart(monkeypatch: Any) -> None:
    scheduler = TestScheduler()
    source, _, handle = started(scheduler)
    scheduler.advance_to(100)
    source.on_next((1, 0))
    source.on_next((2, 0))
    scheduler.advance_to(105)
    with monkeypatch.context() as old:  # the previous release's layout: no timer after the table
        old.setattr(KeyedGroupsTimed, "version", (1,))
        old.setattr(KeyedGroupsTimed, "save_state_core", KeyedGroups.save_state_core)
        blob = save_subscription(handle, CheckpointMode.FULL)
    handle.dispose()
    later = TestScheduler()
    later.advance_to(105)
    source, recorder, handle = started(later, blob)
    assert handle._timer_due == 110_000_000
    later.advance_to(111)
    assert recorder.values == [(1, 1), (2, 1)]  # in the order of their sequence numbers


def test_a_saved_timer_that_is_not_a_pair_of_times_is_refused() -> None:
    scheduler = TestScheduler()
    source, _, handle = started(scheduler)
    source.on_next((1, 0))
    handle._armed = 1.5  # a forged arming time
    blob = save_subscription(handle, CheckpointMode.FULL)
    with pytest.raises(StateFormatError, match="timer"):
        started(TestScheduler(), blob)


def test_a_window_field_stored_as_a_tuple_by_an_older_release_loads_as_a_list_and_goes_on() -> None:
    scheduler = TestScheduler()
    source, _, handle = started(scheduler)
    scheduler.advance_to(100)
    source.on_next((1, 0))
    source.on_next((1, 0))
    for key, record in list(handle._table.items()):  # the field as the previous release kept (and saved) it
        assert type(record[0]) is list
        handle._table.put(key, (tuple(record[0]), *record[1:]))
    blob = save_subscription(handle, CheckpointMode.FULL)
    later = TestScheduler()
    later.advance_to(105)
    source, recorder, handle = started(later, blob)
    assert type(handle._table.get(1)[0]) is list
    source.on_next((1, 0))
    later.advance_to(121)
    assert recorder.values == [(1, 3), (1, 0)]


# -- the other keyed stages with a shared timer: aggregate_by_key, and group_by's expire_after run keyed ----------


def counted_by_parity(xs: Any, period: int) -> Any:
    return xs.aggregate_by_key(lambda v: v % 2, Tumbling(s(period)))


def expiring_counts(xs: Any, period: int) -> Any:
    """Per key (parity), its count when it expires (``period`` seconds without an element): the keyed expiry."""
    return xs.group_by(lambda v: v % 2, expire_after=s(period)).flat_map(lambda g: g.count())


SHARED: dict[str, Callable[[Any, int], Any]] = {
    "aggregate_by_key, then sample": lambda xs, d: counted_by_parity(xs, d).sample(s(d)),
    "aggregate_by_key, then buffer by time": lambda xs, d: counted_by_parity(xs, d).buffer(s(d)),
    "aggregate_by_key merged with a buffer by time of the source": lambda xs, d: counted_by_parity(xs, d).merge(
        xs.buffer(s(d))),
    "two aggregate_by_key merged": lambda xs, d: counted_by_parity(xs, d).merge(
        xs.aggregate_by_key(lambda v: v % 3, Tumbling(s(d)), "sum")),
    "aggregate_by_key by hopping windows, then sample": lambda xs, d: xs.aggregate_by_key(
        lambda v: v % 2, Hopping(s(2 * d), s(d))).sample(s(d)),
    "aggregate_by_key by sessions, then sample": lambda xs, d: xs.aggregate_by_key(
        lambda v: v % 2, Session(s(d))).sample(s(d)),
    "keyed expiry, then sample": lambda xs, d: expiring_counts(xs, d).sample(s(d)),
    "keyed expiry merged with a buffer by time of the source": lambda xs, d: expiring_counts(xs, d).merge(
        xs.buffer(s(d))),
    "keyed expiry merged with aggregate_by_key": lambda xs, d: expiring_counts(xs, d).merge(
        counted_by_parity(xs, d)),
}
"""A keyed stage with one shared timer (aggregate_by_key's window ends, the keyed expiry) beside another timer due
in the same instants: windows closing (groups expiring) as the other operator's timer fires, armed at other ticks
or in the same tick (each re-armed by its own run then)."""


def check_shared(name: str, period: int, script: list[Any]) -> None:
    check_checkpoint_anywhere(lambda xs: SHARED[name](xs, period), script, disposed=600,
                              ticks=set(range(200, max(m.time for m in script) + 2))).raise_on_failure()


def test_these_shared_timers_run_keyed() -> None:
    source = Query.from_iterable([1])
    assert isinstance(counted_by_parity(source, 2).subscribe(Recorder(initial=LONG_MAX)), AggregateByKey)
    assert isinstance(expiring_counts(source, 2).subscribe(Recorder(initial=LONG_MAX)), KeyedGroupsExpiring)


@pytest.mark.parametrize("name", sorted(SHARED))
@pytest.mark.parametrize("script", [SCRIPT, BEFORE], ids=["steady", "late keys"])
def test_a_shared_keyed_timer_keeps_its_place_in_line_after_a_restart(name: str, script: list[Any]) -> None:
    check_shared(name, 2, script)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(SHARED)), st.integers(1, 3), scripts())
def test_shared_keyed_timers_beside_other_timers_recover_at_every_tick(name: str, period: int,
                                                                    script: list[Any]) -> None:
    check_shared(name, period, script)


def started_shared(scheduler: TestScheduler, query: Callable[[Any], Any], blob: bytes | None = None,
                   ) -> tuple[SimpleSubject[Any], Recorder, Any]:
    source: SimpleSubject[int] = SimpleSubject()
    recorder = Recorder(initial=LONG_MAX)
    handle = query(source.as_query()).subscribe(recorder)
    initialize(handle, OperatorContext("sub://shared-timers", scheduler),
               None if blob is None else (lambda h: load_subscription(h, blob)))
    return source, recorder, handle


def windows_of_ten(xs: Any) -> Any:
    return xs.aggregate_by_key(lambda v: v % 2, Tumbling(s(10)))


def expiring_after_ten(xs: Any) -> Any:
    return xs.group_by(lambda v: v % 2, expire_after=s(10)).flat_map(lambda g: g.count())


def aggregate_by_key_version_2(self: Any, writer: Any) -> None:
    """The previous release's layout of aggregate_by_key: no timer after the flags."""
    self._table.save(writer)
    writer.write(list(self._pending))
    writer.write(self._source_done)
    writer.write(self._pulled)


def keyed_expiry_version_1(self: Any, writer: Any) -> None:
    """The previous release's layout of the keyed expiry: no timer after the table of times."""
    KeyedGroups.save_state_core(self, writer)
    self._times.save(writer)


OLDER = {
    "aggregate_by_key": (windows_of_ten, AggregateByKey, (2,), aggregate_by_key_version_2, [(1, 1)]),
    "keyed expiry": (expiring_after_ten, KeyedGroupsExpiring, (1,), keyed_expiry_version_1, [1]),
}


@pytest.mark.parametrize("name", sorted(OLDER))
def test_a_shared_timer_saved_by_the_previous_release_loads_and_re_arms_at_the_restart(
        name: str, monkeypatch: Any) -> None:
    query, stage, version, save, values = OLDER[name]
    scheduler = TestScheduler()
    source, _, handle = started_shared(scheduler, query)
    scheduler.advance_to(101)
    source.on_next(1)
    scheduler.advance_to(105)
    with monkeypatch.context() as old:
        old.setattr(stage, "version", version)
        old.setattr(stage, "save_state_core", save)
        blob = save_subscription(handle, CheckpointMode.FULL)
    handle.dispose()
    later = TestScheduler()
    later.advance_to(105)
    source, recorder, handle = started_shared(later, query, blob)
    assert handle._timer_due is not None
    assert handle._timer.armed is None  # re-armed at the restart's tick, as that release did
    later.advance_to(112)
    assert [value if name == "keyed expiry" else (value[0], value[3]) for value in recorder.values] == values


@pytest.mark.parametrize("name", sorted(OLDER))
def test_a_shared_timer_is_saved_with_its_place_in_line_and_given_back(name: str) -> None:
    query = OLDER[name][0]
    scheduler = TestScheduler()
    source, _, handle = started_shared(scheduler, query)
    scheduler.advance_to(101)
    source.on_next(1)
    source.on_next(2)
    scheduler.advance_to(104)
    saved = (handle._timer_due, handle._armed, handle._timer.arrival)
    blob = save_subscription(handle, CheckpointMode.FULL)
    handle.dispose()
    later = TestScheduler()
    later.advance_to(104)
    _, _, handle = started_shared(later, query, blob)
    assert (handle._timer_due, handle._armed, handle._timer.arrival) == saved
    assert handle._timer.armed is not None  # back in line at the tick it was armed (101), not the restart's


FORGED = {
    "aggregate_by_key, armed long before its due": (windows_of_ten, lambda h: setattr(h, "_armed", -(2**40))),
    "aggregate_by_key, armed not a number": (windows_of_ten, lambda h: setattr(h, "_armed", 1.5)),
    "aggregate_by_key, a number past 2**32": (windows_of_ten, lambda h: setattr(h._timer, "arrival", 2**40)),
    "keyed expiry, armed after its due": (expiring_after_ten,
                                          lambda h: setattr(h, "_armed", h._timer_due + s(1))),
    "keyed expiry, armed not a time": (expiring_after_ten, lambda h: setattr(h, "_armed", 3)),
    "keyed expiry, a negative number": (expiring_after_ten, lambda h: setattr(h._timer, "arrival", -1)),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_shared_timer_is_refused_naming_it(name: str) -> None:
    query, forge = FORGED[name]
    scheduler = TestScheduler()
    source, _, handle = started_shared(scheduler, query)
    scheduler.advance_to(101)
    source.on_next(1)
    forge(handle)
    blob = save_subscription(handle, CheckpointMode.FULL)
    later = TestScheduler()
    later.advance_to(101)
    with pytest.raises(StateFormatError, match="timer"):
        started_shared(later, query, blob)


@pytest.mark.parametrize("name", ["aggregate_by_key, then sample", "two aggregate_by_key merged",
                                  "keyed expiry, then sample", "keyed expiry merged with aggregate_by_key"])
def test_a_shared_keyed_timer_keeps_its_place_under_bounded_demand(name: str) -> None:
    """One element at a time: rows wait for demand across the restarts; the timers still go back in line."""
    check_checkpoint_anywhere(lambda xs: SHARED[name](xs, 2), BEFORE, disposed=600, demand=Demand(initial=1, batch=1),
                              ticks=set(range(200, 214))).raise_on_failure()


def test_an_aggregate_by_key_timer_that_gave_way_between_slices_is_saved_where_it_went_back_in_line(
        monkeypatch: Any) -> None:
    monkeypatch.setattr(keyed_window, "CLOSE_SLICE", 2)
    scheduler = TestScheduler()
    source, recorder, handle = started_shared(scheduler, lambda xs: xs.aggregate_by_key(lambda v: v, Tumbling(s(10))))
    scheduler.advance_to(101)
    for key in range(5):
        source.on_next(key)  # every window ends at 110
    scheduler.yield_source = lambda: True  # the host asks every yieldable task to give way
    assert not scheduler.advance_to(110, yielding=True)
    assert [row[0] for row in recorder.values] == [0, 1]
    # it went back in line at 110, told a new number there: that is what is saved
    assert (handle._timer_due, handle._armed) == (110_000_000, 110_000_000)
    saved = handle._timer.arrival
    blob = save_subscription(handle, CheckpointMode.FULL)
    handle.dispose()
    later = TestScheduler()
    later.advance_to(110)
    _, recorder, handle = started_shared(later, lambda xs: xs.aggregate_by_key(lambda v: v, Tumbling(s(10))), blob)
    assert (handle._armed, handle._timer.arrival) == (110_000_000, saved)
    later.advance_to(111)
    assert [row[0] for row in recorder.values] == [2, 3, 4]  # the rest, once, in order
