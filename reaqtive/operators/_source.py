"""The base of sources that produce on demand (``from_iterable``, ``return_value``, ``empty``, ...).

One drain loop serves both ways a query runs:

* **standalone** (the operator context has no scheduler): the loop runs on the caller's thread, inside
  ``start()`` and ``request()``;
* **hosted** (the context has a scheduler, as in the engine and under the virtual-time test scheduler): the
  loop runs in a yieldable task on that scheduler, so events are produced on the engine's thread, in its order,
  and a pause for a checkpoint interrupts a long drain within one batch. Under the test scheduler the task
  runs one tick after it was scheduled, like every immediate action.

Either way, a ``request`` that arrives while the loop runs (typically from inside ``on_next``) only adds to the
demand and the running loop picks it up: the stack depth stays bounded (rule 3.3) and signals never overlap
(rule 1.3).

**The first drain.** A ``request`` starts a drain (hosted: the next instant) unless one runs or is pending, and
a drain runs until the demand is used up, so between two instants a drain is pending exactly when there is
demand it can serve. The start keeps to that rule: it drains when the downstream asked for something in
``on_subscribe`` (a recovered downstream asks again for what it had outstanding), or when the source has
something to signal without demand (:meth:`PullSource.drain_on_start`: a completion, an error, a look for the end
of an iterable). A recovered source therefore does not start a drain that the original did not have pending,
which would serve a request of the next instant one instant early.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from typing import Final, Generic, TypeVar

from reaqtive.core.context import OperatorContext
from reaqtive.core.scheduler_interface import Scheduler, YieldToken
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand, non_positive_request_error
from reaqtive.scheduler import DEFAULT_BATCH_SIZE, YieldableActionTask
from reaqtive.state import StatefulOperatorBase

__all__ = ["EMIT_BATCH", "PullSource"]

T = TypeVar("T")

EMIT_BATCH: Final = DEFAULT_BATCH_SIZE
"""Elements a hosted source emits between two looks at the yield token."""

TERMINATED: Final = -1
"""What :meth:`PullSource.emit` returns once it signalled ``on_complete``/``on_error``."""


class PullSource(StatefulOperatorBase[T], Generic[T]):
    """A source whose production follows demand. Subclasses implement :meth:`emit`."""

    __slots__ = ("_bad_request", "_demand", "_lock", "_missed", "_scheduler", "_wip")

    def __init__(self, downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._demand = 0
        self._bad_request: int | None = None
        self._lock = threading.Lock()
        self._scheduler: Scheduler | None = None
        # Held "busy" until on_start: requests made inside on_subscribe only add demand.
        self._wip = True
        self._missed = False

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler if context.has_scheduler else None

    def on_start(self) -> None:
        with self._lock:
            self._wip = False
            idle = not self._demand and self._bad_request is None and not self.drain_on_start()
        if not idle:
            self._work()

    def drain_on_start(self) -> bool:
        """Whether the start drains although the downstream asked for nothing (see the module; called under the
        lock). ``True`` by default: the source may have a terminal signal to send, which needs no demand."""
        return True

    def request(self, n: int) -> None:
        with self._lock:
            if n <= 0:
                if self._bad_request is None:
                    self._bad_request = n
            else:
                self._demand = add_demand(self._demand, n)
        self._work()

    @abstractmethod
    def emit(self, demand: int, token: YieldToken) -> int:
        """Emit up to ``demand`` elements (``LONG_MAX``: as many as there are) to ``self._downstream``.

        Return how many were emitted, or :data:`TERMINATED` after signalling ``on_complete``/``on_error``.
        Look at ``token`` at least every :data:`EMIT_BATCH` elements and return early when a yield is requested.
        Terminal signals need no demand: signal completion as soon as the end is known.
        """

    def _work(self) -> None:
        with self._lock:
            if self._wip:
                self._missed = True
                return
            self._wip = True
        scheduler = self._scheduler
        if scheduler is None:
            self._drain(YieldToken.NONE)
        else:
            scheduler.schedule(YieldableActionTask(self._drain))

    def _drain(self, token: YieldToken) -> bool:
        """The drain loop. Returns ``True`` when it is done for now, ``False`` to run again (it yielded)."""
        try:
            while True:
                with self._lock:
                    self._missed = False
                    demand = self._demand
                    bad_request = self._bad_request
                if self._disposed:
                    return True
                if bad_request is not None:
                    self._signal_error(non_positive_request_error(bad_request))
                    return True
                emitted = self.emit(demand, token)
                if emitted == TERMINATED:
                    return True
                with self._lock:
                    if demand != LONG_MAX:
                        self._demand -= emitted
                    if token.is_yield_requested and (self._missed or self._demand):
                        return False  # still busy: the scheduler runs us again after the pause
                    if not self._missed:
                        self._wip = False
                        return True
        except BaseException:
            # The subscriber raised out of a signal (it broke rule 2.13): the subscription cannot go on.
            self.dispose()
            raise
