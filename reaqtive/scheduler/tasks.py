"""Ready-made tasks: one-shot actions, yieldable (cooperative) actions, and queue draining in batches.

Priorities (a lower value runs first, FIFO among equals):

* ``0``: test-harness actions (:class:`reaqtive.testing.TestScheduler` uses it for inputs and lifecycle steps);
* ``1``: :class:`ActionTask` and :class:`YieldableActionTask` (operator work: timers, emissions);
* ``2``: :class:`ItemProcessingTask` (draining queues), so timers and actions overtake bulk draining.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final, Generic, Protocol, TypeVar, runtime_checkable

from reaqtive.core.scheduler_interface import Scheduler, YieldableSchedulerTask, YieldToken

__all__ = [
    "ACTION_PRIORITY",
    "DEFAULT_BATCH_SIZE",
    "HARNESS_PRIORITY",
    "ITEM_PROCESSING_PRIORITY",
    "ActionTask",
    "ItemProcessingTask",
    "ItemProcessor",
    "QueueProcessor",
    "YieldableActionTask",
]

T = TypeVar("T")

HARNESS_PRIORITY: Final = 0
"""Test-harness actions: they run before operator work due at the same (virtual) time."""
ACTION_PRIORITY: Final = 1
"""Action tasks and timers."""
ITEM_PROCESSING_PRIORITY: Final = 2
"""Queue draining."""
DEFAULT_BATCH_SIZE: Final = 128
"""Items an :class:`ItemProcessingTask` processes per run before it yields the worker."""

_YIELDABLE: dict[type, bool] = {}
_KINDS: dict[type, int] = {}
YIELDABLE: Final = 1
"""A :func:`task_kind` flag: the task takes a yield token."""
TOLD: Final = 2
"""A :func:`task_kind` flag: the task has an ``arrival`` slot to be told its place in line."""


def is_yieldable(task: object) -> bool:
    """Whether ``task`` takes a yield token (for the schedulers; not exported): cached per type, because ABC checks
    are slow on the hot path."""
    kind = type(task)
    flag = _YIELDABLE.get(kind)
    if flag is None:
        flag = _YIELDABLE[kind] = isinstance(task, YieldableSchedulerTask)
    return flag


def task_kind(task: object) -> int:
    """:data:`YIELDABLE` if ``task`` takes a yield token, plus :data:`TOLD` if it has an ``arrival`` slot for the
    virtual scheduler to tell it its place in line (:class:`ActionTask`, :class:`YieldableActionTask`, or any task
    that sets ``arrival``, ``None`` until told, in its constructor). For the schedulers, not exported; cached per
    type, one lookup per queued task."""
    kind = type(task)
    flags = _KINDS.get(kind)
    if flags is None:
        flags = _KINDS[kind] = (YIELDABLE if is_yieldable(task) else 0) | (TOLD if hasattr(task, "arrival") else 0)
    return flags


class ActionTask:
    """Run ``action(*args)`` once.

    >>> ActionTask(print, "hello").execute(None)  # type: ignore[arg-type]
    hello
    True

    ``args`` avoid allocating a closure per task on hot paths.
    """

    __slots__ = ("_action", "_args", "armed", "arrival", "priority")

    is_runnable: Final = True
    """Always runnable."""

    def __init__(self, action: Callable[..., object], *args: Any, priority: int = ACTION_PRIORITY,
                 armed: datetime | None = None, arrival: int | None = None) -> None:
        if not callable(action):
            raise TypeError(f"ActionTask needs a callable, got {type(action).__name__}")
        self._action = action
        self._args = args
        self.priority: int = priority
        self.armed = armed
        """When this timer was first armed, if before now: an operator re-arming a recovered timer says so, and the
        virtual scheduler puts it in line among the timers of its instant where it first stood."""
        self.arrival = arrival
        """Its place in line among the tasks armed in the same tick as it (a number below 2**32): the virtual
        scheduler tells it here each time it queues the task (other schedulers leave ``None``); an operator saves
        it beside ``armed`` and passes both back when it re-arms a recovered timer, which then goes back in line
        exactly where it stood, also behind a timer armed in the same instant (see docs/scheduler.md)."""

    @property
    def action(self) -> Callable[..., object]:
        """What the task runs (a host may look at whose it is, e.g. to fault its query when it raises)."""
        return self._action

    def execute(self, scheduler: Scheduler) -> bool:
        """Run the action; the task is then done."""
        self._action(*self._args)
        return True

    def recalculate_priority(self) -> None:
        """Nothing to recalculate."""

    def __repr__(self) -> str:
        return f"ActionTask({getattr(self._action, '__qualname__', self._action)!r}, priority={self.priority})"


class YieldableActionTask(YieldableSchedulerTask):
    """Run ``action(*args, yield_token)`` until it returns ``True`` (done).

    The action polls ``yield_token.is_yield_requested`` in its loops and returns ``False`` early when asked to
    yield (for example because the scheduler is pausing for a checkpoint); it runs again after the scheduler
    resumes, so it must keep its progress in its own state. Returning ``False`` without a yield request makes it
    run again after the work already queued (a cooperative, periodic task).
    """

    __slots__ = ("_action", "_args", "armed", "arrival", "priority")

    is_runnable: Final = True  # a constant satisfies the abstract property

    def __init__(self, action: Callable[..., bool], *args: Any, priority: int = ACTION_PRIORITY,
                 armed: datetime | None = None, arrival: int | None = None) -> None:
        if not callable(action):
            raise TypeError(f"YieldableActionTask needs a callable, got {type(action).__name__}")
        self._action = action
        self._args = args
        self.priority: int = priority
        self.armed = armed
        """When this timer was first armed, if before now: an operator re-arming a recovered timer says so, and the
        virtual scheduler puts it in line among the timers of its instant where it first stood."""
        self.arrival = arrival
        """Its place in line among the tasks armed in the same tick as it (a number below 2**32): the virtual
        scheduler tells it here each time it queues the task (other schedulers leave ``None``); an operator saves
        it beside ``armed`` and passes both back when it re-arms a recovered timer, which then goes back in line
        exactly where it stood, also behind a timer armed in the same instant (see docs/scheduler.md)."""

    @property
    def action(self) -> Callable[..., bool]:
        """What the task runs (a host may look at whose it is, e.g. to fault its query when it raises)."""
        return self._action

    def execute(self, scheduler: Scheduler, yield_token: YieldToken = YieldToken.NONE) -> bool:
        return bool(self._action(*self._args, yield_token))

    def __repr__(self) -> str:
        return f"YieldableActionTask({getattr(self._action, '__qualname__', self._action)!r})"


@runtime_checkable
class ItemProcessor(Protocol):
    """A queue that an :class:`ItemProcessingTask` drains."""

    @property
    def item_count(self) -> int:
        """Items waiting."""
        ...

    def process(self, batch_size: int, yield_token: YieldToken) -> None:
        """Process up to ``batch_size`` items; may stop early when ``yield_token`` asks to yield."""
        ...


class ItemProcessingTask(YieldableSchedulerTask):
    """Drain an :class:`ItemProcessor` one batch per run, at priority 2.

    Runnable while the processor has items. Each run processes one batch and returns ``False`` (never done):
    with items left and no yield requested the task queues again behind the work already waiting; with the
    queue empty it is parked until the producer calls ``scheduler.recalculate_priority()``; when the scheduler
    is pausing it is parked until ``resume()``. So a pause waits for at most one batch.
    """

    __slots__ = ("_batch_size", "_processor", "priority")

    def __init__(
        self,
        processor: ItemProcessor,
        batch_size: int = DEFAULT_BATCH_SIZE,
        *,
        priority: int = ITEM_PROCESSING_PRIORITY,
    ) -> None:
        if processor is None:
            raise TypeError("ItemProcessingTask needs a processor, got None")
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self._processor = processor
        self._batch_size = batch_size
        self.priority: int = priority

    @property
    def is_runnable(self) -> bool:
        return self._processor.item_count > 0

    @property
    def batch_size(self) -> int:
        """Items per run."""
        return self._batch_size

    def execute(self, scheduler: Scheduler, yield_token: YieldToken = YieldToken.NONE) -> bool:
        self._processor.process(self._batch_size, yield_token)
        return False

    def __repr__(self) -> str:
        return f"ItemProcessingTask({self._processor!r}, batch_size={self._batch_size})"


class QueueProcessor(Generic[T]):
    """A thread-safe FIFO of items handed to ``handler`` on the scheduler, in batches.

    >>> seen = []
    >>> queue = QueueProcessor(seen.append)
    >>> queue.enqueue(1); queue.enqueue(2)
    True
    False
    >>> queue.process(10, YieldToken.NONE); seen
    [1, 2]

    :meth:`enqueue` returns ``True`` when the queue was empty: the producer then calls
    ``scheduler.recalculate_priority()`` so that the parked :class:`ItemProcessingTask` runs again.
    """

    __slots__ = ("_handler", "_items", "_lock")

    def __init__(self, handler: Callable[[T], object]) -> None:
        if not callable(handler):
            raise TypeError(f"QueueProcessor needs a callable handler, got {type(handler).__name__}")
        self._handler = handler
        self._items: deque[T] = deque()
        self._lock = threading.Lock()

    @property
    def item_count(self) -> int:
        return len(self._items)

    def enqueue(self, item: T) -> bool:
        """Append ``item``; ``True`` when the queue was empty before."""
        with self._lock:
            items = self._items
            items.append(item)
            return len(items) == 1

    def process(self, batch_size: int, yield_token: YieldToken) -> None:
        """Hand up to ``batch_size`` items to the handler, in order (a batch is the unit of yielding)."""
        items = self._items
        handler = self._handler
        popleft = items.popleft
        for _ in range(min(batch_size, len(items))):
            handler(popleft())

    def __repr__(self) -> str:
        return f"<QueueProcessor items={len(self._items)}>"
