"""The due-time queue and the clocks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from freezegun import freeze_time
from hypothesis import given
from hypothesis import strategies as st

from reaqtive.scheduler import EPOCH, DueQueue, PhysicalScheduler, VirtualClock, WallClock, to_utc


def test_due_queue_orders_by_due_then_priority_then_arrival() -> None:
    queue: DueQueue[int, str] = DueQueue()
    queue.add(5, 1, "late-p1-first")
    queue.add(5, 0, "late-p0")
    queue.add(5, 1, "late-p1-second")
    queue.add(1, 2, "early-p2")
    assert queue.pop_due(4) == ["early-p2"]
    assert queue.pop_due(5) == ["late-p0", "late-p1-first", "late-p1-second"]
    assert not queue


def test_due_queue_removes_entries_and_ignores_missing_ones() -> None:
    queue: DueQueue[int, str] = DueQueue()
    keep = queue.add(3, 1, "keep")
    drop = queue.add(2, 1, "drop")
    queue.remove(drop)
    queue.remove(drop)
    assert queue.first() == keep
    assert queue.first_due() == 3
    assert len(queue) == 1


def test_due_queue_keeps_a_given_arrival_ahead_of_later_ones() -> None:
    queue: DueQueue[int, str] = DueQueue()
    early = queue.next_arrival()
    queue.add(1, 1, "second")
    queue.add(1, 1, "first", early)
    assert queue.pop_due(1) == ["first", "second"]


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), max_size=60), st.integers(0, 20))
def test_due_queue_matches_a_sorted_model(entries: list[tuple[int, int]], now: int) -> None:
    queue: DueQueue[int, int] = DueQueue()
    for index, (due, priority) in enumerate(entries):
        queue.add(due, priority, index)
    model = sorted(range(len(entries)), key=lambda i: (entries[i][0], entries[i][1], i))
    due_now = [i for i in model if entries[i][0] <= now]
    assert queue.pop_due(now) == due_now
    assert [queue.pop()[3] for _ in range(len(queue))] == model[len(due_now) :]


def test_wall_clock_is_aware_utc_and_follows_freezegun() -> None:
    clock = WallClock()
    assert clock.now().tzinfo is UTC
    with freeze_time("2030-05-06 07:08:09"):
        assert clock.now() == datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
        assert clock.seconds_until(datetime(2030, 5, 6, 7, 8, 19, tzinfo=UTC)) == 10.0
        assert clock.seconds_until(datetime(2030, 5, 6, 7, 8, 0, tzinfo=UTC)) == 0.0


def test_virtual_clock_moves_only_forward_and_notifies() -> None:
    clock = VirtualClock()
    calls: list[datetime] = []
    clock.add_listener(lambda: calls.append(clock.now()))
    assert clock.now() == EPOCH
    assert clock.seconds_until(EPOCH + timedelta(seconds=1)) is None  # wait until woken
    clock.advance_by(timedelta(seconds=5))
    clock.advance_to(EPOCH + timedelta(seconds=7))
    assert calls == [EPOCH + timedelta(seconds=5), EPOCH + timedelta(seconds=7)]
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance_to(EPOCH)
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance_by(timedelta(seconds=-1))


def test_a_disposed_physical_scheduler_stops_listening_to_its_virtual_clock() -> None:
    clock = VirtualClock()
    physical = PhysicalScheduler(workers=1, clock=clock)
    assert len(clock._listeners) == 1
    physical.dispose()
    assert clock._listeners == ()
    clock.advance_by(timedelta(seconds=1))  # no call into the disposed scheduler


def test_to_utc_converts_zones_and_rejects_naive_datetimes() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert to_utc(datetime(2024, 1, 1, 12, tzinfo=plus_two)) == datetime(2024, 1, 1, 10, tzinfo=UTC)
    with pytest.raises(ValueError, match="naive"):
        to_utc(datetime(2024, 1, 1))
