"""Testing support: a virtual-time scheduler, scripted hot and cold sources, a recording subscriber, the
ReactiveTest-style helpers tests are written in, the checkpoint-anywhere harness
(:mod:`reaqtive.testing.checkpoint`) and the Reactive Streams conformance bases
(:mod:`reaqtive.testing.conformance`): the kit for testing an operator, reaqtive's or another package's.

>>> from reaqtive.testing import TestScheduler, on_next, on_completed, subscribe
>>> scheduler = TestScheduler()
>>> xs = scheduler.create_cold_observable(on_next(10, 1), on_next(20, 2), on_completed(30))
>>> result = scheduler.start(lambda: xs.filter(lambda x: x > 1))
>>> result.messages, xs.subscriptions
([OnNext(2)@220, OnCompleted()@230], [Subscribe(200, 230)])

Tick length and the order of work at equal virtual times are documented in :mod:`reaqtive.testing.scheduler`
and ``docs/scheduler.md``.
"""

from reaqtive.testing.checkpoint import (
    CheckpointReport,
    Demand,
    RestartOutcome,
    assert_checkpoint_anywhere,
    check_checkpoint_anywhere,
)
from reaqtive.testing.conformance import (
    OperatorProcessorVerification,
    OperatorPublisherVerification,
    QueryPublisherVerification,
    failing_source,
)
from reaqtive.testing.notifications import (
    CREATED,
    DISPOSED,
    INFINITE,
    SUBSCRIBED,
    Notification,
    NotificationKind,
    OnCompleted,
    OnError,
    OnErrorMatching,
    OnNext,
    OnNextMatching,
    Recorded,
    SubscriptionLog,
    on_completed,
    on_error,
    on_next,
    subscribe,
)
from reaqtive.testing.observer import MockObserver
from reaqtive.testing.policies import PolicyCall, RecordingPolicy
from reaqtive.testing.scheduler import DEFAULT_INSTANCE_ID, TestScheduler
from reaqtive.testing.sources import ColdSource, HotSource, TestableQuery, TestSource

__all__ = [
    # virtual time
    "TestScheduler",
    "DEFAULT_INSTANCE_ID",
    # sources and sinks
    "TestableQuery",
    "TestSource",
    "HotSource",
    "ColdSource",
    "MockObserver",
    # notifications and logs
    "Notification",
    "NotificationKind",
    "OnNext",
    "OnError",
    "OnCompleted",
    "OnNextMatching",
    "OnErrorMatching",
    "Recorded",
    "SubscriptionLog",
    # ReactiveTest-style helpers
    "on_next",
    "on_completed",
    "on_error",
    "subscribe",
    "CREATED",
    "SUBSCRIBED",
    "DISPOSED",
    "INFINITE",
    # checkpoint anywhere
    "assert_checkpoint_anywhere",
    "check_checkpoint_anywhere",
    "Demand",
    "CheckpointReport",
    "RestartOutcome",
    # error policies
    "RecordingPolicy",
    "PolicyCall",
    # Reactive Streams conformance
    "OperatorPublisherVerification",
    "OperatorProcessorVerification",
    "QueryPublisherVerification",
    "failing_source",
]
