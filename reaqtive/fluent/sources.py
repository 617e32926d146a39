"""Sources: queries that produce elements themselves (``from_iterable``, ``return_value``, ``timer``, ...)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from reaqtive.core.expression import source_node
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators import empty, from_iterable, never, return_value, throw, timer

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query

__all__ = ["SourceConstructors"]

R = TypeVar("R")


def _subscribable_node(source: Subscribable[R]) -> Query[R]:
    """A ``subscribable`` node (an internal operator: :mod:`reaqtive.core.expression`) over ``source``."""
    if not isinstance(source, Subscribable):
        raise TypeError(f"from_subscribable needs a Subscribable, got {type(source).__name__}")
    return source_node("subscribable", (source,))


def _stream_node(uri: str) -> Query[Any]:
    """A ``stream`` node (an internal operator, bound by the engine: :mod:`reaqtive.engine.readers`)."""
    if not isinstance(uri, str) or not uri:
        raise TypeError(f"stream needs a non-empty URI string, got {uri!r}")
    return source_node("stream", (uri,))


class SourceConstructors:
    """Static constructors of source queries (also exported as functions: ``reaqtive.from_iterable``)."""

    __slots__ = ()

    @staticmethod
    def from_iterable(iterable: Iterable[R]) -> Query[R]:
        return from_iterable.from_iterable(iterable)

    @staticmethod
    def from_subscribable(source: Subscribable[R]) -> Query[R]:
        """Use any subscribable (a subject, a test source) as the source of a query."""
        return _subscribable_node(source)

    @staticmethod
    def stream(uri: str) -> Query[Any]:
        """The engine stream ``uri``: the persistable way for a standing query to read a stream, resolved by the
        engine when the query is bound (and again after every recovery).

        State: the sequence number of the last event read (the watermark), so that a recovered query resumes
        reading a durable stream right after it. Demand: as the engine's stream states (see ``docs/engine.md``).
        """
        return _stream_node(uri)

    @staticmethod
    def return_value(value: R) -> Query[R]:
        return return_value.return_value(value)

    @staticmethod
    def empty() -> Query[Any]:
        return empty.empty()

    @staticmethod
    def never() -> Query[Any]:
        return never.never()

    @staticmethod
    def throw(error: BaseException) -> Query[Any]:
        return throw.throw(error)

    @staticmethod
    def timer(due: timedelta | datetime, period: timedelta | None = None) -> Query[int]:
        return timer.timer(due, period)

    @staticmethod
    def interval(period: timedelta) -> Query[int]:
        return timer.interval(period)
