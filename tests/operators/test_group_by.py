"""group_by: groups per key, the order of user code, completion and errors reaching every group, disposal,
limits, expiry, demand across the boundary, hosted ids and subjects, recovery."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reaqtive import (
    LONG_MAX,
    CallbackSubscriber,
    MissingSchedulerError,
    OperatorContext,
    SimpleSubject,
    from_iterable,
)
from reaqtive.core.errors import BufferOverflowError, LimitExceededError
from reaqtive.core.visitors import initialize, walk
from reaqtive.fluent.query import GroupedStream
from reaqtive.operators.group_by import GroupBy, GroupByExpiring
from reaqtive.operators.settings import MAX_GROUP_COUNT, MAX_QUEUE_SIZE
from reaqtive.state import CheckpointMode, InnerEnvironment, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.operators._inner_streams_support import InnerCollector, run_inner


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


def parity(x: int) -> int:
    return x % 2


HOT = [
    on_next(150, 0),  # before the subscription: not seen
    on_next(210, 1),
    on_next(220, 2),
    on_next(230, 3),
    on_next(240, 4),
    on_next(250, 5),
    on_completed(300),
]


# -- groups ------------------------------------------------------------------------------------------------------


def test_group_by_emits_a_group_per_new_key_before_its_first_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.group_by(parity))
    assert result.outer == [on_next(210, 1), on_next(220, 0), on_completed(300)]
    assert result.group(1) == [on_next(210, 1), on_next(230, 3), on_next(250, 5), on_completed(300)]
    assert result.group(0) == [on_next(220, 2), on_next(240, 4), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_completion_reaches_every_group_then_the_output() -> None:
    order: list[str] = []

    def on_group(group: GroupedStream[Any]) -> None:
        group.subscribe(CallbackSubscriber(None, None, lambda: order.append(f"group {group.key}")))

    from_iterable(range(3)).group_by(lambda x: x).run(on_group, None, lambda: order.append("output"))
    assert order == ["group 0", "group 1", "group 2", "output"]


def test_element_selector_transforms_what_goes_into_the_group() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.group_by(parity, lambda x: x * 10))
    assert result.group(1) == [on_next(210, 10), on_next(230, 30), on_next(250, 50), on_completed(300)]


def test_none_is_a_key_like_any_other() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(240))
    result = run_inner(scheduler, lambda: xs.group_by(lambda x: None if x % 2 else "even"))
    assert result.outer == [on_next(210, None), on_next(220, "even"), on_completed(240)]
    assert result.group(None) == [on_next(210, 1), on_next(230, 3), on_completed(240)]


def test_group_by_standalone_over_a_cold_source() -> None:
    seen: list[tuple[object, int]] = []

    def on_group(group: GroupedStream[int]) -> None:
        group.subscribe(CallbackSubscriber(lambda x: seen.append((group.key, x))))

    from_iterable(range(6)).group_by(lambda x: x % 3).run(on_group)
    assert seen == [(0, 0), (1, 1), (2, 2), (0, 3), (1, 4), (2, 5)]


def test_a_late_subscriber_to_a_group_misses_what_went_before() -> None:
    """Groups are hot: subscribe while the group is being emitted (flat_map does)."""
    groups: list[GroupedStream[int]] = []
    subject_query = from_iterable(range(4)).group_by(parity)
    subject_query.run(groups.append)
    late: list[object] = []
    groups[0].subscribe(CallbackSubscriber(late.append, None, lambda: late.append("done")))
    assert late == ["done"]  # the group completed with the source; its elements are gone


# -- errors ------------------------------------------------------------------------------------------------------


def test_source_error_reaches_every_group_then_the_output() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_error(230, boom))
    result = run_inner(scheduler, lambda: xs.group_by(parity))
    assert result.outer == [on_next(210, 1), on_next(220, 0), on_error(230, boom)]
    assert result.group(1) == [on_next(210, 1), on_error(230, boom)]
    assert result.group(0) == [on_next(220, 2), on_error(230, boom)]


def test_key_selector_error_reaches_every_group_and_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)

    def key(x: int) -> int:
        if x == 3:
            raise ValueError("bad key")
        return x % 2

    result = run_inner(scheduler, lambda: xs.group_by(key))
    assert result.outer == [on_next(210, 1), on_next(220, 0), on_error(230, ValueError("bad key"))]
    assert result.group(1) == [on_next(210, 1), on_error(230, ValueError("bad key"))]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_element_selector_runs_after_the_new_group_is_emitted() -> None:
    """As in Rx: the group of a new key goes out, then the element selector fails."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)

    def element(x: int) -> int:
        if x == 2:
            raise ValueError("bad element")
        return x

    result = run_inner(scheduler, lambda: xs.group_by(parity, element))
    assert result.outer == [on_next(210, 1), on_next(220, 0), on_error(220, ValueError("bad element"))]
    assert result.group(0) == [on_error(220, ValueError("bad element"))]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_element_selector_errors_on_the_fast_path_too() -> None:
    """Unbounded demand, existing group: the lock-free path handles selector failures the same way."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)

    def element(x: int) -> int | None:
        return None if x == 3 else x

    result = run_inner(scheduler, lambda: xs.group_by(parity, element))
    assert result.outer[-1] == on_error(230, TypeError)
    assert result.group(1) == [on_next(210, 1), on_error(230, TypeError)]


def test_an_unhashable_key_is_an_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.group_by(lambda x: [x % 2] if x > 2 else x % 2))
    assert result.outer == [on_next(210, 1), on_next(220, 0), on_error(230, TypeError)]


# -- disposal ----------------------------------------------------------------------------------------------------


def test_disposing_the_output_completes_the_live_groups_and_cancels_the_source() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    env = InnerEnvironment()
    result = run_inner(
        scheduler, lambda: xs.group_by(parity), disposed=235, context=scheduler.create_context(environment=env)
    )
    assert result.outer == [on_next(210, 1), on_next(220, 0)]
    assert result.group(1) == [on_next(210, 1), on_next(230, 3), on_completed(235)]
    assert result.group(0) == [on_next(220, 2), on_completed(235)]
    assert xs.subscriptions == [subscribe(200, 235)]
    assert env.inner_subject_ids() == []


def test_an_early_terminating_consumer_of_the_groups_truncates_them() -> None:
    """take(1) disposes group_by after the first group: the group completes there (Rx would let it run on)."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.group_by(parity).take(1).flat_map(lambda g: g))
    assert result.messages == [on_next(210, 1), on_completed(210)]
    assert xs.subscriptions == [subscribe(200, 210)]


