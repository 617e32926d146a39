"""``from_iterable``: a cold source that emits an iterable's elements as they are requested."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from reaqtive.binding import register_operator
from reaqtive.operator import OperatorBase
from reaqtive.streams import LONG_MAX, Subscriber, add_demand, non_positive_request_error

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["FromIterable"]

T = TypeVar("T")


class _Nothing:
    __slots__ = ()


_NOTHING: Final = _Nothing()


@register_operator("from_iterable")
class FromIterable(OperatorBase[T], Generic[T]):
    """The running source of ``Query.from_iterable``.

    Demand policy: a drain loop emits exactly what was requested. A ``request`` arriving while the loop runs
    (typically from inside ``on_next``) only adds to the demand and the running loop picks it up, so the stack
    depth stays bounded (rule 3.3) and signals stay serial (rule 1.3). Unbounded demand (``LONG_MAX``) takes a
    loop without per-element accounting. When the demand runs out, the source looks one element ahead so that
    the end of the iterable is signalled without waiting for another request.
    """

    __slots__ = ("_bad_request", "_demand", "_iterable", "_iterator", "_lock", "_missed", "_peeked", "_wip")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        iterable = query.args[0]
        assert isinstance(iterable, Iterable)
        self._iterable: Iterable[T] = iterable
        self._iterator: Iterator[T] | None = None
        self._peeked: T | _Nothing = _NOTHING
        self._demand = 0
        self._bad_request: int | None = None
        self._lock = threading.Lock()
        # The loop is held "busy" until on_start: requests made inside on_subscribe only add demand.
        self._wip = True
        self._missed = False

    def on_start(self) -> None:
        try:
            self._iterator = iter(self._iterable)
        except Exception as error:
            self._signal_error(error)
            return
        with self._lock:
            self._wip = False
        self._drain()

    def request(self, n: int) -> None:
        with self._lock:
            if n <= 0:
                if self._bad_request is None:
                    self._bad_request = n
            else:
                self._demand = add_demand(self._demand, n)
        self._drain()

    def on_dispose(self) -> None:
        self._iterator = None
        self._peeked = _NOTHING

    def _drain(self) -> None:
        with self._lock:
            if self._wip:
                self._missed = True
                return
            self._wip = True
        try:
            while True:
                with self._lock:
                    self._missed = False
                    demand = self._demand
                    bad_request = self._bad_request
                if self._disposed:
                    return
                if bad_request is not None:
                    self._signal_error(non_positive_request_error(bad_request))
                    return
                emitted = self._emit_unbounded() if demand == LONG_MAX else self._emit(demand)
                if emitted < 0:
                    return  # terminated
                with self._lock:
                    if self._demand != LONG_MAX:
                        self._demand -= emitted
                    if not self._missed:
                        self._wip = False
                        return
        except BaseException:
            # The subscriber raised out of a signal (it broke rule 2.13): the subscription cannot go on.
            self.dispose()
            raise

    def _emit_unbounded(self) -> int:
        """Emit everything without per-element accounting; return -1 once terminated."""
        downstream = self._downstream
        if self._peeked is not _NOTHING:
            value, self._peeked = self._peeked, _NOTHING
            downstream.on_next(value)  # type: ignore[arg-type]
        iterator = self._iterator
        assert iterator is not None
        downstream_failed = False
        try:
            for value in iterator:  # a for loop: ~40 ns per element cheaper than explicit next() calls
                if value is None:
                    self._signal_none()
                    return -1
                if self._disposed:
                    return -1
                try:  # free when nothing is raised; tells the subscriber's failure from the iterator's
                    downstream.on_next(value)
                except BaseException:
                    downstream_failed = True
                    raise
        except Exception as error:
            if downstream_failed:
                raise
            self._signal_error(error)
            return -1
        if not self._disposed:
            self._signal_complete()
        return -1

    def _emit(self, demand: int) -> int:
        """Emit up to ``demand`` elements; return how many, or -1 once terminated."""
        downstream = self._downstream
        next_value = self._next_function()
        emitted = 0
        while emitted < demand:
            if self._disposed:
                return -1
            if self._peeked is not _NOTHING:
                value, self._peeked = self._peeked, _NOTHING
            else:
                try:
                    value = next_value()
                except StopIteration:
                    self._signal_complete()
                    return -1
                except Exception as error:
                    self._signal_error(error)
                    return -1
                if value is None:
                    self._signal_none()
                    return -1
            downstream.on_next(value)  # type: ignore[arg-type]
            emitted += 1
        # Demand is used up: look one element ahead, so that the end is signalled now rather than on the next
        # request (a finite source completes without needing demand, rule 1.2 and the TCK's empty-stream test).
        if not self._disposed and self._peeked is _NOTHING:
            try:
                self._peeked = next_value()
            except StopIteration:
                self._signal_complete()
                return -1
            except Exception as error:
                self._signal_error(error)
                return -1
            if self._peeked is None:
                self._signal_none()
                return -1
        return emitted

    def _next_function(self) -> Any:
        iterator = self._iterator
        assert iterator is not None
        return iterator.__next__

    def _signal_none(self) -> None:
        self._signal_error(TypeError("from_iterable: the iterable produced None, which is never a stream element"))
