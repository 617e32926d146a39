"""The output side of the engine, a part that owns its state: where each subscription's outputs go, the durable
sink's buffer, the output counters, the outboxes of observer functions and how far each got, and the check of
replayed outputs after a recovery.

The engine makes one :class:`Outputs` and hands it what it needs (its store, how to stop a subscription, the
``produced`` signal); the rest of the engine asks it through the methods below instead of sharing its fields.
Everything here runs under the engine's lock, except what :class:`~reaqtive.engine.outbox.Outboxes` does outside
it (delivery to observer functions).

* **Writers.** :meth:`Outputs.writer_for` gives a subscription's ``write(seq, value)``: the durable sink's (the
  value encoded at once, so it is frozen as produced, and buffered), nothing (``DISCARD_SINK``), or an outbox's.
  A value the store cannot hold raises :class:`~reaqtive.engine.engine_errors.UnstorableOutputError`.
* **The durable sink's buffer** is written by :meth:`Outputs.flush` (at each checkpoint, when 65,536 outputs wait,
  before a reader reads the sink). After a recovery the replay produces again outputs the sink holds: the first
  flush compares them (a query whose replay diverges is stopped; see ``docs/engine.md``, "Egress").
* **Counters** (:class:`~reaqtive.engine.egress.OutputCounter`) are the next output number per subscription; a
  checkpoint writes those that moved. **Observed** is how far each outbox's observer got, as stored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from reaqtive.engine.counters import OutputCounter
from reaqtive.engine.database import EngineStore
from reaqtive.engine.egress import Output, OutputWriter
from reaqtive.engine.engine_errors import OutputDivergenceError, UnstorableOutputError
from reaqtive.engine.outbox import GaveUp, Outbox, Outboxes
from reaqtive.state import DEFAULT_CODEC, DamagedRowError, StateEncodeError

__all__ = ["EGRESS_FLUSH_OUTPUTS", "Outputs"]

EGRESS_FLUSH_OUTPUTS: Final = 65536
"""The durable sink's buffer is written once it holds this many outputs."""

Fault = Callable[[str, Exception], None]
"""Stops a subscription (the engine's fault handling, under its failure policy)."""

Row = tuple[str, int, bytes]
"""One output for the durable sink: subscription, sequence number, encoded value."""