def test_an_error_in_a_group_consumer_ends_the_result_and_disposes_the_source() -> None:
    """An inner error (the consumer of group 1 fails at 230): flat_map disposes group_by, which completes the
    other groups and cancels the source."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    boom = ValueError("boom")

    def consume(group: GroupedStream[int]) -> Any:
        def check(x: int) -> int:
            if x == 3:
                raise boom
            return x

        return group.map(check)

    result = scheduler.start(lambda: xs.group_by(parity).flat_map(consume))
    assert result.messages == [on_next(210, 1), on_next(220, 2), on_error(230, boom)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_a_consumer_leaving_its_group_early_leaves_the_others_alone() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.group_by(parity).flat_map(lambda g: g.take(1)))
    assert result.messages == [on_next(210, 1), on_next(220, 2), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


# -- limits ------------------------------------------------------------------------------------------------------


def test_max_groups_bounds_the_open_groups() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.group_by(lambda x: x, max_groups=2))
    assert result.outer == [on_next(210, 1), on_next(220, 2), on_error(230, LimitExceededError)]
    assert result.group(1) == [on_next(210, 1), on_error(230, LimitExceededError)]
    error = result.messages[-1].value.error  # type: ignore[union-attr]
    assert isinstance(error, LimitExceededError) and error.setting == "max_groups" and error.limit == 2
    assert xs.subscriptions == [subscribe(200, 230)]


def test_the_host_setting_bounds_the_groups_too() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_GROUP_COUNT: 3})
    result = run_inner(scheduler, lambda: xs.group_by(lambda x: x, max_groups=10), context=context)
    assert result.outer[-1] == on_error(240, LimitExceededError)
    error = result.messages[-1].value.error  # type: ignore[union-attr]
    assert error.setting == MAX_GROUP_COUNT and error.limit == 3


def test_groups_that_expired_do_not_count_against_the_limit() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(260, 3), on_completed(300))
    result = run_inner(scheduler, lambda: xs.group_by(lambda x: x, max_groups=2, expire_after=s(30)))
    assert result.outer == [on_next(210, 1), on_next(220, 2), on_next(260, 3), on_completed(300)]


# -- expiry ------------------------------------------------------------------------------------------------------


def test_an_idle_group_expires_and_a_later_element_opens_a_new_group() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(
        on_next(210, 1), on_next(220, 3), on_next(230, 2), on_next(290, 5), on_completed(400)
    )
    env = InnerEnvironment()
    result = run_inner(
        scheduler,
        lambda: xs.group_by(parity, expire_after=s(30)),
        context=scheduler.create_context(environment=env),
    )
    assert result.outer == [on_next(210, 1), on_next(230, 0), on_next(290, 1), on_completed(400)]
    first, even, second = result.inners
    assert first.messages == [on_next(210, 1), on_next(220, 3), on_completed(250)]  # idle since 220
    assert even.messages == [on_next(230, 2), on_completed(260)]
    assert second.messages == [on_next(290, 5), on_completed(320)]
    ids = [stream.stream_id for stream in result.streams]
    assert ids == [f"{ids[0].rsplit('/', 1)[0]}/{n}" for n in range(3)]  # a new id for the new group
    assert env.inner_subject_ids() == []


def test_an_element_at_the_expiry_instant_keeps_the_group() -> None:
    """Sources run before timers at equal times: the element at 240 refreshes the group due to expire at 240."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(240, 3), on_completed(300))
    result = run_inner(scheduler, lambda: xs.group_by(parity, expire_after=s(30)))
    assert result.outer == [on_next(210, 1), on_completed(300)]
    assert result.group(1) == [on_next(210, 1), on_next(240, 3), on_completed(270)]


