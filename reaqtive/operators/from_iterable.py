"""``from_iterable``: a cold source that emits an iterable's elements as they are requested."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from itertools import islice
from typing import Any, Final, Generic, TypeVar

from reaqtive.core.arguments import args_record
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, source_node
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import YieldToken
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.operators._fusion import SOURCE_DISPOSED, STOPPED_AT_NONE, FusedEntry, emits_batches
from reaqtive.operators._source import EMIT_BATCH, TERMINATED, PullSource

__all__ = ["FromIterable", "FromIterableArgs", "from_iterable"]

T = TypeVar("T")
R = TypeVar("R")


def from_iterable(iterable: Iterable[R]) -> Expression[R]:
    """A cold source that emits the elements of ``iterable`` as they are requested, then completes.

    >>> from_iterable([1, 2, 3]).run(print)  # doctest: +ELLIPSIS
    1
    2
    3
    <...>

    A ``None`` element or an exception raised by the iterator becomes ``on_error``.

    **State.** How many elements were emitted, and whether it has looked for the end yet. A recovered source
    iterates its iterable afresh and skips that many, so it resumes where it was for any iterable that yields the
    same elements each time (a list, a range, a file); a one-shot iterator cannot be resumed.

    **Demand.** Emits only what was requested, from a drain loop (a ``request`` made inside ``on_next`` adds to
    the demand instead of recursing, rule 3.3); unbounded demand emits with no per-element accounting. When
    demand runs out the source looks one element ahead, so the end of the iterable is signalled without waiting
    for another request; the first drain looks even without demand (an empty iterable completes one tick after
    the start), and a recovered source that had looked already waits for a request, as the original did.
    """
    if not isinstance(iterable, Iterable):
        raise TypeError(f"from_iterable needs an iterable, got {type(iterable).__name__}")
    return source_node("from_iterable", (iterable,))


FromIterableArgs = args_record("FromIterableArgs", iterable="iterable")


class _Nothing:
    __slots__ = ()


_NOTHING: Final = _Nothing()


@register_operator("from_iterable", builder=from_iterable, args=FromIterableArgs)
class FromIterable(PullSource[T], Generic[T]):
    """The running source of :func:`from_iterable`, on the drain of
    :class:`~reaqtive.operators._source.PullSource`.

    Its state is version 2 (version 1, the position only, loads as "looked" once an element went out). Unbounded
    demand hands a fused run of stages downstream (:mod:`reaqtive.operators._fusion`) a batch at a time, so no
    call per element passes between them.
    """

    name = "reaqtive:from_iterable"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ("_iterable", "_iterator", "_looked", "_peeked", "_position")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._iterable: Iterable[T] = FromIterableArgs.read(query).iterable
        self._iterator: Iterator[T] | None = None
        self._peeked: T | _Nothing = _NOTHING
        self._position = 0
        self._looked = False  # a drain has looked for the end (the first one does, even without demand)

    def save_state_core(self, writer: StateWriter) -> None:
        # A looked-ahead element has been taken from the iterator but not emitted: it is not counted.
        writer.write(self._position)
        writer.write(self._looked)

    def load_state_core(self, reader: StateReader) -> None:
        self._position = self._read_position(reader)
        self._looked = reader.read_bool("looked")

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,): the position only; a source that emitted has looked for the end
        self._position = self._read_position(reader)
        self._looked = self._position > 0

    def _read_position(self, reader: StateReader) -> int:
        iterable = self._iterable
        return reader.read_int("position", maximum=len(iterable) if isinstance(iterable, Sized) else LONG_MAX)

    def drain_on_start(self) -> bool:
        return not self._looked  # the original's first drain was still to look for the end

    def on_start(self) -> None:
        # The iterable's own errors (here and in the emit loops) stop the query whatever the error policy: there is
        # no element to skip, and nothing to go on with. An iterator that raised is finished (a generator) or in a
        # state the iterator protocol leaves undefined, and a recovered query resumes it by position (``islice``
        # above), which would not step over an error that a skip had stepped over. Nor is a ``None`` among the
        # values skipped: it is the source breaking rule 2.13, not a user function's failure on an element.
        try:
            iterator = iter(self._iterable)
            if self._position:
                for _ in islice(iterator, self._position):  # resume after what was emitted before the restart
                    pass
        except Exception as error:
            self._signal_error(error)
            return
        self._iterator = iterator
        super().on_start()

    def on_dispose(self) -> None:
        self._iterator = None
        self._peeked = _NOTHING

    def emit(self, demand: int, token: YieldToken) -> int:
        iterator = self._iterator
        if iterator is None:  # disposed before it started
            return TERMINATED
        emitted = 0
        if self._peeked is not _NOTHING and demand:
            value, self._peeked = self._peeked, _NOTHING
            self._downstream.on_next(value)  # type: ignore[arg-type]
            emitted = 1
        if demand == LONG_MAX:
            downstream = self._downstream
            if isinstance(downstream, FusedEntry):
                result = self._emit_batches(iterator, token, downstream)
            else:
                result = self._emit_all(iterator, token)
        else:
            result = self._emit_counted(iterator, demand - emitted, token)
        if result == TERMINATED:
            return TERMINATED
        emitted += result
        if emitted:
            self._position += emitted
            self._state.changed = True
        if demand != LONG_MAX and emitted == demand and not self._disposed:
            return self._look_ahead(iterator, emitted)
        return emitted

    def _emit_all(self, iterator: Iterator[T], token: YieldToken) -> int:
        """Everything, in batches between looks at the yield token; no per-element accounting."""
        downstream = self._downstream
        emitted = 0
        downstream_failed = False
        try:
            while True:
                batch = 0
                for value in islice(iterator, EMIT_BATCH):
                    if value is None:
                        self._position += emitted + batch
                        self._signal_none()
                        return TERMINATED
                    if self._disposed:
                        return TERMINATED
                    try:  # free when nothing is raised; tells the subscriber's failure from the iterator's
                        downstream.on_next(value)
                    except BaseException:
                        downstream_failed = True
                        raise
                    batch += 1
                emitted += batch
                if batch < EMIT_BATCH:
                    break
                if token.is_yield_requested:
                    return emitted
        except Exception as error:
            if downstream_failed:
                raise
            self._signal_error(error)
            return TERMINATED
        self._position += emitted
        self._signal_complete()
        return TERMINATED

    def _emit_batches(self, iterator: Iterator[T], token: YieldToken, run: FusedEntry) -> int:
        """:meth:`_emit_all` into a fused run: the run takes each batch in a loop of its own, checking each element
        as :meth:`_emit_all` does; the batches, the looks at the yield token and the bookkeeping are the same."""
        emitted = 0
        while True:
            batch, end = run.on_next_batch(iterator, EMIT_BATCH, self)
            if end is None:
                emitted += batch
                if batch < EMIT_BATCH:
                    break  # the iterator ran out
                if token.is_yield_requested:
                    return emitted
            elif end is STOPPED_AT_NONE:
                self._position += emitted + batch
                self._signal_none()
                return TERMINATED
            elif end is SOURCE_DISPOSED:
                return TERMINATED
            else:  # the iterable raised
                assert isinstance(end, Exception)
                self._signal_error(end)
                return TERMINATED
        self._position += emitted
        self._signal_complete()
        return TERMINATED

    def _emit_counted(self, iterator: Iterator[T], demand: int, token: YieldToken) -> int:
        """Up to ``demand`` elements."""
        downstream = self._downstream
        emitted = 0
        while emitted < demand:
            if self._disposed:
                return TERMINATED
            if emitted % EMIT_BATCH == EMIT_BATCH - 1 and token.is_yield_requested:
                return emitted
            try:
                value = next(iterator)
            except StopIteration:
                self._position += emitted
                self._signal_complete()
                return TERMINATED
            except Exception as error:
                self._signal_error(error)
                return TERMINATED
            if value is None:
                self._signal_none()
                return TERMINATED
            downstream.on_next(value)
            emitted += 1
        return emitted

    def _look_ahead(self, iterator: Iterator[T], emitted: int) -> int:
        """Demand is used up: take one element ahead, so that the end is signalled now rather than on the next
        request (a finite source completes without needing demand, rule 1.2)."""
        if self._peeked is not _NOTHING:
            return emitted
        if not self._looked:
            self._looked = True
            self._state.changed = True
        try:
            value = next(iterator)
        except StopIteration:
            self._signal_complete()
            return TERMINATED
        except Exception as error:
            self._signal_error(error)
            return TERMINATED
        if value is None:
            self._signal_none()
            return TERMINATED
        self._peeked = value
        return emitted

    def _signal_none(self) -> None:
        self._signal_error(TypeError("from_iterable: the iterable produced None, which is never a stream element"))


emits_batches("from_iterable")
