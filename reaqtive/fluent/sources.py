"""Sources: queries that produce elements themselves (``from_iterable``, ``return_value``, ``timer``, ...)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from reaqtive.core.expression import Expression, source_node
from reaqtive.core.subscribable import Subscribable
from reaqtive.fluent._base import LazyModule

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query

if TYPE_CHECKING:  # the operator modules, typed; at run time each is imported on first use
    from reaqtive.operators import fixed_sources, from_iterable, timer
else:
    fixed_sources = LazyModule("fixed_sources")
    from_iterable = LazyModule("from_iterable")
    timer = LazyModule("timer")

__all__ = ["SourceConstructors"]

R = TypeVar("R")


def _query(node: Expression[R]) -> Query[R]:
    """``node``, made below the facade, typed as the facade's node: the core and the operators are typed with the
    node class (they sit below this layer), and the core makes every node a ``Query`` once the facade is loaded
    (:func:`~reaqtive.core.expression.use_facade`), as it is whenever these constructors run."""
    return cast("Query[R]", node)


def _subscribable_node(source: Subscribable[R]) -> Query[R]:
    """A ``subscribable`` node (an internal operator: :mod:`reaqtive.core.expression`) over ``source``."""
    if not isinstance(source, Subscribable):
        raise TypeError(f"from_subscribable needs a Subscribable, got {type(source).__name__}")
    return _query(source_node("subscribable", (source,)))


def _stream_node(uri: str) -> Query[Any]:
    """A ``stream`` node (an internal operator, bound by the engine: :mod:`reaqtive.engine.readers`)."""
    if not isinstance(uri, str) or not uri:
        raise TypeError(f"stream needs a non-empty URI string, got {uri!r}")
    return _query(source_node("stream", (uri,)))


class SourceConstructors:
    """Static constructors of source queries (also exported as functions: ``reaqtive.from_iterable``)."""

    __slots__ = ()

    @staticmethod
    def from_iterable(iterable: Iterable[R]) -> Query[R]:
        return _query(from_iterable.from_iterable(iterable))

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
        return _query(fixed_sources.return_value(value))

    @staticmethod
    def empty() -> Query[Any]:
        return _query(fixed_sources.empty())

    @staticmethod
    def never() -> Query[Any]:
        return _query(fixed_sources.never())

    @staticmethod
    def throw(error: BaseException) -> Query[Any]:
        return _query(fixed_sources.throw(error))

    @staticmethod
    def timer(due: timedelta | datetime, period: timedelta | None = None) -> Query[int]:
        return _query(timer.timer(due, period))

    @staticmethod
    def interval(period: timedelta) -> Query[int]:
        return _query(timer.interval(period))
