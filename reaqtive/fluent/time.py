"""Time and errors: ``delay_subscription``, ``sample``, ``retry``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.core.subscribable import Subscribable
from reaqtive.fluent._base import Fluent, LazyModule

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query

if TYPE_CHECKING:  # the operator modules, typed; at run time each is imported on first use
    from reaqtive.operators import delay_subscription, retry, sample
else:
    delay_subscription = LazyModule("delay_subscription")
    retry = LazyModule("retry")
    sample = LazyModule("sample")

__all__ = ["TimeMixin"]

T = TypeVar("T")


class TimeMixin(Fluent[T], Generic[T]):
    """The time family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()

    def delay_subscription(self, due: timedelta | datetime) -> Query[T]:
        return self.pipe(delay_subscription.delay_subscription(due))

    def sample(self, sampler: Subscribable[Any] | timedelta) -> Query[T]:
        return self.pipe(sample.sample(sampler))

    def retry(self, count: int | None = None) -> Query[T]:
        return self.pipe(retry.retry(count))
