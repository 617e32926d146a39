"""``switch_latest``: every outer element selects an inner stream; only the latest one's elements pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord, require_callable
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators._inner_subscriptions import InnerMergeBase, InnerSlot

__all__ = ["SwitchLatest", "SwitchLatestArgs", "switch_latest"]

R = TypeVar("R")


def switch_latest(selector: Callable[[Any], Subscribable[Any]] | None = None) -> OperatorCall[Any]:
    """The elements of the latest inner stream: each element of this source (a query, or with ``selector``
    the query ``selector(element)``) replaces the current inner subscription (with a selector, RxJS/RxPY
    ``switch_map``).

    >>> from reaqtive.testing import TestScheduler, on_next, on_completed
    >>> scheduler = TestScheduler()
    >>> ys = scheduler.create_hot_observable(on_next(215, "a"), on_next(235, "b"), on_completed(250))
    >>> zs = scheduler.create_hot_observable(on_next(225, "c"), on_next(240, "d"), on_completed(260))
    >>> xs = scheduler.create_hot_observable(on_next(210, ys), on_next(230, zs), on_completed(245))
    >>> scheduler.start(lambda: xs.switch_latest()).messages
    [OnNext('a')@215, OnNext('d')@240, OnCompleted()@260]

    The previous inner subscription is disposed (hosted: deleted from the environment) and what it had queued is
    dropped. Completes when this source and the latest inner stream completed; the latest inner's error ends the
    result, a stale inner's signals are ignored; an error of this source or of ``selector`` ends it at once.
    Under a skip policy, an element whose ``selector`` raised (or that is no query) is dropped and the current
    inner stream goes on, as if the element had never come.

    **State.** The number of elements seen, whether this source completed, the elements requested from it and
    not yet received, and the latest inner: whether it ended, its queued elements and the element that selected
    it (as for ``flat_map``: a value, or a group or window by reference; a plain query cannot be saved, so use
    ``switch_latest(selector)`` to checkpoint).

    **Demand.** As ``flat_map`` with at most one inner: this source is asked without bound when downstream
    demand is unbounded, else for one element at a time while downstream waits for more than is queued, so a
    slow subscriber switches when it catches up rather than losing what it asked for.

    Reaqtive: Switch.
    """
    if selector is not None:
        require_callable(selector, "switch_latest", "selector")
    return OperatorCall("switch_latest", (selector,))


class SwitchLatestArgs(ArgsRecord, source="source", selector="optional_function"):
    """The arguments of a ``switch_latest`` node: ``(source, selector)``, ``selector`` ``None`` or a function."""


@register_operator("switch_latest", frames=20, builder=switch_latest, args=SwitchLatestArgs)
class SwitchLatest(InnerMergeBase[R], Generic[R]):
    """The running stage of :func:`switch_latest`, on the machinery of ``flat_map``
    (:mod:`reaqtive.operators._inner_subscriptions`) with at most one inner slot: a new outer element ends the
    current inner subscription and drops its queue before subscribing to the new one. Its state is version 2
    (version 1, without the outer demand, still loads).
    """

    name = "reaqtive:switch_latest"
    version: Version = (2,)
    older_versions = frozenset({(1,)})
    label = "switch_latest"
    kind = "switch_latest"

    __slots__ = ("_current",)

    def __init__(self, query: Expression[Any], downstream: Subscriber[R]) -> None:
        args = SwitchLatestArgs.read(query)
        super().__init__(args.source, downstream)
        self._selector = args.selector
        self._current: InnerSlot | None = None

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._current = self._latest_slot(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        super().load_older_state_core(reader, version)
        self._current = self._latest_slot(reader)

    def _latest_slot(self, reader: StateReader) -> InnerSlot | None:
        """The one slot a switch keeps: the latest outer element's (a switch forgets the one before)."""
        numbers = list(self._slots)
        if numbers not in ([], [self._counter - 1]):
            raise reader.invalid("slots", f"at most the latest inner's, number {self._counter - 1}", numbers)
        return next(iter(self._slots.values()), None)

    def on_next(self, value: Any) -> None:
        source = self._selected(value)  # before the current inner ends: a skipped element leaves it live
        if source is None:
            return
        with self._lock:
            if self._disposed or self._error is not None:
                return
            previous = self._current
            ended = previous is not None and not previous.done
            if previous is not None:
                if ended:
                    previous.done = True
                    self._live -= 1
                self._drop_slot(previous)
            slot = self._current = self._new_slot(value)
        if ended:
            assert previous is not None
            self._end_slots([previous])
        if self._subscribe_slot(slot, source):
            self._request_outer()