class Outputs:
    """The engine's output side (see the module)."""

    __slots__ = ("_fault", "_fired", "_pack", "_store", "buffer", "counters", "observed", "outboxes",
                 "replayed_upto")

    def __init__(self, store: EngineStore, *, fault: Fault, fired: Callable[[], None], gave_up: GaveUp) -> None:
        self._store = store
        self._fault = fault
        self._fired = fired  # the engine's ``produced`` signal: consumers of the durable sink wake up
        self.buffer: list[Row] = []
        """The durable sink's new outputs, encoded. The writers hold its bound ``append``: it is emptied in
        place, never replaced."""
        self.counters: dict[str, OutputCounter] = {}
        self.observed: dict[str, int] = {}
        """Per subscription with an observer function, the last output its observer received, as stored."""
        self.replayed_upto: dict[str, int] = {}
        """Per durable-sink subscription after a recovery, the sink's highest output id: what the replay produces
        up to it is compared with the sink."""
        self.outboxes = Outboxes(gave_up)
        # One packer for every writer (a packer holds a 256 KB buffer): outputs are written under the engine's
        # lock, one thread at a time, so it needs neither the codec's per-thread lookup nor a lock.
        self._pack = DEFAULT_CODEC.new_packer()

    # -- writers ---------------------------------------------------------------------------------------------------

    def writer_for(self, uri: str, observer: str, function: Callable[[Output], object] | None,
                   *, retries: int, backoff: float) -> OutputWriter | None:
        """Where subscription ``uri``'s outputs go: the durable sink (``function`` ``None``), nowhere
        (``discard``), or the outbox of observer ``observer``'s ``function`` (made here, with what the store
        keeps of it)."""
        pack = self._pack
        if function is None:
            # Encoded once, here (the value is frozen as it was produced): an output the sink cannot hold stops
            # this subscription at once, alone.
            append = self.buffer.append

            def durable(seq: int, value: Any) -> None:
                try:
                    payload = pack(value)
                except Exception as error:
                    raise _unstorable(uri, seq, value, error) from error
                append((uri, seq, payload))

            return durable
        outbox = Outbox(uri, observer, function, retries=retries, backoff=backoff,
                        delivered=self.observed.get(uri, -1))
        outbox.restore(Output(*row) for row in self._store.read_outputs(uri))
        self.outboxes.add(outbox)
        keep = outbox.add

        def sink(seq: int, value: Any) -> None:
            try:
                pack(value)  # a checkpoint may have to store it while it waits
            except Exception as error:
                raise _unstorable(uri, seq, value, error) from error
            keep(Output(uri, seq, value))

        return sink

    # -- the durable sink ------------------------------------------------------------------------------------------

    def flush(self, outboxes: Mapping[str, tuple[int, list[Output]]] | None = None) -> float:
        """Write the durable sink's new outputs; at a checkpoint also the outputs still waiting for an observer
        function (``outboxes``: their snapshots; the checkpoint's state is past them, so a restart could not
        produce them again). Returns the seconds it took."""
        started = time.perf_counter()
        if self.buffer:
            if self.replayed_upto:
                self._check_replayed()
            self._store.write_outputs(self.buffer, encoded=True)
            self.buffer.clear()
            # Consumers wait on it: a checkpoint inside process() may write a batch's outputs before the batch's
            # end looks at the buffer, which is then empty.
            self._fired()
        if outboxes:
            waiting = [output for _, outputs in outboxes.values() for output in outputs]
            if waiting:
                self._store.write_outputs(waiting)
        return time.perf_counter() - started

    def drop_buffered(self, uri: str) -> list[Row]:
        """Take subscription ``uri``'s buffered outputs out of the buffer (in place); returns them."""
        own = [row for row in self.buffer if row[0] == uri]
        if own:
            self.buffer[:] = [row for row in self.buffer if row[0] != uri]
        return own

    def _check_replayed(self) -> None:
        """After a recovery, a replay produces again the outputs the durable sink got after the checkpoint, with
        the same ids, and the sink keeps the first copy. That is only right if they are the same outputs: a
        query whose replay diverges (it is not deterministic, or its stored output counter was damaged, which
        would make new outputs vanish as "duplicates") is stopped instead, under the failure policy."""
        by_subscription: dict[str, list[Output]] = {}
        decode = DEFAULT_CODEC.decode_entries
        for uri, seq, payload in self.buffer:
            upto = self.replayed_upto.get(uri)
            if upto is not None and seq <= upto:
                by_subscription.setdefault(uri, []).append(Output(uri, seq, decode(payload, "an output")[0]))
        for uri, outputs in by_subscription.items():
            try:
                stored = {seq: value for _, seq, value in
                          self._store.read_outputs(uri, after=outputs[0].seq - 1, upto=outputs[-1].seq)}
            except DamagedRowError as error:  # its sink rows are damaged: that subscription, not the others
                self.drop_buffered(uri)
                self._fault(uri, error)
                continue
            for output in outputs:
                if output.seq in stored and not same_value(stored[output.seq], output.value):
                    self.drop_buffered(uri)
                    self._fault(uri, OutputDivergenceError(uri, output.seq, stored[output.seq], output.value))
                    break
        for uri, upto in list(self.replayed_upto.items()):
            counter = self.counters.get(uri)
            if counter is None or counter.next > upto:
                del self.replayed_upto[uri]  # past what the sink held: nothing left to compare

    # -- a subscription's outputs ----------------------------------------------------------------------------------

    def take_own(self, uri: str) -> list[Row]:
        """The outputs a subscription being created produced on start, encoded, taken out of the durable sink's
        buffer (or of its outbox, where they also stay to be delivered): its creation writes them."""
        own = self.drop_buffered(uri)
        outbox = self.outboxes.get(uri)
        if outbox is not None:
            encode = self._store.codec.encode
            own += [(uri, output.seq, encode(output.value)) for output in outbox.snapshot()[1]]
        return own

    def stop(self, uri: str) -> list[Output]:
        """Subscription ``uri`` stops running (kept stored): its counter and outbox go (the courier ends after
        the batch in flight); returns the outputs still waiting for its observer, for the store to keep. Its
        buffered durable-sink outputs stay on their way (the replay of its next run produces them again)."""
        self.counters.pop(uri, None)
        outbox = self.outboxes.pop(uri)
        return [] if outbox is None else outbox.snapshot()[1]

    def forget(self, uri: str) -> None:
        """Subscription ``uri`` is gone (deleted, or its creation undone): nothing of its outputs is kept here."""
        self.drop_buffered(uri)
        self.counters.pop(uri, None)
        self.outboxes.pop(uri)
        self.observed.pop(uri, None)


def _unstorable(uri: str, seq: int, value: object, error: Exception) -> UnstorableOutputError:
    """The error of an output the store cannot hold, with the codec's own message (naming the type)."""
    try:
        DEFAULT_CODEC.encode(value)
    except StateEncodeError as encode_error:
        return UnstorableOutputError(uri, seq, encode_error)
    return UnstorableOutputError(uri, seq, StateEncodeError(f"cannot save {type(value).__name__}: {error}"))


def same_value(stored: object, produced: object) -> bool:
    """Whether a replayed output equals the stored one (NaN equals NaN here: the same computation)."""
    if stored == produced:
        return True
    return isinstance(stored, float) and isinstance(produced, float) and math.isnan(stored) and math.isnan(produced)
