"""The scheduler: worker threads, hierarchical pausable logical schedulers, tasks, timers and clocks.

* :class:`PhysicalScheduler`: a fixed pool of worker threads.
* :class:`LogicalScheduler`: a task group on it (implements
  :class:`reaqtive.core.scheduler_interface.PausableScheduler`); children pause, resume and dispose with their
  parent.
* Tasks: :class:`ActionTask` (priority 1), :class:`YieldableActionTask` (priority 1, cooperative),
  :class:`ItemProcessingTask` (priority 2, drains an :class:`ItemProcessor` such as :class:`QueueProcessor`).
* :class:`VirtualTimeScheduler`: deterministic, single-threaded virtual time (event-time hosts, tests).
* :class:`DueQueue`: the (due, priority, arrival) queue behind timers.
* Clocks: :class:`WallClock` (follows freezegun) and :class:`VirtualClock`.

This package knows nothing of operators: it depends on :mod:`reaqtive.core.scheduler_interface`, the standard
library and sortedcontainers only. See ``docs/scheduler.md``.
"""

from reaqtive.core.scheduler_interface import (
    PausableScheduler,
    Scheduler,
    SchedulerTask,
    YieldableSchedulerTask,
    YieldToken,
)
from reaqtive.scheduler.clock import EPOCH, Clock, VirtualClock, WallClock, to_utc
from reaqtive.scheduler.logical import LogicalScheduler, PauseAwaitable
from reaqtive.scheduler.physical import PhysicalScheduler
from reaqtive.scheduler.status import Event, SchedulerStatus, UnhandledExceptionArgs
from reaqtive.scheduler.tasks import (
    ACTION_PRIORITY,
    DEFAULT_BATCH_SIZE,
    HARNESS_PRIORITY,
    ITEM_PROCESSING_PRIORITY,
    ActionTask,
    ItemProcessingTask,
    ItemProcessor,
    QueueProcessor,
    YieldableActionTask,
)
from reaqtive.scheduler.timers import DueQueue
from reaqtive.scheduler.virtual import VirtualTimeScheduler

__all__ = [
    # schedulers
    "PhysicalScheduler",
    "LogicalScheduler",
    "VirtualTimeScheduler",
    "PauseAwaitable",
    "SchedulerStatus",
    "UnhandledExceptionArgs",
    "Event",
    # tasks
    "ActionTask",
    "YieldableActionTask",
    "ItemProcessingTask",
    "ItemProcessor",
    "QueueProcessor",
    "HARNESS_PRIORITY",
    "ACTION_PRIORITY",
    "ITEM_PROCESSING_PRIORITY",
    "DEFAULT_BATCH_SIZE",
    # time
    "Clock",
    "WallClock",
    "VirtualClock",
    "EPOCH",
    "to_utc",
    "DueQueue",
    # the shared interfaces, re-exported for convenience
    "Scheduler",
    "PausableScheduler",
    "SchedulerTask",
    "YieldableSchedulerTask",
    "YieldToken",
]
