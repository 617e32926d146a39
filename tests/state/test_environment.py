"""InnerEnvironment: deterministic inner ids, inner subscriptions as separate checkpoint units, restore."""

from __future__ import annotations

import operator

import pytest

from reaqtive import OperatorContext, SimpleSubject
from reaqtive.state import CheckpointMode, InnerEnvironment, confirm_saved, save_subscription
from tests.support import Recorder


def context(env: InnerEnvironment) -> OperatorContext:
    return OperatorContext("sub://1", execution_environment=env)


def test_allocated_ids_are_deterministic_per_owner() -> None:
    first, second = InnerEnvironment(), InnerEnvironment()
    ids = [env.allocate_id(owner, "flat_map") for env in (first,) for owner in ("a", "b", "a")]
    assert ids == ["a/flat_map0", "b/flat_map0", "a/flat_map1"]
    assert [second.allocate_id(owner, "flat_map") for owner in ("a", "b", "a")] == ids


def test_inner_subscription_is_a_separate_unit_that_restores_from_its_own_blob() -> None:
    env = InnerEnvironment()
    subject = SimpleSubject[int]()
    recorder = Recorder(initial=100)
    env.subscribe_inner("sub://1/g0/0", subject.as_query().scan(0, operator.add), recorder, context(env))
    for value in (1, 2, 3):
        subject.on_next(value)
    assert recorder.values == [1, 3, 6]
    handle = env.inner_subscriptions()["sub://1/g0/0"]
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    confirm_saved(handle)
    assert save_subscription(handle, CheckpointMode.DIFFERENTIAL) is None, "clean after the confirmed save"

    restored = InnerEnvironment()
    restored.restore({"sub://1/g0/0": blob})
    assert restored.unclaimed_inner_ids() == ["sub://1/g0/0"]
    again = SimpleSubject[int]()
    recovered = Recorder(initial=100)
    restored.subscribe_inner("sub://1/g0/0", again.as_query().scan(0, operator.add), recovered, context(restored))
    again.on_next(4)
    assert recovered.values == [10], "the recovered scan continued from 6"
    assert restored.unclaimed_inner_ids() == []


def test_deleted_inner_ids_are_reported_until_confirmed() -> None:
    env = InnerEnvironment()
    subject = SimpleSubject[int]()
    env.subscribe_inner("x/0", subject.as_query(), Recorder(initial=1), context(env))
    env.delete_inner("x/0")
    assert subject.subscriber_count == 0 and env.inner_subscriptions() == {}
    assert env.removed_inner_ids() == ["x/0"]
    env.confirm_removed(["x/0"])
    assert env.removed_inner_ids() == []


def test_a_failed_load_keeps_the_saved_state() -> None:
    env = InnerEnvironment()
    env.restore({"x/0": b"not a blob"})
    with pytest.raises(Exception, match="x/0"):
        env.subscribe_inner("x/0", SimpleSubject[int]().as_query(), Recorder(), context(env))
    assert env.unclaimed_inner_ids() == ["x/0"] and env.inner_subscriptions() == {}


def test_inner_subjects_are_created_once_and_deleted() -> None:
    env = InnerEnvironment()
    subject = env.get_or_create_subject("sub://1/group0/k1")
    assert env.get_or_create_subject("sub://1/group0/k1") is subject
    assert env.get_subject("sub://1/group0/k1") is subject
    env.delete_subject("sub://1/group0/k1")
    with pytest.raises(LookupError):
        env.get_subject("sub://1/group0/k1")


def test_duplicate_inner_ids_are_refused() -> None:
    env = InnerEnvironment()
    env.subscribe_inner("x/0", SimpleSubject[int]().as_query(), Recorder(), context(env))
    with pytest.raises(ValueError, match="already exists"):
        env.subscribe_inner("x/0", SimpleSubject[int]().as_query(), Recorder(), context(env))
