"""Transform and filter: ``map``, ``filter`` (and their indexed forms), ``scan``, ``do``, ``finally_action``,
``ignore_elements``, ``default_if_empty``, ``start_with``, ``distinct``, ``distinct_until_changed``, ``trace``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, overload

from reaqtive.fluent._base import derive, require_callable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["TransformMixin"]

T = TypeVar("T")
R = TypeVar("R")
A = TypeVar("A")


class _NoSeed:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no seed>"


_NO_SEED: Final = _NoSeed()


def _require_optional_callable(value: object, op: str, name: str) -> None:
    if value is not None:
        require_callable(value, op, name)


def _is_observer(value: object) -> bool:
    return all(callable(getattr(value, method, None)) for method in ("on_next", "on_error", "on_complete"))


class TransformMixin(Generic[T]):
    """Operators that transform or filter elements one by one."""

    __slots__ = ()

    def map(self, selector: Callable[[T], R]) -> Query[R]:
        """Apply ``selector`` to each element.

        >>> from_iterable([1, 2]).map(lambda x: x * 10).run(print)  # doctest: +ELLIPSIS
        10
        20
        <...>

        Demand: passed upstream unchanged. An exception from ``selector`` (or a ``None`` result) becomes
        ``on_error`` and ends the subscription.
        """
        require_callable(selector, "map", "selector")
        return derive(self, "map", selector)

    def map_indexed(self, selector: Callable[[T, int], R]) -> Query[R]:
        """Apply ``selector(element, index)`` to each element; the index counts from 0.

        >>> from_iterable("ab").map_indexed(lambda x, i: f"{i}:{x}").run(print)  # doctest: +ELLIPSIS
        0:a
        1:b
        <...>

        State: the index of the next element (Reaqtive ``Select`` with index, ``rc:Select+Index``).
        Demand: passed upstream unchanged. An exception from ``selector`` (or a ``None`` result) becomes
        ``on_error`` and ends the subscription.
        """
        require_callable(selector, "map_indexed", "selector")
        return derive(self, "map_indexed", selector)

    def filter(self, predicate: Callable[[T], object]) -> Query[T]:
        """Keep the elements for which ``predicate`` is true.

        >>> from_iterable(range(6)).filter(lambda x: x % 2 == 0).run(print)  # doctest: +ELLIPSIS
        0
        2
        4
        <...>

        Demand: passed upstream; each dropped element is replaced by a ``request(1)`` upstream, unless demand
        is unbounded. An exception from ``predicate`` becomes ``on_error``.
        """
        require_callable(predicate, "filter", "predicate")
        return derive(self, "filter", predicate)

    def filter_indexed(self, predicate: Callable[[T, int], object]) -> Query[T]:
        """Keep the elements for which ``predicate(element, index)`` is true; the index counts every element
        received, kept or not, from 0.

        >>> from_iterable("abcde").filter_indexed(lambda x, i: i % 2 == 0).run(print)  # doctest: +ELLIPSIS
        a
        c
        e
        <...>

        State: the index of the next element. Demand: as :meth:`filter` (a ``request(1)`` upstream for each
        dropped element, unless demand is unbounded). An exception from ``predicate`` becomes ``on_error``.
        """
        require_callable(predicate, "filter_indexed", "predicate")
        return derive(self, "filter_indexed", predicate)

    @overload
    def scan(self, accumulator: Callable[[T, T], T], /) -> Query[T]: ...

    @overload
    def scan(self, seed: A, accumulator: Callable[[A, T], A], /) -> Query[A]: ...

    @overload
    def scan(self, accumulator: Callable[[A, T], A], /, *, seed: A) -> Query[A]: ...

    def scan(self, *args: Any, seed: Any = _NO_SEED) -> Query[Any]:
        """A running accumulation: emit each intermediate result of ``acc = accumulator(acc, element)``.

        Three forms: ``scan(accumulator)`` (no seed), ``scan(seed, accumulator)`` (the order of Reaqtive's
        ``Scan(seed, func)``), and ``scan(accumulator, seed=seed)`` (RxPY's keyword).

        >>> import operator
        >>> from_iterable([1, 2, 3]).scan(operator.add).run(print)  # doctest: +ELLIPSIS
        1
        3
        6
        <...>
        >>> from_iterable([1, 2, 3]).scan(10, operator.add).run(print)  # doctest: +ELLIPSIS
        11
        13
        16
        <...>

        Without a seed the first element becomes the accumulator and **is emitted** (Rx semantics; Reaqtive's
        ``Scan(func)`` does not emit it, a deviation we do not copy). With a seed, every element emits
        ``accumulator(acc, element)`` and the seed itself is not emitted.

        State: the accumulator (and, without a seed, whether there is one yet); it must be a value the state
        codec can write (plain data, or a type registered with ``register_state_type``). Demand: passed
        upstream unchanged. An exception from ``accumulator`` (or a ``None`` result) becomes ``on_error``.
        """
        if len(args) == 1:
            (accumulator,) = args
            has_seed = seed is not _NO_SEED
        elif len(args) == 2:
            if seed is not _NO_SEED:
                raise TypeError("scan: give the seed once, either scan(seed, accumulator) or scan(accumulator, seed=)")
            seed, accumulator = args
            has_seed = True
        else:
            raise TypeError(f"scan: takes (accumulator) or (seed, accumulator), got {len(args)} arguments")
        if not callable(accumulator):
            raise TypeError(
                f"scan: accumulator must be callable, got {type(accumulator).__name__} (the seed comes first: "
                "scan(seed, accumulator), or scan(accumulator, seed=seed))"
            )
        if not has_seed:
            return derive(self, "scan", accumulator)
        if seed is None:
            raise TypeError("scan: the seed must not be None (None is never an element)")
        return derive(self, "scan", seed, accumulator)

    def do(
        self,
        on_next: Callable[[T], object] | Any = None,
        on_error: Callable[[BaseException], object] | None = None,
        on_complete: Callable[[], object] | None = None,
    ) -> Query[T]:
        """Run side effects for the signals passing this point; the signals pass unchanged.

        Give callbacks (any of ``on_next``, ``on_error``, ``on_complete``), or one observer: an object with
        ``on_next``, ``on_error`` and ``on_complete`` methods (an ``on_subscribe`` it may have is not called).

        >>> from_iterable([1, 2]).do(lambda x: print("saw", x)).run(lambda x: None)  # doctest: +ELLIPSIS
        saw 1
        saw 2
        <...>

        The callback runs first, then the signal goes downstream. An exception from a callback becomes
        ``on_error`` and ends the subscription; one from ``on_error`` replaces the upstream's error (as in Rx).
        A callback not given does nothing (Reaqtive's default ``on_error`` also ignores the error).

        State: none. Demand: passed upstream unchanged.
        """
        if _is_observer(on_next):
            if on_error is not None or on_complete is not None:
                raise TypeError("do: give either an observer or callbacks, not both")
            observer: Any = on_next
            return derive(self, "do", observer.on_next, observer.on_error, observer.on_complete)
        _require_optional_callable(on_next, "do", "on_next")
        _require_optional_callable(on_error, "do", "on_error")
        _require_optional_callable(on_complete, "do", "on_complete")
        if on_next is None and on_error is None and on_complete is None:
            raise TypeError("do: give at least one callback (on_next, on_error, on_complete) or an observer")
        return derive(self, "do", on_next, on_error, on_complete)

    def finally_action(self, action: Callable[[], object]) -> Query[T]:
        """Run ``action()`` exactly once when the subscription ends: after ``on_complete`` or ``on_error`` went
        downstream, or when it is cancelled or disposed.

        >>> from_iterable([1]).finally_action(lambda: print("done")).run(print)  # doctest: +ELLIPSIS
        1
        done
        <...>

        A query recovered from a checkpoint taken after it ended does not run the action again. An exception
        from ``action`` cannot reach the (finished) downstream and ``cancel`` must return normally: with a
        scheduler it goes to the scheduler's ``unhandled_exception`` chain, standalone it is logged.

        State: none. Demand: passed upstream unchanged.
        """
        require_callable(action, "finally_action", "action")
        return derive(self, "finally_action", action)

    def ignore_elements(self) -> Query[T]:
        """Drop every element; only ``on_complete`` or ``on_error`` pass.

        >>> from_iterable([1, 2]).ignore_elements().run(print, on_complete=lambda: print("done"))  # doctest: +ELLIPSIS
        done
        <...>

        State: none. Demand: it never emits, so it requests everything upstream (``LONG_MAX``) as soon as the
        upstream subscribes, whatever the downstream requested; nothing is held.
        """
        return derive(self, "ignore_elements")

    def default_if_empty(self, default_value: T) -> Query[T]:
        """Pass the elements through; if the source completes without any, emit ``default_value``, then
        complete.

        >>> from_iterable([]).default_if_empty(0).run(print)  # doctest: +ELLIPSIS
        0
        <...>

        ``default_value`` is required and must not be ``None`` (``None`` is never an element; Reaqtive's
        one-argument overload emits ``default(T)``, which has no Python equivalent).

        State: whether an element was seen, and whether the default still waits for demand. Demand: passed
        upstream unchanged; a default with no demand yet waits for the first ``request`` (one value held).
        """
        if default_value is None:
            raise TypeError("default_if_empty: default_value must not be None (None is never an element)")
        return derive(self, "default_if_empty", default_value)

    def start_with(self, *values: T) -> Query[T]:
        """Emit ``values`` first, then subscribe to this query and pass its elements.

        >>> from_iterable([3]).start_with(1, 2).run(print)  # doctest: +ELLIPSIS
        1
        2
        3
        <...>

        The source is subscribed only after the last value (as Rx's ``concat``): a hot source's elements
        during the values are not seen. With a scheduler each value is emitted by its own task, one after the
        other (under the test scheduler one tick apart, the first one tick after the start, as Reaqtive), and
        the last value's task subscribes.

        State: how many values were emitted, and whether the source is subscribed. Demand: values are emitted
        only as requested; the rest of the demand goes to the source once subscribed.
        """
        for value in values:
            if value is None:
                raise TypeError("start_with: a value must not be None (None is never an element)")
        return derive(self, "start_with", values)

    def distinct(
        self,
        key_selector: Callable[[T], object] | None = None,
        comparer: Callable[[Any, Any], object] | None = None,
    ) -> Query[T]:
        """Keep only the elements whose key (the element, or ``key_selector(element)``) was not seen before.

        >>> from_iterable([1, 2, 1, 3, 2]).distinct().run(print)  # doctest: +ELLIPSIS
        1
        2
        3
        <...>

        In Python, a *comparer* is best a key: ``key_selector`` maps elements to hashable keys (``str.lower``
        for case-insensitive text), kept in a ``set``, O(1) per element. ``comparer(seen_key, key) -> bool``
        (true: equal) is for keys that cannot be hashed: every new key is compared with all keys seen so far,
        O(n) per element and O(n²) in all; prefer a key when you can.

        State: the keys seen (a set; with a comparer, a list): they must be values the state codec can write.
        Setting ``MAX_DISTINCT_ELEMENTS`` bounds their number (``LimitExceededError`` through ``on_error``).
        Demand: as :meth:`filter` (a ``request(1)`` upstream per dropped element, unless demand is unbounded).
        An exception from ``key_selector`` or ``comparer``, or an unhashable key, becomes ``on_error``.
        """
        _require_optional_callable(key_selector, "distinct", "key_selector")
        _require_optional_callable(comparer, "distinct", "comparer")
        return derive(self, "distinct", key_selector, comparer)

    def distinct_until_changed(
        self,
        key_selector: Callable[[T], object] | None = None,
        comparer: Callable[[Any, Any], object] | None = None,
    ) -> Query[T]:
        """Drop the elements whose key (the element, or ``key_selector(element)``) equals the key of the last
        element emitted.

        >>> from_iterable([1, 1, 2, 2, 1]).distinct_until_changed().run(print)  # doctest: +ELLIPSIS
        1
        2
        1
        <...>

        Keys are compared with ``==``, or with ``comparer(current_key, key) -> bool`` (true: equal). The first
        element is always emitted.

        State: the current key (marked changed only when it changes); it must be a value the state codec can
        write. Demand: as :meth:`filter`. An exception from ``key_selector`` or ``comparer`` becomes
        ``on_error``.
        """
        _require_optional_callable(key_selector, "distinct_until_changed", "key_selector")
        _require_optional_callable(comparer, "distinct_until_changed", "comparer")
        return derive(self, "distinct_until_changed", key_selector, comparer)

    def trace(self, label: str, emit: Callable[[str], object] = print) -> Query[T]:
        """Report every signal crossing this point, including ``request(n)`` from downstream, as text lines
        ``"[label] on_next(3)"`` passed to ``emit`` (``print`` by default). Elements pass through unchanged.

        >>> from_iterable([7]).trace("src").run(lambda x: None)  # doctest: +ELLIPSIS
        [src] request(9223372036854775807)
        [src] on_subscribe
        [src] on_next(7)
        [src] on_complete
        <...>

        (The request comes first: stages start from the subscriber side, and demand waits for the upstream.)
        Demand: passed upstream unchanged.
        """
        if not isinstance(label, str):
            raise TypeError(f"trace: label must be a str, got {type(label).__name__}")
        require_callable(emit, "trace", "emit")
        return derive(self, "trace", label, emit)
