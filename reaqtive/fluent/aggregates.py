"""Aggregates: ``aggregate``, ``count``, ``sum``, ``first``, ``to_list``, ...

Every aggregate reduces its source to **one element**, then completes. They share one demand policy and one
way of keeping their result (``reaqtive/operators/_aggregate.py``):

* **Demand**: nothing is requested upstream until the downstream requests; then everything (``LONG_MAX``) is
  requested once, so the source runs on the unbounded fast path. The result goes downstream once it is known
  and asked for. If the source completes before anyone asked (an empty source needs no demand to complete),
  the result is **held** — the one element an aggregate ever buffers — and sent at the first request.
* **State**: ``held: bool`` [``result``], then the operator's own fields (listed per method). Saved values
  (accumulations, held results, lists, queued elements) must be state values; ``Decimal`` and ``Fraction`` are
  registered by the library, other types with ``reaqtive.state.register_state_type``.
* **Errors**: an exception from a user function becomes ``on_error`` and ends the subscription. A source without
  the element an operator needs signals ``ValueError`` (as Python's ``min([])``); ``element_at`` past the end
  signals ``IndexError``. ``None`` is never an element, so the ``_or_default`` forms take an explicit default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, overload

from reaqtive.fluent._base import derive, require_callable, require_non_negative_int
from reaqtive.subscribable import Subscribable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["AggregateMixin"]

T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")


class _NoSeed:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no seed>"


_NO_SEED: Final = _NoSeed()


def _optional_callable(value: object, op: str, name: str) -> None:
    if value is not None:
        require_callable(value, op, name)


def _require_element(value: object, op: str, name: str) -> None:
    if value is None:
        raise TypeError(f"{op}: {name} must not be None (None is never a stream element)")


class AggregateMixin(Generic[T]):
    """Operators that reduce a source to one element (see the module for their shared demand policy)."""

    __slots__ = ()

    # -- folding -----------------------------------------------------------------------------------------------

    @overload
    def aggregate(self, accumulator: Callable[[T, T], T]) -> Query[T]: ...

    @overload
    def aggregate(self, accumulator: Callable[[T, T], T], *, result_selector: Callable[[T], R]) -> Query[R]: ...

    @overload
    def aggregate(self, accumulator: Callable[[A, T], A], seed: A) -> Query[A]: ...

    @overload
    def aggregate(self, accumulator: Callable[[A, T], A], seed: A, result_selector: Callable[[A], R]) -> Query[R]: ...

    def aggregate(
        self,
        accumulator: Callable[[Any, T], Any],
        seed: object = _NO_SEED,
        result_selector: Callable[[Any], Any] | None = None,
    ) -> Query[Any]:
        """Fold the elements with ``accumulator(accumulation, element)`` and emit the final accumulation (passed
        through ``result_selector``, if given) when the source completes, as ``functools.reduce``.

        >>> from_iterable([1, 2, 3, 4]).aggregate(lambda acc, x: acc + x).run(print)  # doctest: +ELLIPSIS
        10
        <...>
        >>> from_iterable("abc").aggregate(lambda acc, x: acc + [x], [], len).run(print)  # doctest: +ELLIPSIS
        3
        <...>

        Without ``seed`` the first element starts the accumulation, and an empty source is a ``ValueError``;
        with ``seed``, an empty source gives the seed. (Reaqtive's ``Aggregate(seed, accumulator, selector)``;
        the accumulator comes first here, as in ``functools.reduce``.)
        State: ``has_value, accumulation`` (``reaqtive:aggregate``) or ``accumulation``
        (``reaqtive:aggregate+seed``). Demand: everything once asked; the result is held until demanded.
        """
        require_callable(accumulator, "aggregate", "accumulator")
        _optional_callable(result_selector, "aggregate", "result_selector")
        if seed is _NO_SEED:
            return derive(self, "aggregate", accumulator, result_selector)
        return derive(self, "aggregate", accumulator, result_selector, seed)

    def count(self, predicate: Callable[[T], object] | None = None) -> Query[int]:
        """How many elements the source had (that satisfy ``predicate``, if given), when it completes.

        >>> from_iterable("hello").count().run(print)  # doctest: +ELLIPSIS
        5
        <...>
        >>> from_iterable(range(10)).count(lambda x: x % 3 == 0).run(print)  # doctest: +ELLIPSIS
        4
        <...>

        State: ``count``. Demand: everything once asked; the result is held until demanded.
        """
        _optional_callable(predicate, "count", "predicate")
        return derive(self, "count", predicate)

    def sum(self, start: object = 0) -> Query[Any]:
        """``start`` plus every element, when the source completes, as Python's ``sum`` (empty: ``start``).

        >>> from_iterable([1, 2, 3.5]).sum().run(print)  # doctest: +ELLIPSIS
        6.5
        <...>
        >>> from datetime import timedelta
        >>> from_iterable([timedelta(seconds=1)] * 3).sum(timedelta(0)).run(print)  # doctest: +ELLIPSIS
        0:00:03
        <...>

        Works with anything that adds: ints (exact, any size), floats (plain addition), ``Decimal``,
        ``Fraction``, ``timedelta`` (with a ``timedelta`` start). An element that does not add (a ``str`` among
        numbers) becomes ``on_error``. (Reaqtive has one operator per numeric type; one suffices here.)
        State: ``total``. Demand: everything once asked; the result is held until demanded.
        """
        _require_element(start, "sum", "start")
        return derive(self, "sum", start)

    def average(self) -> Query[Any]:
        """The mean of the elements, ``sum / count`` with true division, when the source completes.

        >>> from_iterable([1, 2, 3, 4]).average().run(print)  # doctest: +ELLIPSIS
        2.5
        <...>

        ints and floats give a float; ``Decimal``, ``Fraction`` and ``timedelta`` keep their type (the first
        element starts the total). An empty source is a ``ValueError``.
        State: ``count, total``. Demand: everything once asked; the result is held until demanded.
        """
        return derive(self, "average")

    def min(self, key: Callable[[T], Any] | None = None) -> Query[T]:
        """The smallest element (by ``key``, if given) when the source completes, as Python's ``min``: of equal
        elements the first one wins.

        >>> from_iterable([3, 1, 2]).min().run(print)  # doctest: +ELLIPSIS
        1
        <...>
        >>> from_iterable(["bb", "a", "ccc"]).min(key=len).run(print)  # doctest: +ELLIPSIS
        a
        <...>

        A comparer ``cmp(a, b) -> int`` becomes a key with ``functools.cmp_to_key(cmp)``. With a key, the
        *element* is emitted (Reaqtive's ``Min(selector)`` emitted the smallest selected value: use
        ``map(selector).min()`` for that). An empty source is a ``ValueError``; elements that do not compare
        become ``on_error``.
        State: ``best`` (its key is recomputed after a restart). Demand: everything once asked; the result is
        held until demanded.
        """
        _optional_callable(key, "min", "key")
        return derive(self, "min", key)

    def max(self, key: Callable[[T], Any] | None = None) -> Query[T]:
        """The largest element (by ``key``, if given) when the source completes, as Python's ``max``: of equal
        elements the first one wins.

        >>> from_iterable([3, 1, 2]).max().run(print)  # doctest: +ELLIPSIS
        3
        <...>

        As :meth:`min` otherwise. State: ``best``. Demand: everything once asked; the result is held until
        demanded.
        """
        _optional_callable(key, "max", "key")
        return derive(self, "max", key)

    def to_list(self) -> Query[list[T]]:
        """All the elements as one list, when the source completes.

        >>> from_iterable(range(3)).to_list().run(print)  # doctest: +ELLIPSIS
        [0, 1, 2]
        <...>

        The host setting ``MAX_LIST_SIZE`` (``reaqtive.operators.settings``) bounds the list: one element more
        is a ``LimitExceededError``. State: ``items``. Demand: everything once asked; the list is held until
        demanded.
        """
        return derive(self, "to_list")

    # -- quantifiers: decided by one element -------------------------------------------------------------------

    def any(self, predicate: Callable[[T], object] | None = None) -> Query[bool]:
        """``True`` as soon as an element (satisfying ``predicate``, if given) arrives, then the source is
        cancelled; ``False`` if the source completes without one.

        >>> from_iterable(range(10)).any(lambda x: x > 5).run(print)  # doctest: +ELLIPSIS
        True
        <...>

        State: none of its own. Demand: everything once asked (the source is cancelled at the answer).
        """
        _optional_callable(predicate, "any", "predicate")
        return derive(self, "any", predicate)

    def all(self, predicate: Callable[[T], object]) -> Query[bool]:
        """``False`` as soon as an element does not satisfy ``predicate``; ``True`` if the source completes
        (an empty source: ``True``, as Python's ``all``).

        >>> from_iterable([2, 4, 5]).all(lambda x: x % 2 == 0).run(print)  # doctest: +ELLIPSIS
        False
        <...>

        State: none of its own. Demand: everything once asked (the source is cancelled at the answer).
        """
        require_callable(predicate, "all", "predicate")
        return derive(self, "all", predicate)

    def contains(self, value: object) -> Query[bool]:
        """``True`` as soon as an element equal (``==``) to ``value`` arrives; ``False`` if the source completes
        without one.

        >>> from_iterable("abc").contains("b").run(print)  # doctest: +ELLIPSIS
        True
        <...>

        (Reaqtive's comparer overload: ``any(lambda x: same(x, value))``.) State: none of its own. Demand:
        everything once asked (the source is cancelled at the answer).
        """
        _require_element(value, "contains", "value")
        return derive(self, "contains", value)

    def is_empty(self) -> Query[bool]:
        """``False`` as soon as an element arrives; ``True`` if the source completes without one.

        >>> from_iterable([]).is_empty().run(print)  # doctest: +ELLIPSIS
        True
        <...>

        (Reaqtive composes ``Any().Select(not)``; here it is one stage, ``reaqtive:is_empty``.) State: none of
        its own. Demand: everything once asked (the source is cancelled at the answer).
        """
        return derive(self, "is_empty")

    # -- picking one element -----------------------------------------------------------------------------------

    def first(self, predicate: Callable[[T], object] | None = None) -> Query[T]:
        """The first element (satisfying ``predicate``, if given), at once; then the source is cancelled. None
        found is a ``ValueError``.

        >>> from_iterable([5, 6, 7]).first(lambda x: x % 2 == 0).run(print)  # doctest: +ELLIPSIS
        6
        <...>

        State: none of its own (``reaqtive:first``). Demand: everything once asked.
        """
        _optional_callable(predicate, "first", "predicate")
        return derive(self, "first", predicate)

    def first_or_default(self, default: T, predicate: Callable[[T], object] | None = None) -> Query[T]:
        """As :meth:`first`, but ``default`` when none is found.

        >>> from_iterable([]).first_or_default(-1).run(print)  # doctest: +ELLIPSIS
        -1
        <...>

        State: none of its own (``reaqtive:first``). Demand: everything once asked; held until demanded.
        """
        _require_element(default, "first_or_default", "default")
        _optional_callable(predicate, "first_or_default", "predicate")
        return derive(self, "first_or_default", default, predicate)

    def last(self, predicate: Callable[[T], object] | None = None) -> Query[T]:
        """The last element (satisfying ``predicate``, if given) when the source completes. None found is a
        ``ValueError``.

        >>> from_iterable([5, 6, 7]).last().run(print)  # doctest: +ELLIPSIS
        7
        <...>

        State: ``last`` (``reaqtive:last``). Demand: everything once asked; held until demanded.
        """
        _optional_callable(predicate, "last", "predicate")
        return derive(self, "last", predicate)

    def last_or_default(self, default: T, predicate: Callable[[T], object] | None = None) -> Query[T]:
        """As :meth:`last`, but ``default`` when none is found.

        >>> from_iterable([1, 3]).last_or_default(0, lambda x: x % 2 == 0).run(print)  # doctest: +ELLIPSIS
        0
        <...>

        State: ``last`` (``reaqtive:last``). Demand: everything once asked; held until demanded.
        """
        _require_element(default, "last_or_default", "default")
        _optional_callable(predicate, "last_or_default", "predicate")
        return derive(self, "last_or_default", default, predicate)

    def single(self, predicate: Callable[[T], object] | None = None) -> Query[T]:
        """The only element (satisfying ``predicate``, if given) when the source completes. None found is a
        ``ValueError``; a second one is a ``ValueError`` at once (the source is cancelled).

        >>> from_iterable([4]).single().run(print)  # doctest: +ELLIPSIS
        4
        <...>

        State: ``found`` (``reaqtive:single``). Demand: everything once asked; held until demanded.
        """
        _optional_callable(predicate, "single", "predicate")
        return derive(self, "single", predicate)

    def single_or_default(self, default: T, predicate: Callable[[T], object] | None = None) -> Query[T]:
        """As :meth:`single`, but ``default`` when none is found (a second one is still an error, as in Rx).

        >>> from_iterable([]).single_or_default(0).run(print)  # doctest: +ELLIPSIS
        0
        <...>

        State: ``found`` (``reaqtive:single``). Demand: everything once asked; held until demanded.
        """
        _require_element(default, "single_or_default", "default")
        _optional_callable(predicate, "single_or_default", "predicate")
        return derive(self, "single_or_default", default, predicate)

    def element_at(self, index: int) -> Query[T]:
        """The element at ``index`` (0-based), at once; then the source is cancelled. A source that ends
        before it is an ``IndexError``.

        >>> from_iterable("abcd").element_at(2).run(print)  # doctest: +ELLIPSIS
        c
        <...>

        State: ``remaining`` (elements still to skip; ``reaqtive:element_at``). Demand: everything once asked.
        """
        require_non_negative_int(index, "element_at", "index")
        return derive(self, "element_at", index)

    def element_at_or_default(self, index: int, default: T) -> Query[T]:
        """As :meth:`element_at`, but ``default`` when the source ends before ``index``.

        >>> from_iterable("ab").element_at_or_default(5, "?").run(print)  # doctest: +ELLIPSIS
        ?
        <...>

        State: ``remaining`` (``reaqtive:element_at``). Demand: everything once asked; held until demanded.
        """
        require_non_negative_int(index, "element_at_or_default", "index")
        _require_element(default, "element_at_or_default", "default")
        return derive(self, "element_at_or_default", index, default)

    # -- two sources -------------------------------------------------------------------------------------------

    def sequence_equal(self, other: Subscribable[T], comparer: Callable[[T, T], object] | None = None) -> Query[bool]:
        """Whether this source and ``other`` have equal elements (``==``, or ``comparer(mine, theirs)``) in the
        same order and as many: ``False`` at the first difference (both sources are then cancelled), ``True``
        when both complete together.

        >>> from_iterable([1, 2]).sequence_equal(from_iterable([1, 2])).run(print)  # doctest: +ELLIPSIS
        True
        <...>

        Queues: the elements one source delivered ahead of the other wait in a queue. With the host setting
        ``MAX_QUEUE_SIZE = q`` each source is asked for at most what its queue can still hold (``q`` at first,
        topped up as pairs match), so the faster source is slowed to the slower one's pace and the queue never
        exceeds ``q`` (a source sending more than asked gets ``LimitExceededError``); without the setting both
        are asked for everything and the queue is unbounded, as in Reaqtive.
        State: ``done, queue`` per source. Demand: nothing before the downstream asks; held until demanded.
        """
        if not isinstance(other, Subscribable):
            raise TypeError(f"sequence_equal: other must be a query (a Subscribable), got {type(other).__name__}")
        _optional_callable(comparer, "sequence_equal", "comparer")
        return derive(self, "sequence_equal", other, comparer)
