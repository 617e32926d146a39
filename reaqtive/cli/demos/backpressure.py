"""The backpressure demo: a cold pipeline and a hot subject, with every demand signal printed.

Run it with ``reaqtive demo`` (or ``make demo``).
"""

from __future__ import annotations

from collections.abc import Callable

from reaqtive.core.errors import BufferOverflowError
from reaqtive.core.streams import Subscriber, Subscription
from reaqtive.core.subjects import OverflowPolicy, SimpleSubject
from reaqtive.core.subscribers import CallbackSubscriber
from reaqtive.fluent.query import from_iterable

__all__ = ["run"]


class _TracingSink(CallbackSubscriber[int]):
    """A batching sink that also reports the demand it signals."""

    __slots__ = ("_say",)

    def __init__(self, say: Callable[[str], object], batch_size: int) -> None:
        super().__init__(lambda x: say(f"  sink   <- {x}"), batch_size=batch_size,
                         on_complete=lambda: say("  sink   <- complete"),
                         on_error=lambda e: say(f"  sink   <- error: {e}"))
        self._say = say

    def request(self, n: int) -> None:
        self._say(f"  sink   -> request({n})")
        super().request(n)


class _ManualSink(Subscriber[int]):
    """A sink that requests only when told to, so a hot source has to buffer."""

    def __init__(self, say: Callable[[str], object]) -> None:
        self._say = say
        self.subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription  # keep it, and request nothing yet

    def on_next(self, value: int) -> None:
        self._say(f"  slow   <- {value}")

    def on_error(self, error: BaseException) -> None:
        self._say(f"  slow   <- error: {error}")

    def on_complete(self) -> None:
        self._say("  slow   <- complete")


def run(say: Callable[[str], object] = print) -> None:
    """Print two short scenarios that show demand flowing from the sink to the source."""
    say("1. A cold pipeline: from_iterable(1..8) -> map(x*x) -> filter(odd), sink requests 4 at a time.")
    say("   [stage] lines are the trace operator; requests travel up, elements travel down.")
    query = (
        from_iterable(range(1, 9))
        .trace("source", lambda line: say("  " + line))
        .map(lambda x: x * x)
        .filter(lambda x: x % 2 == 1)
        .trace("filter", lambda line: say("  " + line))
    )
    query.run(_TracingSink(say, batch_size=4))
    say("   The filter drops even squares and asks the source for one more each time: request(1).")
    say("")

    say("2. A hot subject cannot slow its producer: each subscriber has a bounded buffer (here 3).")
    subject = SimpleSubject[int](buffer_size=3, overflow=OverflowPolicy.ERROR, name="sensor")
    slow = _ManualSink(say)
    subject.subscribe(slow)
    for value in range(1, 4):
        say(f"  push   -> {value} (buffered: the slow sink has no demand)")
        subject.on_next(value)
    assert slow.subscription is not None
    say("  slow   -> request(2)")
    slow.subscription.request(2)
    for value in range(4, 7):
        say(f"  push   -> {value}")
        subject.on_next(value)
    say("   The fourth element without demand overflowed the buffer: the subscriber got "
        f"{BufferOverflowError.__name__} instead of silently losing data.")
