"""Outputs on their way to an observer function: in order, at least once, in batches, retried with backoff, never
skipped, and delivered **outside** the engine's lock.

A subscription whose observer is a function (``define_observer``) does not call it from inside the query: its
outputs go to an :class:`Outbox`. The outbox hands them on in batches of up to ``max_batch`` outputs: to the
observer's ``write_batch(outputs)`` method when it has one (:class:`BatchObserver`; the connectors' sinks do: one
fsync, one transaction, one request per batch), else one call per output. Delivery never runs under the engine's
lock, so a slow observer (a file synced to disk, a webhook answering in 50 ms) holds up neither appends nor the
processing of events:

* in manual mode, :meth:`~reaqtive.engine.Engine.process` delivers after each slice of events, once it has let go
  of the engine;
* in running mode (:meth:`~reaqtive.engine.Engine.start`, :meth:`~reaqtive.engine.Engine.serve`), each outbox has a
  **courier** thread of its own that delivers while the engine goes on; a batch takes what waits when the previous
  one is done, so batches grow as the observer slows down. An outbox holding more than ``high_water`` outputs
  makes the processing loop wait for its courier (memory stays bounded; the observer sets the pace).

If the observer raises, the batch stays first in line; the next attempt comes after a backoff that doubles each
time (``backoff``, ``2 * backoff``, ...), and after ``retries`` failed attempts in a row the outbox gives up: the
engine then stops that subscription, under its failure policy, with its undelivered outputs kept. So one failing
observer never stops the others, never loses an output, and never makes ``process()`` raise.

Outputs still waiting at a checkpoint are written to the store with it, together with how far delivery got (read
together, under the outbox's guard: a courier may deliver meanwhile), so that a restart delivers them again;
outputs produced after the checkpoint are produced again by the replay, with the same sequence numbers. An
observer therefore sees each output at least once, in order, and can drop the repeats by ``seq``; a batch that
failed is offered again whole (or cut differently, after a restart).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import Final, Protocol, runtime_checkable

from reaqtive.core.describe import error_text
from reaqtive.engine.egress import Output
from reaqtive.engine.engine_errors import EngineError

__all__ = [
    "DEFAULT_OBSERVER_BACKOFF",
    "DEFAULT_OBSERVER_BATCH",
    "DEFAULT_OBSERVER_RETRIES",
    "BatchObserver",
    "ObserverFailedError",
    "Outbox",
]

DEFAULT_OBSERVER_RETRIES: Final = 5
"""Failed attempts in a row after which an observer's subscription is stopped."""
DEFAULT_OBSERVER_BACKOFF: Final = 0.05
"""Seconds before the first retry (doubling with each further failure)."""
DEFAULT_OBSERVER_BATCH: Final = 10_000
"""Outputs handed to an observer's ``write_batch`` at most at once."""
DEFAULT_OUTBOX_HIGH_WATER: Final = 100_000
"""Outputs an outbox may hold, in running mode, before the processing loop waits for its courier."""


@runtime_checkable
class BatchObserver(Protocol):
    """An observer function that also takes outputs in batches: ``write_batch(outputs)`` gets one subscription's
    outputs in ``seq`` order, and returns once it holds all of them, or raises (the whole batch is then offered
    again: it must drop the outputs it already holds, by ``seq``, as it does after a restart)."""

    def __call__(self, output: Output) -> object: ...

    def write_batch(self, outputs: Sequence[Output]) -> object: ...


class ObserverFailedError(EngineError):
    """An observer function kept raising: its subscription was stopped with the outputs it had not received
    kept in the store. ``seq`` is the output it failed on; the cause is ``__cause__``."""

    def __init__(self, subscription: str, observer: str, seq: int, attempts: int, error: BaseException) -> None:
        super().__init__(
            f"subscription {subscription!r}: observer {observer!r} raised on output #{seq} {attempts} times in a "
            f"row ({type(error).__name__}: {error_text(error)}); the subscription was stopped and its undelivered "
            "outputs kept"
        )
        self.subscription = subscription
        self.observer = observer
        self.seq = seq
        self.attempts = attempts


