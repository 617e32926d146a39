"""``switch_latest``: every outer element selects an inner stream; only the latest one's elements pass.

The machinery is shared with ``flat_map`` (:mod:`reaqtive.operators._inner_subscriptions`): the stage keeps at most
one inner
slot, and a new outer element ends the current inner subscription (hosted: deletes it from the environment) and
drops what it had queued before subscribing to the new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, Version
from reaqtive.operators._inner_subscriptions import InnerMergeBase, InnerSlot, selected_source
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["SwitchLatest"]

R = TypeVar("R")


@register_operator("switch_latest", frames=20)
class SwitchLatest(InnerMergeBase[R], Generic[R]):
    """The running stage of ``Query.switch_latest()`` and ``Query.switch_latest(selector)``.

    Each outer element is the new inner stream (or selects it: ``selector(element)``). The current inner
    subscription is disposed (hosted: deleted from the environment) and its queued elements are dropped, then
    the new one is subscribed. Only the latest inner's elements pass; its error ends the result, a stale
    inner's signals are ignored. Completes once the outer completed and the latest inner completed and its
    queue is empty. An error of the outer or of the selector ends the result at once.

    State: the number of outer elements seen (the next inner id), whether the outer completed, and the latest
    inner: its number, whether it ended, the outer element that created it (while live) and its queued
    elements; the outer elements requested and not yet received (asked for again when a recovered stage starts:
    version 2; version 1 still loads). Demand: as ``flat_map`` without a bound on live inners (there is at most
    one): the outer is asked without bound when the downstream demand is unbounded, else for one element at a
    time while the downstream asked for more than is queued, so a slow subscriber switches when it catches up
    rather than losing what it asked for.
    """

    name = "reaqtive:switch_latest"
    version: Version = (2,)
    older_versions = frozenset({(1,)})
    label = "switch_latest"
    kind = "switch_latest"

    __slots__ = ("_current", "_selector")

    def __init__(self, query: Query[Any], downstream: Subscriber[R]) -> None:
        args = arguments(query, "source", "selector")
        super().__init__(args.source(0), downstream)
        self._selector: Callable[[Any], Any] | None = args.optional_function(1)
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

    def select(self, element: Any) -> Subscribable[Any]:
        selector = self._selector
        return selected_source(self.label, element if selector is None else selector(element))

    def on_next(self, value: Any) -> None:
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
        if self._subscribe_slot(slot):
            self._request_outer()
