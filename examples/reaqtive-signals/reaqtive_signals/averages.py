"""``signals:ewma``: the exponentially weighted moving average of a stream of numbers (a stateful operator whose
state layout changed between two releases of this package, and which still loads the older one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reaqtive import LONG_MAX, OperatorCall, register_operator
from reaqtive.core.arguments import arguments, require_positive_int
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber, add_demand
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive_signals.bounds import is_number

if TYPE_CHECKING:
    from reaqtive import Expression

__all__ = ["Ewma", "EwmaArgs", "ewma"]


def ewma(alpha: float, /, *, warmup: int = 1) -> OperatorCall[float]:
    """The exponentially weighted moving average of the elements: the first element starts the average, each
    next one moves it by ``alpha`` times the difference (``average += alpha * (element - average)``). One
    average per element, once ``warmup`` elements were averaged.

    >>> from reaqtive import from_iterable
    >>> from reaqtive_signals import clamp, ewma
    >>> from_iterable([10, 20, 20, 0]).pipe(ewma(0.5)).run(print)  # doctest: +ELLIPSIS
    10.0
    15.0
    17.5
    8.75
    <...>

    Chained after :func:`~reaqtive_signals.clamp`, with a warm-up of two elements (4, then 30 clamped to 10,
    then 8: the averages 4.0, 7.0 and 7.5, of which the first is not emitted):

    >>> from_iterable([4, 30, 8]).pipe(clamp(0, 10), ewma(0.5, warmup=2)).run(print)  # doctest: +ELLIPSIS
    7.0
    7.5
    <...>

    ``alpha`` is a number with ``0 < alpha <= 1`` (1: the average is the last element), ``warmup`` an
    ``int >= 1``; anything else is a :class:`TypeError` or :class:`ValueError` here, where the query is written.
    An element that is not a number (an ``int`` or a ``float``; not a ``bool``) ends the query with
    ``on_error(TypeError)``.

    **State.** The average (``None`` before the first element) and how many elements were averaged, counted up
    to ``warmup`` (state version 2). Version 1, written by reaqtive-signals 0.1, which had no ``warmup``, saved
    the average only: it still loads (its queries have a warm-up of one element, which the average alone tells).

    **Demand.** Passed upstream unchanged: one element in, one average out. During the warm-up, each element
    that makes no average is replaced by a request of one more element upstream (unless demand is unbounded),
    so downstream demand is never left unserved.

    Persisted as ``signals:ewma``, version 2.
    """
    if not isinstance(alpha, int | float) or isinstance(alpha, bool):
        raise TypeError(f"ewma: alpha must be a number, got {type(alpha).__name__}")
    if not (is_number(alpha) and 0 < alpha <= 1):
        raise ValueError(f"ewma: alpha must be > 0 and <= 1, got {alpha}")
    require_positive_int(warmup, "ewma", "warmup")
    return OperatorCall("signals:ewma", (alpha, warmup))


@dataclass(frozen=True, slots=True)
class EwmaArgs:
    """The arguments of a ``signals:ewma`` node: ``(source, alpha, warmup)``, or ``(source, alpha)`` as
    reaqtive-signals 0.1 wrote them (a warm-up of one element): stored queries keep the shape they were written
    with, so the record reads both."""

    source: Subscribable[Any]
    alpha: float
    warmup: int

    @classmethod
    def read(cls, query: Expression[Any]) -> EwmaArgs:
        """The checked arguments of ``query`` (:class:`~reaqtive.core.errors.OperatorArgumentError` if they do not
        fit): a stored query never went through :func:`ewma`, so its checks are made again here."""
        args = arguments(query, ("source", "alpha"), ("source", "alpha", "warmup"))
        alpha = args.value(1)
        if not (is_number(alpha) and 0 < alpha <= 1):
            args.fail(1, "a number > 0 and <= 1")
        warmup = args.integer(2, minimum=1) if len(args) == 3 else 1
        return cls(args.source(0), alpha, warmup)


@register_operator("signals:ewma", builder=ewma, args=EwmaArgs)
class Ewma(StatefulUnaryOperatorBase[float, float]):
    """The running stage of :func:`ewma`.

    ``_requested`` (the total downstream demand) and ``_unbounded`` belong to the demand path and are not state:
    a recovered stage's downstream asks again for what it had outstanding, which rebuilds them. The warm-up
    replaces each element it swallows with a request of one more, which keeps the upstream's outstanding demand
    equal to the downstream's, so that re-request is all a recovered stage needs.
    """

    name = "signals:ewma"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ("_alpha", "_average", "_requested", "_seen", "_source", "_unbounded", "_warmup")

    def __init__(self, query: Expression[Any], downstream: Subscriber[float]) -> None:
        super().__init__(downstream)
        args = EwmaArgs.read(query)
        self._source: Subscribable[float] = args.source
        self._alpha = args.alpha
        self._warmup = args.warmup
        self._average: float | None = None
        self._seen = 0  # elements averaged, counted up to _warmup
        self._requested = 0
        self._unbounded = False  # _requested == LONG_MAX, read per swallowed element

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._average)
        writer.write(self._seen)

    def load_state_core(self, reader: StateReader) -> None:
        self._average = _read_average(reader)
        self._seen = reader.read_int("seen", maximum=self._warmup)
        if (self._average is None) != (self._seen == 0):
            raise reader.invalid("seen", "0 exactly when there is no average yet", self._seen)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,): the average only. Version 1 had no warm-up (its queries read back with warmup=1), so "one element
        # was averaged" is the whole count it needs.
        self._average = _read_average(reader)
        self._seen = 0 if self._average is None else 1

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = requested = add_demand(self._requested, n)
            self._unbounded = requested == LONG_MAX
        super().request(n)

    def on_next(self, value: float) -> None:
        if not isinstance(value, int | float) or isinstance(value, bool):
            # An element the query cannot take: the subscription's error policy stops the query or skips it.
            self._user_error(TypeError(f"ewma: elements must be numbers, got {type(value).__name__}"), value)
            return
        average = self._average
        try:
            # float() of a huge int, and the arithmetic, may overflow: the query's error, never the caller's
            average = float(value) if average is None else average + self._alpha * (value - average)
        except Exception as error:
            self._user_error(error, value)
            return
        self._average = average
        self._state.changed = True  # the per-element path: the flag without the property call
        seen = self._seen
        if seen < self._warmup:
            self._seen = seen = seen + 1
            if seen < self._warmup:
                if not self._unbounded:
                    self._replace_swallowed()
                return
        self._downstream.on_next(average)

    def _replace_swallowed(self) -> None:
        """Ask the upstream for one more element in place of one the warm-up swallowed (bounded demand only)."""
        upstream = self._upstream
        if upstream is not None:
            upstream.request(1)


def _read_average(reader: StateReader) -> float | None:
    """The saved average: ``None`` or a ``float`` (a forged value of another type fails the load)."""
    average = reader.read()
    if average is not None and type(average) is not float:
        raise reader.invalid("average", "a float or None", average)
    return average