def test_expiry_needs_a_scheduler() -> None:
    query = from_iterable([1]).group_by(parity, expire_after=s(5))
    with pytest.raises(MissingSchedulerError):
        query.run(lambda g: None, context=OperatorContext("test://no-scheduler"))


def test_a_recovered_group_expires_when_it_would_have() -> None:
    scheduler = TestScheduler()
    env = InnerEnvironment()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    first = InnerCollector(scheduler)
    handle = xs.group_by(parity, expire_after=s(50)).subscribe(first)
    initialize(handle, scheduler.create_context(environment=env))
    scheduler.advance_to(230)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    scheduler.advance_to(400)  # the process was down from 230 to 400
    restored = InnerEnvironment()
    ys = scheduler.create_hot_observable(on_next(410, 3), on_completed(420))
    recovered = InnerCollector(scheduler)
    initialize(
        ys.group_by(parity, expire_after=s(50)).subscribe(recovered),
        scheduler.create_context(environment=restored),
        state_loader(blob),
    )
    # the groups expired while the process was down: their subjects were re-created and complete at once
    assert sorted(restored.inner_subject_ids())[0].endswith("/0")
    scheduler.advance_to(500)
    assert recovered.outer == [on_next(410, 1), on_completed(420)]  # a new group for key 1
    assert restored.inner_subject_ids() == []


# -- demand ------------------------------------------------------------------------------------------------------


def test_group_by_asks_the_upstream_for_everything_once_asked() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(215, observer.request, 1)
    scheduler.start(lambda: xs.group_by(parity), observer=observer)
    assert xs.requests == [Recorded(215, LONG_MAX)]  # the hot source held 1 until then
    # group 0 never gets demand: it waits, and so does the completion of the output
    assert observer.outer == [on_next(215, 1)]
    assert observer.group(1) == [on_next(215, 1), on_next(230, 3), on_next(250, 5), on_completed(300)]


def test_groups_wait_for_outer_demand_with_their_elements() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(245, observer.request, 1)
    scheduler.start(lambda: xs.group_by(parity), observer=observer)
    assert observer.outer == [on_next(210, 1), on_next(245, 0), on_completed(300)]
    assert observer.group(0) == [on_next(245, 2), on_next(245, 4), on_completed(300)]  # held, then pushed


def test_completion_waits_for_the_groups_waiting_for_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_completed(230))
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(260, observer.request, 1)
    scheduler.start(lambda: xs.group_by(parity), observer=observer)
    assert observer.outer == [on_next(210, 1), on_next(260, 0), on_completed(260)]
    assert observer.group(1) == [on_next(210, 1), on_completed(230)]
    assert observer.group(0) == [on_next(260, 2), on_completed(260)]


def test_one_group_at_a_time_never_delivers_more_groups_than_requested() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*[on_next(210 + i, i) for i in range(20)], on_completed(300))
    observer = InnerCollector(scheduler, request=1)
    scheduler.start(lambda: xs.group_by(lambda x: x % 5), observer=observer)
    assert [m.value.value for m in observer.outer[:-1]] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]
    assert observer.group(3) == [
        on_next(213, 3),
        on_next(218, 8),
        on_next(223, 13),
        on_next(228, 18),
        on_completed(300),
    ]