GaveUp = Callable[["Outbox", ObserverFailedError], None]
"""What a courier calls when its outbox gives up (the engine stops the subscription)."""


class Outbox:
    """The outputs of one subscription waiting for its observer function (see the module).

    Threads: :meth:`add` and :meth:`restore` run on the engine's processing thread, under the engine's lock;
    :meth:`deliver` on any thread (one at a time, the others return at once), never under the engine's lock;
    :meth:`snapshot` reads ``delivered`` and the waiting outputs as one, under the guard that delivery takes
    when it moves them."""

    __slots__ = (
        "_attempts",
        "_backoff",
        "_batch",
        "_clock",
        "_closed",
        "_courier",
        "_delivering",
        "_failing_upto",
        "_function",
        "_guard",
        "_last_error",
        "_max_batch",
        "_newest",
        "_next_attempt",
        "_nudged",
        "_retries",
        "_singles_upto",
        "delivered",
        "observer",
        "pending",
        "subscription",
    )

    def __init__(
        self,
        subscription: str,
        observer: str,
        function: Callable[[Output], object],
        *,
        retries: int = DEFAULT_OBSERVER_RETRIES,
        backoff: float = DEFAULT_OBSERVER_BACKOFF,
        delivered: int = -1,
        max_batch: int = DEFAULT_OBSERVER_BATCH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.subscription = subscription
        self.observer = observer
        self._function = function
        batch = getattr(function, "write_batch", None)
        self._batch: Callable[[Sequence[Output]], object] | None = batch if callable(batch) else None
        self._retries = retries
        self._backoff = backoff
        self._max_batch = max_batch
        self._clock = clock
        self.pending: deque[Output] = deque()
        self.delivered = delivered
        """The highest sequence number the observer received (``-1``: none)."""
        self._newest = delivered
        self._attempts = 0
        self._failing_upto = -1  # the last output the failures in a row may be on (a failed batch: its last)
        self._next_attempt = 0.0
        self._last_error: BaseException | None = None
        self._singles_upto = -1  # the last output of a batch that failed: up to it, one output at a time
        # Delivery's moves of (pending, delivered) against snapshots; notified when outputs leave or delivery ends.
        self._guard = threading.Condition()
        self._delivering = threading.Lock()  # one deliverer at a time: the order of outputs
        self._closed = False
        self._nudged = threading.Event()
        self._courier: threading.Thread | None = None

    # -- the producing side (the engine's processing thread) ----------------------------------------------------

    def add(self, output: Output) -> None:
        """Queue an output; one the outbox already had (replayed after a restart) is not queued twice."""
        if output.seq > self._newest:
            self._newest = output.seq
            self.pending.append(output)  # a deque's append is atomic: a courier may pop the left end meanwhile

    def restore(self, outputs: Iterable[Output]) -> None:
        """Outputs a checkpoint stored undelivered (after a restart), in sequence order."""
        for output in outputs:
            if output.seq > self.delivered:
                self.add(output)

    @property
    def waiting(self) -> bool:
        """Whether outputs wait for delivery."""
        return bool(self.pending)

    def snapshot(self) -> tuple[int, list[Output]]:
        """How far delivery got and the outputs still waiting, as one (a checkpoint stores both)."""
        with self._guard:
            return self.delivered, list(self.pending)

    # -- delivery (any thread, outside the engine's lock) -----------------------------------------------------

    def deliver(self) -> ObserverFailedError | None:
        """Hand the waiting outputs to the observer, in order and in batches, until it raises or none is left
        (unless a backoff after a failure is still running, or another thread delivers now). Returns the error
        when the outbox gives up."""
        if not self.pending or not self._delivering.acquire(blocking=False):
            return None
        try:
            pending = self.pending
            while pending and not self._closed:
                if self._attempts and self._clock() < self._next_attempt:
                    return None
                batch = list(islice(pending, self._max_batch))  # one C call: atomic against add()
                try:
                    self._write(batch)
                except Exception as error:
                    return self._failed(pending[0], error)
                self._attempts = 0
            return None
        finally:
            self._delivering.release()

    def _write(self, batch: list[Output]) -> None:
        """Give ``batch`` to the observer; what it took leaves the outbox (all of it, or up to the output that
        raised, which then propagates). After a batch failed, its outputs are offered one at a time: those
        before the one that fails get through, and the failure names that one."""
        if self._batch is not None and len(batch) > 1 and batch[0].seq > self._singles_upto:
            try:
                self._batch(batch)
            except Exception:
                self._singles_upto = self._failing_upto = batch[-1].seq
                raise
            self._taken(len(batch), batch[-1].seq)
            return
        function = self._function
        for output in batch:
            try:
                function(output)
            except Exception:
                self._failing_upto = output.seq
                raise
            self._taken(1, output.seq)

    def _taken(self, count: int, last_seq: int) -> None:
        with self._guard:
            popleft = self.pending.popleft
            for _ in range(count):
                popleft()
            self.delivered = last_seq
            if last_seq >= self._failing_upto:  # the output that failed got through: a new row starts
                self._attempts = 0
            self._guard.notify_all()

    def _failed(self, output: Output, error: Exception) -> ObserverFailedError | None:
        self._attempts += 1
        self._last_error = error
        if self._attempts >= self._retries:
            failure = ObserverFailedError(self.subscription, self.observer, output.seq, self._attempts, error)
            failure.__cause__ = error
            return failure
        self._next_attempt = self._clock() + self._backoff * (2 ** (self._attempts - 1))
        return None

    @property
    def attempts(self) -> int:
        """Failed attempts in a row on the first waiting output."""
        return self._attempts

    # -- the courier (running mode) ---------------------------------------------------------------------------

    def start_courier(self, gave_up: GaveUp) -> None:
        """Deliver on a thread of this outbox's own from now on, woken by :meth:`nudge`; ``gave_up`` is called
        (on that thread) when the observer kept failing. A no-op while one runs."""
        if self._closed or (self._courier is not None and self._courier.is_alive()):
            return
        self._courier = threading.Thread(target=self._carry, args=(gave_up,), daemon=True,
                                         name=f"reaqtive-courier:{self.subscription}")
        self._courier.start()

    def nudge(self) -> None:
        """Outputs were added: wake the courier (cheap when it is awake already)."""
        if not self._nudged.is_set():
            self._nudged.set()

    def _carry(self, gave_up: GaveUp) -> None:
        nudged = self._nudged
        me = threading.current_thread()
        try:
            while self._courier is me and not self._closed:
                wait = None
                if self._attempts and self.pending:  # in a backoff: wake when it ends, or sooner if nudged
                    wait = max(self._next_attempt - self._clock(), 0.0)
                nudged.wait(wait)
                nudged.clear()  # before delivering: an add after this point nudges again
                failure = self.deliver()
                if failure is not None:
                    self._closed = True
                    gave_up(self, failure)
                    return
        finally:
            with self._guard:
                self._guard.notify_all()  # a wait_below() stops waiting for this courier

    def wait_below(self, limit: int, timeout: float | None = None) -> bool:
        """Wait until at most ``limit`` outputs wait (the courier delivers), the outbox closes or gives up, the
        observer fails, or ``timeout`` passes; returns whether it holds at most ``limit``. Without a courier it
        returns at once."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._guard:
            # Not while the observer fails: one failing observer must not hold up the other queries (its outbox
            # grows meanwhile, as it did when delivery was inline, until it gives up).
            while len(self.pending) > limit and not self._closed and not self._attempts:
                courier = self._courier
                if courier is None or not courier.is_alive():
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._nudged.set()
                self._guard.wait(remaining)
            return len(self.pending) <= limit

    def stop_courier(self, timeout: float | None = None) -> None:
        """Let the courier deliver what waits (unless the observer fails) and end; later outputs wait for
        :meth:`deliver`. ``timeout``: how long to wait for it."""
        courier, self._courier = self._courier, None
        if courier is None:
            return
        self._nudged.set()
        if courier is not threading.current_thread():
            courier.join(timeout)

    def close(self, timeout: float | None = 0.0) -> None:
        """No more delivery: the subscription stopped or was deleted, or the engine closes (a batch in flight
        ends first; ``timeout``: how long to wait for it, 0: not at all)."""
        self._closed = True
        courier, self._courier = self._courier, None
        self._nudged.set()
        with self._guard:
            self._guard.notify_all()
        if courier is not None and courier is not threading.current_thread() and timeout != 0.0:
            courier.join(timeout)

    @property
    def closed(self) -> bool:
        """Whether the outbox stopped delivering for good."""
        return self._closed


class Outboxes:
    """The engine's outboxes, one per subscription with an observer function, and whether couriers deliver them
    (running mode) or the processing thread does, between slices (manual mode)."""

    __slots__ = ("_by_uri", "_couriers_on", "_gave_up", "high_water")

    def __init__(self, gave_up: GaveUp, *, high_water: int = DEFAULT_OUTBOX_HIGH_WATER) -> None:
        self._by_uri: dict[str, Outbox] = {}
        self._couriers_on = False
        self._gave_up = gave_up
        self.high_water = high_water

    def get(self, uri: str) -> Outbox | None:
        """Subscription ``uri``'s outbox (``None``: its observer is not a function, or it does not run)."""
        return self._by_uri.get(uri)

    def values(self) -> list[Outbox]:
        """Every outbox (a copy: one C call, safe against a concurrent add or close)."""
        return list(self._by_uri.values())

    def add(self, outbox: Outbox) -> None:
        """Take ``outbox`` in (replacing, and closing, the subscription's previous one)."""
        previous = self._by_uri.get(outbox.subscription)
        if previous is not None:
            previous.close()
        self._by_uri[outbox.subscription] = outbox
        if self._couriers_on:
            outbox.start_courier(self._gave_up)

    def pop(self, uri: str) -> Outbox | None:
        """Forget ``uri``'s outbox and close it (its courier ends after the batch in flight)."""
        outbox = self._by_uri.pop(uri, None)
        if outbox is not None:
            outbox.close()
        return outbox

    def is_current(self, outbox: Outbox) -> bool:
        """Whether ``outbox`` is still its subscription's (not replaced, closed or forgotten)."""
        return self._by_uri.get(outbox.subscription) is outbox

    def snapshots(self) -> dict[str, tuple[int, list[Output]]]:
        """Per outbox, how far delivery got and what still waits, each read as one (for a checkpoint)."""
        return {uri: outbox.snapshot() for uri, outbox in self._by_uri.items()}

    def hand_on(self) -> list[tuple[Outbox, ObserverFailedError]]:
        """Outside the engine's lock: with couriers, wake those with outputs waiting (and wait for one past the
        high-water mark); without, deliver here. Returns the outboxes that gave up, with why."""
        outboxes = self.values()
        if self._couriers_on:
            for outbox in outboxes:
                if outbox.waiting:
                    outbox.nudge()
                    if len(outbox.pending) > self.high_water:
                        outbox.wait_below(self.high_water // 2)
            return []
        return [(outbox, failure) for outbox in outboxes if outbox.waiting
                for failure in (outbox.deliver(),) if failure is not None]

    def start_couriers(self) -> None:
        """Running mode: each outbox delivers on a courier thread of its own from now on."""
        self._couriers_on = True
        for outbox in self.values():
            outbox.start_courier(self._gave_up)

    def stop_couriers(self) -> list[Outbox]:
        """Back to manual mode (under the engine's lock, so that no outbox added meanwhile starts a courier): returns
        the outboxes whose couriers the caller lets deliver what waits and end (:meth:`Outbox.stop_courier`,
        outside the engine's lock)."""
        self._couriers_on = False
        return self.values()

    def close(self, timeout: float) -> None:
        """The engine closes: no more delivery (each courier ends after its batch in flight; ``timeout`` in all)."""
        self._couriers_on = False
        deadline = time.monotonic() + timeout
        for outbox in self.values():
            outbox.close(max(deadline - time.monotonic(), 0.001))
