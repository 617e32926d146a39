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
* **The durable sink's buffer** (:class:`SinkBuffer`) is written by :meth:`Outputs.flush` (at each checkpoint,
  when 65,536 outputs wait, before a reader reads the sink). It holds chunks of encoded outputs: a run's outputs
  (:meth:`Outputs.run_writer`) are encoded in one packer call and written as one piece of a row. After a
  recovery the replay produces again outputs the sink holds: the first flush compares them (a query whose
  replay diverges is stopped; see ``docs/engine.md``, "Egress").
* **Counters** (:class:`~reaqtive.engine.egress.OutputCounter`) are the next output number per subscription; a
  checkpoint writes those that moved. **Observed** is how far each outbox's observer got, as stored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from itertools import repeat
from typing import Any, Final

from reaqtive.core.describe import error_text
from reaqtive.engine.counters import OutputCounter
from reaqtive.engine.database import EngineStore, OutputChunks, array_entries, chunk_outputs
from reaqtive.engine.egress import Output, OutputWriter
from reaqtive.engine.engine_errors import OutputDivergenceError, UnstorableOutputError
from reaqtive.engine.outbox import GaveUp, Outbox, Outboxes
from reaqtive.state import DEFAULT_CODEC, DamagedRowError, StateEncodeError

__all__ = ["EGRESS_FLUSH_OUTPUTS", "Outputs", "RunWriter", "SinkBuffer"]

EGRESS_FLUSH_OUTPUTS: Final = 65536
"""The durable sink's buffer is written once it holds this many outputs."""

Fault = Callable[[str, Exception], None]
"""Stops a subscription (the engine's fault handling, under its failure policy)."""

Row = tuple[str, int, bytes]
"""One output for the durable sink: subscription, sequence number, encoded value."""

RunWriter = Callable[[int, list[Any]], int]
"""Writes a run's outputs ``first, first + 1, ...`` in one call; returns how many it took (see
:meth:`Outputs.run_writer`)."""


class SinkBuffer:
    """The durable sink's outputs not written yet, encoded, as :data:`~reaqtive.engine.database.OutputChunk`
    pieces in the order they were produced (one per output, or one per run of outputs). ``len()`` counts
    outputs, not pieces. The writers hold the bound ``append`` of :attr:`chunks`: it is changed in place, never
    replaced."""

    __slots__ = ("chunks", "count")

    def __init__(self) -> None:
        self.chunks = OutputChunks()
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def clear(self) -> None:
        self.chunks.clear()
        self.count = 0

    def rows(self, uri: str) -> list[Row]:
        """Subscription ``uri``'s buffered outputs, one by one."""
        return [row for chunk in self.chunks if chunk[0] == uri for row in chunk_outputs(chunk)]

    def drop(self, uri: str) -> list[Row]:
        """Take subscription ``uri``'s outputs out (in place); returns them one by one."""
        own = self.rows(uri)
        if own:
            self.chunks[:] = [chunk for chunk in self.chunks if chunk[0] != uri]
            self.count -= len(own)
        return own