def test_more_waiting_than_the_queue_bound_is_an_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 2})  # group 0 and its element 2, then 4
    scheduler.start(lambda: xs.group_by(parity), observer=observer, context=context)
    assert observer.outer == [on_next(210, 1), on_error(240, LimitExceededError)]
    assert observer.group(1) == [on_next(210, 1), on_next(230, 3), on_error(240, LimitExceededError)]


def test_inside_a_group_the_subject_honours_the_subscriber_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.group_by(parity), inner_request=1)
    assert result.group(1) == [on_next(210, 1), on_next(230, 3), on_next(250, 5), on_completed(300)]


def test_a_group_subscriber_without_demand_overflows_its_bounded_buffer() -> None:
    seen: list[object] = []

    class Lazy(CallbackSubscriber[int]):
        def on_subscribe(self, subscription: Any) -> None:
            pass  # never requests

        def on_error(self, error: BaseException) -> None:
            seen.append(error)

    def on_group(group: GroupedStream[int]) -> None:
        group.subscribe(Lazy())

    done: list[bool] = []
    from_iterable(range(2000)).group_by(lambda x: 0).run(on_group, None, lambda: done.append(True))
    assert len(seen) == 1 and isinstance(seen[0], BufferOverflowError)  # only that subscriber failed
    assert done == [True]


def test_request_zero_is_a_rule_3_9_error_for_the_groups_too() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler)
    scheduler.schedule_absolute(225, observer.request, 0)
    scheduler.start(lambda: xs.group_by(parity), observer=observer)
    assert observer.outer[-1] == on_error(225, ValueError)
    assert observer.group(1)[-1] == on_error(225, ValueError)


# -- hosted: ids, subjects, recovery -----------------------------------------------------------------------------


def test_hosted_groups_are_subjects_of_the_environment_with_deterministic_ids() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    env = InnerEnvironment()
    context = scheduler.create_context(environment=env, instance_id="sub://q")
    result = scheduler.start(lambda: xs.group_by(parity), context=context, disposed=260)
    groups = [m.value.value for m in result.messages]  # type: ignore[union-attr]
    assert [g.stream_id for g in groups] == ["sub://q/group_by0/0", "sub://q/group_by0/1"]
    assert [g.reference() for g in groups] == [
        ("group", "sub://q/group_by0/0", 1),
        ("group", "sub://q/group_by0/1", 0),
    ]


def test_standalone_groups_have_no_stream_id() -> None:
    groups: list[GroupedStream[int]] = []
    from_iterable([1]).group_by(parity).run(groups.append)
    assert groups[0].stream_id is None and groups[0].key == 1


def test_a_recovered_group_by_re_creates_the_subjects_and_emits_no_group_twice() -> None:
    scheduler = TestScheduler()
    env = InnerEnvironment()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    handle = xs.group_by(parity).subscribe(InnerCollector(scheduler))
    initialize(handle, scheduler.create_context(environment=env, instance_id="sub://q"))
    scheduler.advance_to(230)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    restored = InnerEnvironment()
    ys = scheduler.create_hot_observable(on_next(240, 3), on_next(250, 5), on_next(260, 6), on_completed(270))
    context = scheduler.create_context(environment=restored, instance_id="sub://q")
    recovered = InnerCollector(scheduler)
    initialize(ys.group_by(parity).subscribe(recovered), context, state_loader(blob))
    # a consumer that saved its group by reference finds its subject again
    assert sorted(restored.inner_subject_ids()) == ["sub://q/group_by0/0", "sub://q/group_by0/1"]
    odd: list[object] = []
    restored.get_subject("sub://q/group_by0/0").subscribe(CallbackSubscriber(odd.append, None, lambda: odd.append("|")))
    scheduler.advance_to(300)
    assert recovered.outer == [on_completed(270)]  # no group emitted again
    assert odd == [3, 5, "|"]
    assert restored.inner_subject_ids() == []


def test_elements_of_emitted_groups_leave_the_group_by_clean() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(250, 3), on_next(260, 4))
    handle = xs.group_by(parity).subscribe(InnerCollector(scheduler))
    initialize(handle, scheduler.create_context(environment=InnerEnvironment()))
    scheduler.advance_to(230)
    stage = next(op for op in walk(handle) if isinstance(op, GroupBy))
    assert stage._next_number == 2 and list(stage._groups) == [1, 0]
    save_subscription(handle, CheckpointMode.FULL)
    stage.on_state_saved()
    scheduler.advance_to(270)
    assert not stage.state_changed
    assert save_subscription(handle, CheckpointMode.DIFFERENTIAL) is None


