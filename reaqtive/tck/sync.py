"""Thread-safe synchronisation primitives the kit's subscribers and publishers are built from, and deadlines.

Each one reports what went wrong to the :class:`TestEnvironment` rather than raising on the signalling thread;
the waits (``expect_*``) run on the test thread and wake as soon as the awaited signal arrives.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import TYPE_CHECKING, Generic, TypeVar

from reaqtive.tck.failures import ExpectedClosedLatchError, ExpectedOpenLatchError, SubscriberBufferOverflowError

if TYPE_CHECKING:  # annotations only: env imports the subscribers, which import this module
    from reaqtive.tck.env import TestEnvironment

__all__ = [
    "BUFFER_SIZE",
    "END_OF_STREAM",
    "EndOfStream",
    "Latch",
    "Promise",
    "Receptacle",
    "deadline_after",
    "remaining_ms",
]

T = TypeVar("T")

BUFFER_SIZE = 32
"""How many unconsumed ``on_next`` signals a kit subscriber holds (2 x the JVM kit's ``TEST_BUFFER_SIZE``)."""


def deadline_after(millis: float) -> float:
    """A ``time.monotonic()`` deadline ``millis`` from now."""
    return time.monotonic() + millis / 1000


def remaining_ms(deadline: float) -> float:
    """Milliseconds left until ``deadline`` (never negative)."""
    return max(0.0, (deadline - time.monotonic()) * 1000)


class EndOfStream:
    """The marker a :class:`Receptacle` queues for ``on_complete``."""

    _instance: EndOfStream | None = None

    def __new__(cls) -> EndOfStream:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "END_OF_STREAM"


END_OF_STREAM = EndOfStream()


class Latch:
    """A one-shot gate: open until ``close()``; ``reopen()`` starts over."""

    def __init__(self, env: TestEnvironment) -> None:
        self._env = env
        self._event = threading.Event()

    def reopen(self) -> None:
        self._event = threading.Event()  # one attribute write: readers see the old or the new event

    def close(self) -> None:
        self._event.set()

    def is_closed(self) -> bool:
        return self._event.is_set()

    def assert_open(self, message: str) -> None:
        """Record a failure if the latch is already closed (the awaited signal came twice, for example)."""
        if self.is_closed():
            self._env.flop_error(ExpectedOpenLatchError(message))

    def assert_closed(self, message: str) -> None:
        """Record a failure if the latch is still open (a signal came before the one it must follow)."""
        if not self.is_closed():
            self._env.flop_error(ExpectedClosedLatchError(message))

    def expect_close(self, message: str, timeout_ms: int | None = None) -> bool:
        """Wait for the latch to close; record ``"<message> within <t> ms"`` if it does not."""
        timeout = self._env.default_timeout_ms if timeout_ms is None else timeout_ms
        if self._event.wait(timeout / 1000):
            return True
        self._env.flop(f"{message} within {timeout} ms")
        return False


class _Unset:
    pass


_UNSET = _Unset()


class Promise(Generic[T]):
    """A value set at most once; waiting for it wakes as soon as it is set."""

    def __init__(self, env: TestEnvironment) -> None:
        self._env = env
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._value: T | _Unset = _UNSET

    def complete(self, value: T) -> None:
        """Set the value; a second completion is recorded as a failure (and ignored)."""
        with self._lock:
            if isinstance(self._value, _Unset):
                self._value = value
                self._done.set()
                return
            present = self._value
        self._env.flop(
            f"Cannot complete a promise more than once! Present value: {present!r}, attempted to set: {value!r}"
        )

    def is_completed(self) -> bool:
        return self._done.is_set()

    def value(self) -> T:
        """The value; asking before it is set fails the test (the JVM kit returns null here and fails later)."""
        current = self._value
        if isinstance(current, _Unset):
            self._env.flop_and_fail("Cannot access promise value before completion")
        return current

    def expect_completion(self, timeout_ms: int, message: str) -> bool:
        """Wait for the value; record ``"<message> within <t> ms"`` if it does not come."""
        if self._done.wait(timeout_ms / 1000):
            return True
        self._env.flop(f"{message} within {timeout_ms} ms")
        return False


class Receptacle(Generic[T]):
    """The channel between a signalling thread and the test thread: elements, then at most one end-of-stream."""

    def __init__(self, env: TestEnvironment, capacity: int = BUFFER_SIZE) -> None:
        self._env = env
        self.capacity = capacity
        self._queue: queue.Queue[T | EndOfStream] = queue.Queue(maxsize=capacity + 1)  # + room for the end
        self._completed = Latch(env)

    def add(self, value: T) -> None:
        """Queue an element; past ``capacity`` unconsumed elements, record *and* raise an overflow."""
        if self._completed.is_closed():
            self._env.flop(f"Unexpected element {value!r} received after stream completed")
        if self._queue.qsize() >= self.capacity:
            # Raising alone would be lost on an executor thread (JVM kit defect): record it too.
            error = SubscriberBufferOverflowError(
                f"Received more than bufferSize ({self.capacity}) onNext signals. "
                "The Publisher probably emited more signals than expected!"
            )
            self._env.flop_error(error)
            raise error
        self._queue.put_nowait(value)

    def complete(self) -> None:
        """Queue end-of-stream; a second completion is recorded as a failure."""
        self._completed.assert_open("Unexpected additional complete signal received!")
        self._completed.close()
        with contextlib.suppress(queue.Full):  # full only after an overflow, which is already recorded
            self._queue.put_nowait(END_OF_STREAM)

    def is_completed(self) -> bool:
        return self._completed.is_closed()

    def _poll(self, timeout_ms: float) -> T | EndOfStream | None:
        try:
            if timeout_ms > 0:
                return self._queue.get(timeout=timeout_ms / 1000)
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def next(self, timeout_ms: float, message: str) -> T:
        """The next element within the timeout; a timeout or end-of-stream fails the test now."""
        value = self._poll(timeout_ms)
        if value is None:
            self._env.flop_and_fail(f"{message} within {_fmt(timeout_ms)} ms")
        if isinstance(value, EndOfStream):
            self._env.flop_and_fail("Expected element but got end-of-stream")
        return value

    def next_or_end_of_stream(self, timeout_ms: float, message: str) -> T | EndOfStream | None:
        """The next element or ``END_OF_STREAM``; a timeout is recorded and returns ``None``."""
        value = self._poll(timeout_ms)
        if value is None:
            self._env.flop(f"{message} within {_fmt(timeout_ms)} ms")
        return value

    def next_n(self, elements: int, timeout_ms: float, message: str) -> list[T]:
        """``elements`` elements, all within one deadline."""
        deadline = deadline_after(timeout_ms)
        result: list[T] = []
        for _ in range(elements):
            value = self._poll(remaining_ms(deadline))
            if value is None:
                self._env.flop_and_fail(
                    f"{message} within {_fmt(timeout_ms)} ms (received {len(result)} of {elements})"
                )
            if isinstance(value, EndOfStream):
                self._env.flop_and_fail("Expected element but got end-of-stream")
            result.append(value)
        return result

    def expect_completion(self, timeout_ms: float, message: str) -> None:
        """End-of-stream within the timeout; a timeout or an element is recorded."""
        value = self._poll(timeout_ms)
        if value is None:
            self._env.flop(f"{message} within {_fmt(timeout_ms)} ms")
        elif not isinstance(value, EndOfStream):
            self._env.flop(f"Expected end-of-stream but got element [{value!r}]")

    def expect_none(self, within_ms: float, error_message_prefix: str) -> None:
        """Watch for ``within_ms``: any element or end-of-stream arriving is recorded as a failure.

        The watch is a blocking ``get``, so a violation ends it at once; only a passing watch lasts the full time.
        """
        value = self._poll(within_ms)
        if value is None:
            return
        if isinstance(value, EndOfStream):
            self._env.flop("Expected no element but got end-of-stream")
        else:
            self._env.flop(f"{error_message_prefix} [{value!r}]")


def _fmt(millis: float) -> str:
    return f"{millis:.0f}"
