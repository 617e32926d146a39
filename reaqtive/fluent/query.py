"""Queries are data: an immutable expression of operator names and arguments, built with a fluent API.

>>> from reaqtive import from_iterable
>>> query = from_iterable(range(10)).map(lambda x: x * 2).filter(lambda x: x % 3 == 0)
>>> query.op, len(query.args)
('filter', 2)

Building a query runs nothing. ``query.subscribe(subscriber)`` *binds* the expression: it looks each operator
name up in the registry (:mod:`reaqtive.core.binding`) and creates the running operators, still without starting them.
:meth:`Query.run` binds and starts in one call. Because an expression holds names and plain arguments rather than
objects with behaviour, the engine can persist it and re-create the same operators after a restart.

:class:`Query` is the expression node (:class:`reaqtive.core.expression.Expression`) with the fluent methods: one
typed line each (:mod:`reaqtive.fluent`), delegating to the operator's builder in its module under
:mod:`reaqtive.operators`, where its arguments, stage, state and docstring live. ``query.pipe(call)`` chains any
operator call, a user package's too (``query.pipe(clamp(0, 10))``). A test checks the facade against the
registry: every registered operator has its method, every method an operator.

Arguments are validated when the query is built, so a bad argument fails where it is written; binding checks
them again (the operator's argument record, :mod:`reaqtive.core.arguments`), for expressions that did not come
through the builders. How deep a query may be: :mod:`reaqtive.core.expression`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.core.binding import OperatorSpec, add_registration_hook
from reaqtive.core.expression import (
    DEFAULT_INSTANCE_ID,
    RESERVED_FRAMES,
    Expression,
    GroupedStreamNode,
    InnerStreamNode,
    frame_budget,
    use_facade,
)
from reaqtive.core.subscribable import Subscribable
from reaqtive.fluent._base import LazyModule
from reaqtive.fluent.aggregates import AggregateMixin
from reaqtive.fluent.buffers import BufferMixin
from reaqtive.fluent.combine import CombineMixin
from reaqtive.fluent.higher_order import HigherOrderMixin
from reaqtive.fluent.sources import SourceConstructors
from reaqtive.fluent.take_skip import TakeSkipMixin
from reaqtive.fluent.time import TimeMixin
from reaqtive.fluent.transform import TransformMixin

if TYPE_CHECKING:
    from reaqtive.operators import plan
    from reaqtive.operators.plan import QueryPlan
else:
    plan = LazyModule("plan")  # loaded on first use, as the operator modules are

__all__ = [
    "DEFAULT_INSTANCE_ID",
    "RESERVED_FRAMES",
    "GroupedStream",
    "InnerStream",
    "Query",
    "combine_latest",
    "empty",
    "from_iterable",
    "frame_budget",
    "interval",
    "merge",
    "never",
    "return_value",
    "throw",
    "timer",
]

T = TypeVar("T")
R = TypeVar("R")


class Query(
    SourceConstructors,
    TransformMixin[T],
    TakeSkipMixin[T],
    AggregateMixin[T],
    CombineMixin[T],
    BufferMixin[T],
    TimeMixin[T],
    HigherOrderMixin[T],
    Expression[T],
    Generic[T],
):
    """An immutable query expression node with the fluent methods: an operator name and its arguments.

    Arguments are constants, functions, or other queries (the sources). Two queries built the same way from
    the same objects are equal. The fluent methods come from one mixin per operator family
    (:mod:`reaqtive.fluent`), each a typed line delegating to the operator's builder.
    """

    __slots__ = ()

    def explain(self) -> QueryPlan:
        """How this query would bind now: each stage's path (keyed, fused, general) and, for a general one, why
        (:mod:`reaqtive.operators.plan`). ``str(plan)`` is the text, ``plan.to_dict()`` the structure.

        >>> from reaqtive import from_iterable
        >>> counts = from_iterable([1, 2, 3]).group_by(lambda x: x % 2).flat_map(lambda g: g.count())
        >>> print(counts.explain())
        plan (keyed form 3), from the result to the sources:
          group_by+flat_map: keyed [one stage, a record per key: g.count]
          from_iterable: general
        """
        return plan.explain(self)


class InnerStream(InnerStreamNode[T], Query[T], Generic[T]):
    """A query over an inner subject of a higher-order operator: a window of ``window``, or (as
    :class:`GroupedStream`) a group of ``group_by`` (see :class:`~reaqtive.core.expression.InnerStreamNode`)."""

    __slots__ = ()


class GroupedStream(GroupedStreamNode[T], InnerStream[T], Generic[T]):
    """One group of ``group_by``: a query over the group's elements, with its ``key``."""

    __slots__ = ()


use_facade(Query, InnerStream, GroupedStream)


from_iterable = Query.from_iterable
return_value = Query.return_value
empty = Query.empty
never = Query.never
throw = Query.throw
timer = Query.timer
interval = Query.interval


def merge(*sources: Subscribable[T]) -> Query[T]:
    """The elements of all ``sources``, interleaved as they arrive (see :meth:`Query.merge`)."""
    if not sources:
        raise TypeError("merge needs at least one source")
    first, *others = sources
    return Query.merge(Query.from_subscribable(first) if not isinstance(first, Query) else first, *others)


def combine_latest(*sources_and_selector: Any, selector: Callable[..., Any] | None = None) -> Query[Any]:
    """The latest elements of every source, combined whenever one emits (see :meth:`Query.combine_latest`)."""
    if not sources_and_selector:
        raise TypeError("combine_latest needs at least two sources")
    first, *rest = sources_and_selector
    query = first if isinstance(first, Query) else Query.from_subscribable(first)
    return query.combine_latest(*rest, selector=selector)


def _adopt_builder_docstring(spec: OperatorSpec) -> None:
    """Give the fluent method of ``spec`` the docstring of its operator's builder: the one text of an operator
    (example, state, demand) lives in its module, ``help(Query.take)`` shows it once the module is loaded (on the
    method's first use, or by :func:`~reaqtive.core.binding.load_builtin_operators`)."""
    method = getattr(Query, spec.method, None) if spec.method else None
    if method is not None and spec.builder is not None and spec.builder.__doc__:
        method.__doc__ = spec.builder.__doc__


add_registration_hook(_adopt_builder_docstring)