def test_a_recovered_group_by_keeps_the_groups_waiting_for_demand_and_the_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(225, 4), on_completed(230))
    observer = InnerCollector(scheduler, request=0)
    handle = xs.group_by(parity).subscribe(observer)
    initialize(handle, scheduler.create_context(environment=InnerEnvironment()))
    observer.request(1)
    scheduler.advance_to(240)
    assert observer.outer == [on_next(210, 1)]  # group 0 waits with 2 and 4; the completion waits behind it
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    ys = scheduler.create_hot_observable()
    recovered = InnerCollector(scheduler, request=0)
    initialize(
        ys.group_by(parity).subscribe(recovered),
        scheduler.create_context(environment=InnerEnvironment()),
        state_loader(blob),
    )
    scheduler.schedule_absolute(260, recovered.request, 1)
    scheduler.advance_to(300)
    assert recovered.outer == [on_next(260, 0), on_completed(260)]
    assert recovered.group(0) == [on_next(260, 2), on_next(260, 4), on_completed(260)]
    assert ys.requests == []  # the source had completed: it is not asked again


def test_a_source_that_completed_before_the_start_completes_the_output() -> None:
    subject = SimpleSubject[int]()
    subject.on_complete()
    done: list[str] = []
    subject.as_query().group_by(parity).run(lambda g: done.append("group"), None, lambda: done.append("done"))
    assert done == ["done"]


# -- checkpoint anywhere -----------------------------------------------------------------------------------------

SCRIPT = [
    on_next(210, 1),
    on_next(215, 2),
    on_next(220, 3),
    on_next(230, 4),
    on_next(240, 6),
    on_next(250, 7),
    on_next(280, 9),
    on_next(290, 5),
    on_completed(320),
]


def count_per_group(g: GroupedStream[int]) -> Any:
    return g.scan(0, lambda c, _: c + 1).map(lambda c: (g.key, c))


@pytest.mark.parametrize(
    "create",
    [
        pytest.param(lambda xs: xs.group_by(lambda x: x % 3).flat_map(count_per_group), id="plain"),
        pytest.param(lambda xs: xs.group_by(lambda x: x % 3, lambda x: -x).flat_map(lambda g: g), id="element"),
        pytest.param(
            lambda xs: xs.group_by(lambda x: x % 3, expire_after=s(25)).flat_map(count_per_group), id="expiry"
        ),
        pytest.param(
            lambda xs: xs.group_by(lambda x: x % 3, expire_after=s(15)).flat_map(
                lambda g: g.to_list().map(lambda v: (g.key, v)), max_concurrent=1
            ),
            id="groups-waiting-for-demand",
        ),
        pytest.param(lambda xs: xs.group_by(lambda x: x % 3).map(lambda g: g.key), id="outer-only"),
        pytest.param(lambda xs: xs.group_by(lambda x: x % 3).flat_map(lambda g: g.take(2)), id="consumer-leaves"),
    ],
)
def test_group_by_survives_a_checkpoint_anywhere(create: Any) -> None:
    assert_checkpoint_anywhere(create, SCRIPT)


def test_group_by_with_a_source_error_survives_a_checkpoint_anywhere() -> None:
    script = [on_next(210, 1), on_next(220, 2), on_next(230, 4), on_error(240, RuntimeError("boom"))]
    assert_checkpoint_anywhere(lambda xs: xs.group_by(parity).flat_map(count_per_group), script)


# -- arguments ---------------------------------------------------------------------------------------------------


def test_the_stage_follows_the_arguments() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable()
    plain = xs.group_by(parity).subscribe(scheduler.create_observer())
    expiring = xs.group_by(parity, expire_after=s(1)).subscribe(scheduler.create_observer())
    assert type(plain) is GroupBy and type(expiring) is GroupByExpiring
    assert plain.name == "reaqtive:group_by" and expiring.name == "reaqtive:group_by+expiry"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((1,), {}, TypeError, "key_selector must be callable"),
        ((parity, 2), {}, TypeError, "element_selector must be callable"),
        ((parity,), {"max_groups": 0}, ValueError, "max_groups must be > 0"),
        ((parity,), {"max_groups": 1.5}, TypeError, "max_groups must be an int"),
        ((parity,), {"expire_after": 5}, TypeError, "expire_after must be a timedelta"),
        ((parity,), {"expire_after": s(0)}, ValueError, "expire_after must be positive"),
    ],
)
def test_arguments_are_validated_when_the_query_is_built(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        from_iterable([1]).group_by(*args, **kwargs)
