"""A consumer that subscribes to a group or window after it ended (an inner query that starts with values emitted
one at a time subscribes to its stream late) gets the stream's completion: in a plain run, in a hosted run (where
the ended stream's subject was already released) and after restarts at every tick (where the consumer held the
stream at the checkpoint, and a recovery looks the ended stream up again). Before, the hosted run failed with
``ObjectDisposedError`` and a restart left the inner query waiting for ever (its outputs silently missing)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from reaqtive.testing import TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import check_checkpoint_anywhere


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


SCRIPT = [on_next(201, 0), on_next(202, 1), on_next(203, 2), on_next(205, 3), on_next(206, 4), on_completed(216)]

QUERIES: dict[str, Callable[[Any], Any]] = {
    "groups expiring before their inner subscribes": lambda xs: xs.group_by(
        lambda v: v % 2, expire_after=s(1)).flat_map(lambda g: g.start_with(-9, -8, -7, -6).count()),
    "windows closing before their inner subscribes": lambda xs: xs.window(s(2)).flat_map(
        lambda w: w.start_with(-9, -8, -7).count()),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_a_late_subscriber_of_an_ended_stream_gets_its_end_hosted_and_after_restarts(name: str) -> None:
    scheduler = TestScheduler()
    plain = scheduler.start(lambda: QUERIES[name](scheduler.create_hot_observable(*SCRIPT)), disposed=600)
    report = check_checkpoint_anywhere(QUERIES[name], SCRIPT, disposed=600)
    report.raise_on_failure()
    assert list(report.expected) == list(plain.messages)
    assert plain.messages[-1] in (on_completed(216), on_completed(217))  # (the last inner's values end at 217)