class Outputs:
    """The engine's output side (see the module)."""

    __slots__ = ("_fault", "_fired", "_pack", "_pack_tuples", "_run_writers", "_store", "buffer", "counters",
                 "observed", "outboxes", "replayed_upto")

    def __init__(self, store: EngineStore, *, fault: Fault, fired: Callable[[], None], gave_up: GaveUp) -> None:
        self._store = store
        self._fault = fault
        self._fired = fired  # the engine's ``produced`` signal: consumers of the durable sink wake up
        self.buffer = SinkBuffer()
        """The durable sink's new outputs, encoded."""
        self._run_writers: dict[str, RunWriter] = {}
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
        self._pack_tuples = DEFAULT_CODEC.new_tuple_run_packer()

    # -- writers ---------------------------------------------------------------------------------------------------

    def writer_for(self, uri: str, observer: str, function: Callable[[Output], object] | None,
                   *, retries: int, backoff: float) -> OutputWriter | None:
        """Where subscription ``uri``'s outputs go: the durable sink (``function`` ``None``), nowhere
        (``discard``), or the outbox of observer ``observer``'s ``function`` (made here, with what the store
        keeps of it)."""
        pack = self._pack
        pack_tuples = self._pack_tuples
        self._run_writers.pop(uri, None)
        if function is None:
            # Encoded once, here (the value is frozen as it was produced): an output the sink cannot hold stops
            # this subscription at once, alone.
            buffer = self.buffer
            append = buffer.chunks.append

            def durable(seq: int, value: Any) -> None:
                try:
                    payload = pack(value)
                except Exception as error:
                    raise _unstorable(uri, seq, value, error) from error
                append((uri, seq, 1, payload))
                buffer.count += 1

            def durable_run(first: int, values: list[Any]) -> int:
                count = len(values)
                tuples = pack_tuples(values)  # a run of flat tuples: packed by msgpack's C code, one marker
                if tuples is not None:
                    append((uri, first, count, tuples))
                    buffer.count += count
                    return count
                try:
                    # One packer call for the run: a list packs as its header, then each value's entry as
                    # packing it alone writes it.
                    entries = array_entries(pack(values), count)
                except Exception:
                    # A value the sink cannot hold (the outputs before it are kept, it raises), or a list the
                    # packer cannot pack whose values it can (values nested to its limit): one by one.
                    for offset, value in enumerate(values):
                        durable(first + offset, value)
                    return count
                if count:
                    append((uri, first, count, entries))
                    buffer.count += count
                return count

            self._run_writers[uri] = durable_run
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

    def run_writer(self, uri: str) -> RunWriter | None:
        """The writer of a run of subscription ``uri``'s outputs in one call, when its outputs go to the durable
        sink (made by :meth:`writer_for`); ``None`` otherwise. It raises
        :class:`~reaqtive.engine.engine_errors.UnstorableOutputError` for the first value the sink cannot hold,
        the ones before it kept."""
        return self._run_writers.get(uri)

    # -- the durable sink ------------------------------------------------------------------------------------------

    def flush(self, outboxes: Mapping[str, tuple[int, list[Output]]] | None = None) -> float:
        """Write the durable sink's new outputs; at a checkpoint also the outputs still waiting for an observer
        function (``outboxes``: their snapshots; the checkpoint's state is past them, so a restart could not
        produce them again). Returns the seconds it took."""
        started = time.perf_counter()
        if self.buffer:
            if self.replayed_upto:
                self._check_replayed()
            self._store.write_outputs(self.buffer.chunks, encoded=True)
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
        return self.buffer.drop(uri)

    def _check_replayed(self) -> None:
        """After a recovery, a replay produces again the outputs the durable sink got after the checkpoint, with
        the same ids, and the sink keeps the first copy. That is only right if they are the same outputs: a
        query whose replay diverges (it is not deterministic, or its stored output counter was damaged, which
        would make new outputs vanish as "duplicates") is stopped instead, under the failure policy."""
        by_subscription: dict[str, list[Output]] = {}
        decode = DEFAULT_CODEC.decode_entries
        for uri, first, count, payload in self.buffer.chunks:
            upto = self.replayed_upto.get(uri)
            if upto is not None and first <= upto:
                seqs = range(first, min(first + count, upto + 1))  # those the sink may hold
                values = decode(payload, "an output")[: len(seqs)]
                by_subscription.setdefault(uri, []).extend(map(Output, repeat(uri), seqs, values))
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
        self._run_writers.pop(uri, None)
        outbox = self.outboxes.pop(uri)
        return [] if outbox is None else outbox.snapshot()[1]

    def forget(self, uri: str) -> None:
        """Subscription ``uri`` is gone (deleted, or its creation undone): nothing of its outputs is kept here."""
        self.drop_buffered(uri)
        self.counters.pop(uri, None)
        self._run_writers.pop(uri, None)
        self.outboxes.pop(uri)
        self.observed.pop(uri, None)


def _unstorable(uri: str, seq: int, value: object, error: Exception) -> UnstorableOutputError:
    """The error of an output the store cannot hold, with the codec's own message (naming the type)."""
    try:
        DEFAULT_CODEC.encode(value)
    except StateEncodeError as encode_error:
        return UnstorableOutputError(uri, seq, encode_error)
    return UnstorableOutputError(uri, seq, StateEncodeError(f"cannot save {type(value).__name__}: {error_text(error)}"))


def same_value(stored: object, produced: object) -> bool:
    """Whether a replayed output equals the stored one (NaN equals NaN here: the same computation)."""
    if stored == produced:
        return True
    return isinstance(stored, float) and isinstance(produced, float) and math.isnan(stored) and math.isnan(produced)
