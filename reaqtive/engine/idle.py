"""The engine's running subscriptions, bound or idle: a part that owns which subscription has its operator tree.

A recovered subscription whose query neither emits nor schedules anything when it starts, and whose input has nothing
new for it, does nothing until its stream has an event for it. Binding it (decoding its query, building its
operators, a scheduler of its own, loading its state) costs about 2 KB of memory per subscription for nothing
meanwhile, so recovery leaves such a subscription **idle**: it keeps only its record and its stored state bytes,
undecoded. It is bound, as recovery would have bound it, when

* its delivery loop is about to hand an event of a stream it reads (:meth:`Subscriptions.bind_waiting_on`, before
  the run: it sees the clock and the positions it would have seen bound since recovery, since nothing of its
  streams was delivered meanwhile and it held no timers);
* something needs its operators: pause, update, a fault, the path of an operator (:meth:`Subscriptions.get`).

Nothing else changes while it waits: a differential checkpoint leaves its stored state as it is (it never writes
a clean unit), a full one writes the stored bytes again as they are (:meth:`Subscriptions.idle_states`), its output
counter is the one recovery read, and what it produces once bound is numbered from there, as if it had been bound
all along. Which queries may wait is decided by :func:`idle_streams`, conservatively, by the operators of the
bound plan.

Offers: ``uri in subscriptions`` (runs, bound or not), :meth:`~Subscriptions.get` (the bound form, binding it),
:meth:`~Subscriptions.bound` (the bound form only if it is bound), iteration over every URI. Never touches the
engine's other parts: binding is the engine's ``binder``, handed over once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

from reaqtive.fluent.query import Query

if TYPE_CHECKING:
    from reaqtive.state.host import HostedQuery

__all__ = ["IDLE_OPERATORS", "Binder", "Subscriptions", "idle_streams"]

Binder = Callable[[str, bytes], "HostedQuery | None"]
"""Binds the idle subscription ``uri`` with its stored state and records it bound (``None``: it failed, and the
engine stopped it under its policy)."""

IDLE_OPERATORS: Final = frozenset({
    "stream", "named", "map", "filter", "map_indexed", "filter_indexed", "scan", "distinct",
    "distinct_until_changed", "skip", "skip_while", "skip_while_indexed", "buffer", "merge", "aggregate", "sum",
    "count", "average", "min", "max", "to_list",
})
"""The operators a query may be made of to wait unbound: none emits, completes, schedules a timer or starts an inner
unit when it starts, and none reads the clock then (an engine stream never completes, so those that emit at the
end never do). Any other operator (start_with, timers, windows by time, take, group_by...) binds at recovery."""


def idle_streams(query: Query[Any]) -> tuple[str, ...] | None:
    """The streams a bound query reads, if it may wait unbound (see :data:`IDLE_OPERATORS`); ``None``: it binds
    now. Iterative: a stored query may be thousands of operators deep."""
    streams: list[str] = []
    pending: list[Query[Any]] = [query]
    while pending:
        node = pending.pop()
        if node.op not in IDLE_OPERATORS:
            return None
        if node.op == "stream":
            uri = node.args[0]
            if not isinstance(uri, str):
                return None
            streams.append(uri)
        pending.extend(arg for arg in node.args if isinstance(arg, Query))
    return tuple(sorted(set(streams))) if streams else None


def _no_binder(uri: str, blob: bytes) -> HostedQuery | None:
    raise AssertionError(f"subscription {uri!r} waits unbound, but no binder was handed over")


class Subscriptions:
    """The running subscriptions by URI: bound (a :class:`~reaqtive.state.host.HostedQuery`) or idle (their stored
    state bytes). See the module docstring."""

    __slots__ = ("_binder", "_bound", "_by_stream", "_waiting")

    def __init__(self) -> None:
        self._bound: dict[str, HostedQuery] = {}
        self._waiting: dict[str, bytes] = {}  # idle: the stored state, undecoded
        # Per stream, the idle subscriptions that read it; a URI bound through another of its streams stays until
        # this stream's first event (then skipped: it no longer waits).
        self._by_stream: dict[str, list[str]] = {}
        self._binder: Binder = _no_binder

    def set_binder(self, binder: Binder) -> None:
        """How the engine binds an idle subscription (once, as the engine is made)."""
        self._binder = binder

    # -- the mapping ---------------------------------------------------------------------------------------------

    def __contains__(self, uri: object) -> bool:
        return uri in self._bound or uri in self._waiting

    def __iter__(self) -> Iterator[str]:
        return iter([*self._bound, *self._waiting])

    def __len__(self) -> int:
        return len(self._bound) + len(self._waiting)

    def __setitem__(self, uri: str, hosted: HostedQuery) -> None:
        self._waiting.pop(uri, None)
        self._bound[uri] = hosted

    def get(self, uri: str) -> HostedQuery | None:
        """The bound form of subscription ``uri``, binding it if it is idle (``None``: it does not run, or its
        binding failed and the engine stopped it)."""
        hosted = self._bound.get(uri)
        if hosted is None and uri in self._waiting:
            blob = self._waiting.pop(uri)  # (while it binds, it is neither: a look-up from inside finds nothing)
            try:
                self._binder(uri, blob)
            except BaseException:  # the binder handles errors; this is an interrupt: it still waits
                if uri not in self._bound:
                    self._waiting[uri] = blob
                raise
            hosted = self._bound.get(uri)
        return hosted

    def __getitem__(self, uri: str) -> HostedQuery:
        hosted = self.get(uri)
        if hosted is None:
            raise KeyError(uri)
        return hosted

    def items(self) -> list[tuple[str, HostedQuery]]:
        """Every running subscription with its bound form (the idle ones are bound)."""
        self.bind_all()
        return list(self._bound.items())

    def bound(self, uri: str) -> HostedQuery | None:
        """The bound form of ``uri`` if it is bound (an idle one stays idle)."""
        return self._bound.get(uri)

    def pop(self, uri: str) -> HostedQuery | None:
        """Forget ``uri``: its bound form, or ``None`` if it was idle (nothing of it runs) or not there."""
        self._waiting.pop(uri, None)
        return self._bound.pop(uri, None)

    # -- idle ones -----------------------------------------------------------------------------------------------

    def wait(self, uri: str, blob: bytes, streams: tuple[str, ...]) -> None:
        """Keep subscription ``uri`` idle with its stored state until an event of one of ``streams``."""
        self._bound.pop(uri, None)
        self._waiting[uri] = blob
        for stream in streams:
            self._by_stream.setdefault(stream, []).append(uri)

    def is_idle(self, uri: str) -> bool:
        """Whether ``uri`` runs, idle (not bound yet)."""
        return uri in self._waiting

    @property
    def idle(self) -> int:
        """How many subscriptions are idle."""
        return len(self._waiting)

    def idle_states(self) -> list[tuple[str, bytes]]:
        """Each idle subscription's stored state (what a checkpoint writes for it, as it is), by URI."""
        return sorted(self._waiting.items())

    def waiting_on(self, stream: str) -> bool:
        """Whether idle subscriptions may read ``stream`` (one dict lookup: the delivery loop asks per run)."""
        return stream in self._by_stream

    def bind_waiting_on(self, stream: str) -> None:
        """Bind the idle subscriptions that read ``stream``, in the order recovery binds (by URI), before its next
        event is delivered."""
        for uri in sorted(self._by_stream.pop(stream, ())):
            if uri in self._waiting:
                self.get(uri)

    def bind_all(self) -> None:
        """Bind every idle subscription."""
        for uri in sorted(self._waiting):
            self.get(uri)
        self._by_stream.clear()
