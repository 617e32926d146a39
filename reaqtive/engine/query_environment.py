"""The environment the engine's queries run in: the engine's streams, the inner subscriptions and subjects of its
queries (:class:`~reaqtive.state.InnerEnvironment`), and what its stream readers and egress stamps may ask of it
(:class:`~reaqtive.engine.environment.EngineEnvironment`): positions in the log, where a query behind the engine
stands, output counters. The engine makes one and hands it the parts it reads (never the engine itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from reaqtive.core.subjects import SimpleSubject
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.engine.behind import Lag
from reaqtive.engine.counters import OutputCounter
from reaqtive.engine.database import EngineStore
from reaqtive.engine.environment import EngineEnvironment, LogReader
from reaqtive.engine.readers import Envelope, LogCursor, StreamNotFoundError, StreamReader
from reaqtive.state import InnerEnvironment

__all__ = ["QueryEnvironment"]


class QueryEnvironment(InnerEnvironment, EngineEnvironment):
    """The engine's execution environment: its streams, plus inner subscriptions and subjects, plus what its
    stream readers and egress stamps ask of the engine."""

    def __init__(
        self,
        *,
        delivered: dict[str, int],
        counters: dict[str, OutputCounter],
        cursor: LogCursor,
        behind: Mapping[str, Lag],
        streams: dict[str, SimpleSubject[Envelope]],
        store: EngineStore,
        failed: Callable[[str, Exception], None],
    ) -> None:
        super().__init__()
        self._delivered_at = delivered
        self._output_counters = counters
        self._cursor = cursor
        self._behind = behind
        self._stream_subjects = streams
        self._store = store
        self._failed = failed
        self._last_position = -1  # the log's last position, as last read (see last_position)

    def delivered_position(self, uri: str) -> int:
        """The log position of the last event of stream ``uri`` the engine delivered (-1: none)."""
        return self._delivered_at.get(uri, -1)

    def lag_of(self, instance_id: str) -> Lag | None:
        """The catch-up of the query that unit ``instance_id`` belongs to, if that query is behind the engine."""
        behind = self._behind
        if not behind:
            return None
        lag = behind.get(instance_id)
        if lag is not None:
            return lag
        cut = instance_id.find("/")
        while cut != -1:
            lag = behind.get(instance_id[:cut])
            if lag is not None:
                return lag
            cut = instance_id.find("/", cut + 1)
        return None

    def start_position(self, instance_id: str) -> int:
        """Right after the event being handed to the query of unit ``instance_id``: the engine's position, or,
        for a query behind the engine, where its catch-up stands."""
        lag = self.lag_of(instance_id)
        return self._cursor.pos if lag is None else lag.cursor.pos

    def last_position(self) -> int:
        """The last log position given."""
        return self._refresh_last_position()

    def is_given_position(self, pos: int) -> bool:
        """Whether log position ``pos`` was given to an event already (the store is asked only about a position
        past the last one it told)."""
        return pos <= self._last_position or pos <= self._refresh_last_position()

    def _refresh_last_position(self) -> int:
        self._last_position = self._store.last_position()
        return self._last_position

    def position_after_seq(self, uri: str, seq: int) -> int:
        """Just before the next retained event of stream ``uri`` after ``seq``; with none retained after it, the
        last position given (the reader has read all of the stream there is)."""
        following = self._store.position_after(uri, seq)
        return following - 1 if following is not None else self._refresh_last_position()

    def subscribe_reader(self, reader: LogReader) -> SubscriptionHandle:
        """Subscribe ``reader`` to its stream; a reader of a query behind the engine is detached at once and
        handed its events by the query's catch-up (see reaqtive.engine.scheduling)."""
        if not isinstance(reader, StreamReader):
            raise TypeError(f"the engine reads its streams through its own StreamReader, not {reader!r}")
        subject = self._stream_subjects.get(reader.uri)
        if subject is None:
            raise StreamNotFoundError(f"the engine has no stream {reader.uri!r}")
        subscription = subject.subscribe(reader)
        lag = self.lag_of(reader.context.instance_id)
        if lag is not None:
            lag.hold(subscription, reader)
        return subscription

    def reader_failed(self, instance_id: str, error: Exception) -> None:
        """An exception escaped the operators of a query while a reader delivered an event to them (a bug, or
        state that loaded but cannot work): the engine stops that query alone."""
        self._failed(instance_id, error)

    def output_counter(self, uri: str) -> OutputCounter:
        """The output counter of subscription ``uri``."""
        counter = self._output_counters.get(uri)
        if counter is None:
            counter = self._output_counters[uri] = OutputCounter()
        return counter
