"""The engine's asyncio face: :class:`AsyncEngine`.

It wraps an :class:`~reaqtive.engine.Engine` (one core, two faces: the sync API stays and is what runs). Nothing
here blocks the event loop: store work runs in worker threads, and queries run in one processing thread of their
own.

* ``await engine.append(stream, value)`` / ``append_many``: the append's commit runs in a worker thread;
  concurrent appends from many tasks share commits, as threads' appends do.
* A **processing task**, started with the engine (``async with``) or by :meth:`AsyncEngine.start`: it delivers
  appended events in batches, is woken by appends (the engine's ``appended`` signal, no polling), and gives the loop
  its turn between batches. Idle, it also wakes for the periodic checkpoint and the wall clock's timers
  (:meth:`~reaqtive.engine.Engine.idle_seconds`).
* ``async for output in engine.stream_outputs(uri, after=seq)``: the durable sink's outputs of ``uri`` in order,
  then each new one as it is produced (woken by the ``produced`` signal); a cursor, so a consumer that stores the
  last ``seq`` it handled (or acknowledges it, :meth:`AsyncEngine.ack`) resumes there after a restart.
* ``await engine.aclose()``: refuses new calls, waits for those in flight, stops the processing task after the
  batch at hand, takes a final checkpoint and closes; the consumers' iterations end.

Cancellation: cancelling a task that awaits a call (``append_many``, ``ack``, ...) does not undo the call. Its work
runs in a thread, which cannot be interrupted, so it completes (an append is committed and numbered; the
cancelled caller just never learns the numbers). :meth:`AsyncEngine.aclose` waits for such calls before it closes.
Cancelling a consumer inside ``async for ... stream_outputs`` leaves nothing behind. Cancelling a task that
awaits :meth:`AsyncEngine.aclose` does not stop the close, which goes on.

Threading contract: an :class:`AsyncEngine` belongs to the event loop it was started on; call its methods from
that loop only. Observer functions (``define_observer``) and the queries run on the processing thread, not on the
loop: hand results to async code through :meth:`stream_outputs`, or ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from reaqtive.core.describe import error_text
from reaqtive.engine.database import DeadLetter
from reaqtive.engine.egress import Output
from reaqtive.engine.engine import Engine
from reaqtive.engine.engine_errors import ArtifactNotFoundError, EngineClosedError, EngineError
from reaqtive.engine.failures import OnError
from reaqtive.engine.model import DURABLE_SINK, CheckpointMetrics, EngineStatus, StreamStatus, SubscriptionStatus
from reaqtive.engine.retention import Retention
from reaqtive.engine.signals import Signal
from reaqtive.engine.upgrade import UpdatePlan
from reaqtive.fluent.query import Query
from reaqtive.state import StoreError

__all__ = ["AsyncEngine", "ProcessingFailedError"]

_T = TypeVar("_T")

DEFAULT_BATCH_EVENTS = 4096
"""Events the processing task delivers before it gives the event loop its turn."""
DEFAULT_OUTPUT_BATCH = 500
"""Outputs :meth:`AsyncEngine.stream_outputs` reads from the sink at a time."""


class ProcessingFailedError(EngineError):
    """The processing task stopped on an error (its cause): the engine delivers nothing more until it is
    reopened. Raised to output consumers and by :meth:`AsyncEngine.aclose`."""


class AsyncEngine:
    """An engine driven from asyncio (see the module docstring).

    ``engine``: the engine to drive (it stays usable: :attr:`engine`). ``batch_events``: events per processing
    batch. ``idle_seconds``: how long the processing task may sleep without appends (default: the engine's
    :meth:`~reaqtive.engine.Engine.idle_seconds`).

    Example::

        async with await AsyncEngine.open("service.db") as engine:
            await engine.append("readings", {"sensor": "a", "value": 3.5})
            async for output in engine.stream_outputs("alerts"):
                ...
    """

    def __init__(
        self, engine: Engine, *, batch_events: int = DEFAULT_BATCH_EVENTS, idle_seconds: float | None = None
    ) -> None:
        if type(batch_events) is not int or batch_events < 1:
            raise ValueError(f"batch_events must be a whole number >= 1, got {batch_events!r}")
        if idle_seconds is not None and not idle_seconds > 0:
            raise ValueError(f"idle_seconds must be > 0 seconds, got {idle_seconds!r}")
        self._engine = engine
        self._batch = batch_events
        self._idle = idle_seconds  # None: the engine's own, asked before each wait (its next timer moves)
        # One thread for the queries: they always run on the same thread, and never on the loop.
        self._processing_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reaqtive-processing")
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._closed = False  # set by aclose(): new calls are refused
        self._closing: asyncio.Task[None] | None = None  # the close, which every aclose() awaits
        self._inflight: set[asyncio.Future[Any]] = set()  # calls running in worker threads (aclose waits for them)
        self._failure: BaseException | None = None

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        batch_events: int = DEFAULT_BATCH_EVENTS,
        idle_seconds: float | None = None,
        **options: Any,
    ) -> AsyncEngine:
        """Open (and recover) an engine on ``path`` in a worker thread; ``options`` are
        :class:`~reaqtive.engine.Engine`'s. The processing task starts with ``async with`` or :meth:`start`."""
        engine = await asyncio.to_thread(functools.partial(Engine, path, **options))
        return cls(engine, batch_events=batch_events, idle_seconds=idle_seconds)

    @classmethod
    async def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        batch_events: int = DEFAULT_BATCH_EVENTS,
        idle_seconds: float | None = None,
        **options: Any,
    ) -> AsyncEngine:
        """Open (and recover) an engine configured by the ``REAQTIVE_*`` variables, in a worker thread; see
        :meth:`Engine.from_env <reaqtive.engine.Engine.from_env>` (``options`` override the environment)."""
        engine = await asyncio.to_thread(functools.partial(Engine.from_env, environ, **options))
        return cls(engine, batch_events=batch_events, idle_seconds=idle_seconds)

    @property
    def engine(self) -> Engine:
        """The sync engine it drives (its other methods: definitions, status, metrics)."""
        return self._engine

    @property
    def processor(self) -> asyncio.Task[None] | None:
        """The processing task (``None`` before :meth:`start`): await it to learn of a failure at once. Cancelling
        it stops processing (not a failure: :meth:`aclose` still takes its final checkpoint)."""
        return self._task

    # -- processing ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the processing task on the running loop (once; later calls do nothing, unless the loop it ran on
        has closed: ``asyncio.run`` ended, and another one goes on with the engine)."""
        self._check_open()
        if self._task is None or self._task.get_loop().is_closed():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._process_loop(), name="reaqtive-processing")

    async def _process_loop(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        assert wake is not None
        unlisten = self._engine.appended.listen(functools.partial(_set_threadsafe, loop, wake))
        try:
            while not self._stopping:
                wake.clear()  # before the work: an append during it sets it again, and the wait returns at once
                delivered = await loop.run_in_executor(self._processing_thread, self._engine.process, self._batch)
                if delivered >= self._batch:
                    await asyncio.sleep(0)  # the loop's turn between batches
                    continue
                if not self._stopping:
                    # On the processing thread: idle_seconds() may take the engine's lock, never on the loop.
                    idle = await loop.run_in_executor(self._processing_thread, self._engine.idle_seconds) \
                        if self._idle is None else self._idle
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), idle)
        except (EngineClosedError, StoreError) as error:
            # engine.close() under it (EngineClosedError, or the store's "closed" error if the close came between
            # two of its checks): it ends, as serve() does; the consumers end too. Anything else is a failure.
            if self._engine.status is not EngineStatus.CLOSED:
                self._fail(error)
                raise
        except asyncio.CancelledError:
            raise  # stopped, not failed: the batch at hand completes on its thread, aclose() checkpoints as usual
        except BaseException as error:
            self._fail(error)
            raise
        finally:
            unlisten()

    def _fail(self, error: BaseException) -> None:
        self._failure = error
        self._engine.produced.fire()  # consumers wake up and learn of it

    async def process(self, max_events: int | None = None) -> int:
        """Deliver pending events now (see :meth:`~reaqtive.engine.Engine.process`), on the processing thread;
        for a program that drives processing itself instead of :meth:`start`."""
        self._check_open()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._processing_thread, self._engine.process, max_events)

    # -- ingress ------------------------------------------------------------------------------------------------

    async def append(self, stream: str, value: Any, time: datetime | None = None) -> int:
        """Append one event (see :meth:`~reaqtive.engine.Engine.append`); durable when it returns (with the
        default ``ingress_commit``). Wakes the processing task."""
        return (await self.append_many(stream, [(value, time)]))[0]

    async def append_many(self, stream: str, events: Iterable[tuple[Any, datetime | None]]) -> list[int]:
        """Append ``(value, time)`` events in one transaction (see :meth:`~reaqtive.engine.Engine.append_many`)."""
        self._check_open()
        return await self._call(self._engine.append_many, stream, list(events))

    # -- outputs ------------------------------------------------------------------------------------------------

    async def outputs(self, subscription: str, *, after: int | None = None, limit: int | None = None) -> list[Output]:
        """One read of the durable sink's cursor (see :meth:`~reaqtive.engine.Engine.outputs`)."""
        self._check_open()
        return await self._call(self._engine.outputs, subscription, after=after, limit=limit)

    async def stream_outputs(
        self, subscription: str, *, after: int | None = None, batch: int = DEFAULT_OUTPUT_BATCH
    ) -> AsyncIterator[Output]:
        """The outputs of ``subscription`` (whose observer is the durable sink) with ``seq`` above ``after``
        (default: above its acknowledgement), in order, then each new one as it is produced; it ends when the
        engine closes. An output is produced before the checkpoint that covers it: after a crash the replay
        produces it again with the same ``seq`` and the same value, so a consumer that resumes after the last
        ``seq`` it handled sees each output once.

        ``after`` beyond the last output waits for outputs numbered above it; below the acknowledgement (or
        negative) starts after the acknowledgement. If the subscription is deleted while it streams, the
        iteration raises :class:`~reaqtive.engine.ArtifactNotFoundError` after the outputs read before (at the
        next wake-up: an output produced anywhere, or the engine's close); so does one deleted and created again
        under the same URI (its numbers start over)."""
        self._check_open()
        if type(batch) is not int or batch < 1:
            raise ValueError(f"stream_outputs(): batch must be a whole number >= 1, got {batch!r}")
        record = await self._call(self._engine.info, subscription)
        if record.kind != "subscription" or record.observer != DURABLE_SINK:
            raise ValueError(
                f"stream_outputs({subscription!r}): only a subscription whose observer is the durable sink has "
                f"outputs to stream (this is a {record.kind}"
                + (f" with observer {record.observer!r})" if record.kind == "subscription" else ")")
            )
        produced = self._engine.produced
        cursor = after
        while True:
            seen = produced.generation  # before the read: an output produced during it makes the wait return
            if self._failure is not None:
                raise ProcessingFailedError(f"stream_outputs({subscription!r}): the processing task stopped") \
                    from self._failure
            try:
                outputs, exists, stopped = await self._call(self._read_outputs, subscription, record.created, cursor,
                                                            batch)
            except EngineClosedError:
                return
            for output in outputs:
                yield output
                cursor = output.seq
            if not exists:
                raise ArtifactNotFoundError(f"stream_outputs({subscription!r}): the subscription was deleted "
                                            f"(or deleted and created again) while it streamed (last output handed "
                                            f"out: #{cursor})")
            if stopped is not None:
                raise stopped  # FAILED (SubscriptionFailedError), or stopped by a fault: it produces nothing more
            if len(outputs) < batch:
                if self._engine.status is EngineStatus.CLOSED:
                    return
                await _wait(produced, seen)

    def _read_outputs(self, subscription: str, created: datetime, after: int | None,
                      limit: int) -> tuple[list[Output], bool, BaseException | None]:
        """One read of the cursor (on a worker thread), and, when the read came up short, whether the subscription
        streamed is still there (a deleted one has no more outputs, and one created again under the same URI
        numbers its outputs from 0: without the check its consumer would wait forever, or skip them) and the error
        that stopped it, if one did (a FAILED or stopped subscription produces nothing more while it is so)."""
        try:
            outputs = self._engine.outputs(subscription, after=after, limit=limit)
        except ArtifactNotFoundError:  # deleted since the last read: stream_outputs says so, with the last seq
            return [], False, None
        if len(outputs) == limit:
            return outputs, True, None
        # created_at(), not info(): info() also reads the checkpoint to size the state, at every wake-up.
        if self._engine.created_at(subscription) != created:
            return outputs, False, None
        try:
            return outputs, True, self._engine.stopped_error(subscription)
        except ArtifactNotFoundError:  # deleted between the two calls
            return outputs, False, None

    async def ack(self, subscription: str, seq: int) -> None:
        """Acknowledge the outputs of ``subscription`` up to ``seq`` (see :meth:`~reaqtive.engine.Engine.ack`)."""
        self._check_open()
        await self._call(self._engine.ack, subscription, seq)

    # -- dead letters -------------------------------------------------------------------------------------------

    async def dead_letters(
        self, stream: str | None = None, *, subscription: str | None = None, after: int | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        """The dead letters not acknowledged yet, both kinds, by number (see
        :meth:`~reaqtive.engine.Engine.dead_letters`)."""
        self._check_open()
        return await self._call(self._engine.dead_letters, stream, subscription=subscription, after=after,
                                limit=limit)

    async def ack_dead_letters(self, upto_id: int) -> bool:
        """Acknowledge the dead letters numbered up to ``upto_id`` (see
        :meth:`~reaqtive.engine.Engine.ack_dead_letters`); durable when it returns."""
        self._check_open()
        return await self._call(self._engine.ack_dead_letters, upto_id)

    # -- definitions --------------------------------------------------------------------------------------------

    async def create_stream(self, uri: str, schema: str | None = None, *,
                            retain: Retention | timedelta | None = None) -> None:
        """See :meth:`~reaqtive.engine.Engine.create_stream` (``schema``: a validator's registered name;
        ``retain``: how much of its log to keep for backfills)."""
        self._check_open()
        await self._call(self._engine.create_stream, uri, schema, retain=retain)

    async def set_retention(self, uri: str, retain: Retention | timedelta | None) -> None:
        """See :meth:`~reaqtive.engine.Engine.set_retention`."""
        self._check_open()
        await self._call(self._engine.set_retention, uri, retain)

    async def streams(self) -> dict[str, StreamStatus]:
        """See :meth:`~reaqtive.engine.Engine.streams` (it reads the store: in a worker thread)."""
        self._check_open()
        return await self._call(self._engine.streams)

    @property
    def log_position(self) -> int:
        """See :attr:`~reaqtive.engine.Engine.log_position`."""
        return self._engine.log_position

    async def create_subscription(
        self, uri: str, query: Query[Any], observer: str | Callable[[Output], object] = DURABLE_SINK, *,
        priority: int = 0, on_error: OnError | None = None, start: int | datetime | str | None = None,
    ) -> None:
        """See :meth:`~reaqtive.engine.Engine.create_subscription` (``observer``: a URI, or a sink, attached in the
        same step; ``start``: a backfill over the retained log, whose history the processing task then works
        through in slices beside live input)."""
        self._check_open()
        await self._call(self._engine.create_subscription, uri, query, observer, priority=priority,
                         on_error=on_error, start=start)

    async def restart_subscription(self, uri: str, *, skip_failed: bool = False) -> None:
        """See :meth:`~reaqtive.engine.Engine.restart_subscription`."""
        self._check_open()
        await self._call(self._engine.restart_subscription, uri, skip_failed=skip_failed)

    async def update_subscription(
        self, uri: str, query: Query[Any], *, unmatched: str = "empty", require_state: bool = False,
        dry_run: bool = False, start: int | datetime | str | None = None,
    ) -> UpdatePlan:
        """See :meth:`~reaqtive.engine.Engine.update_subscription` (a backfill's history is then worked through by
        the processing task, in slices beside live input)."""
        self._check_open()
        return await self._call(self._engine.update_subscription, uri, query, unmatched=unmatched,
                                require_state=require_state, dry_run=dry_run, start=start)

    async def rollback_subscription(self, uri: str, *, state: str = "current", dry_run: bool = False) -> UpdatePlan:
        """See :meth:`~reaqtive.engine.Engine.rollback_subscription`."""
        self._check_open()
        return await self._call(self._engine.rollback_subscription, uri, state=state, dry_run=dry_run)

    async def subscription_history(self, uri: str) -> list[dict[str, Any]]:
        """See :meth:`~reaqtive.engine.Engine.subscription_history`."""
        self._check_open()
        return await self._call(self._engine.subscription_history, uri)

    async def subscriptions(self) -> list[SubscriptionStatus]:
        """See :meth:`~reaqtive.engine.Engine.subscriptions`."""
        self._check_open()
        return await self._call(self._engine.subscriptions)

    # -- one query's scheduler ----------------------------------------------------------------------------------

    async def pause(self, uri: str) -> None:
        """Pause one subscription (see :meth:`~reaqtive.engine.Engine.pause`); its input waits in the log."""
        self._check_open()
        await self._call(self._engine.pause, uri)

    async def resume(self, uri: str) -> None:
        """Resume a paused subscription (see :meth:`~reaqtive.engine.Engine.resume`)."""
        self._check_open()
        await self._call(self._engine.resume, uri)

    async def set_priority(self, uri: str, priority: int) -> None:
        """See :meth:`~reaqtive.engine.Engine.set_priority`."""
        self._check_open()
        await self._call(self._engine.set_priority, uri, priority)

    async def call(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run any other engine method in a worker thread, e.g.
        ``await engine.call(engine.engine.delete_subscription, uri)``."""
        self._check_open()
        return await self._call(method, *args, **kwargs)

    # -- checkpoints and closing --------------------------------------------------------------------------------

    async def checkpoint(self, *, full: bool = False) -> CheckpointMetrics:
        """Take a checkpoint (see :meth:`~reaqtive.engine.Engine.checkpoint`) in a worker thread."""
        self._check_open()
        return await self._call(self._engine.checkpoint, full=full)

    async def aclose(self, *, checkpoint: bool = True, drain: bool = False) -> None:
        """Stop gracefully: new calls are refused (:class:`~reaqtive.engine.EngineClosedError`) and those in flight
        complete; the processing task ends after the batch at hand; with ``drain`` the events appended until now
        are delivered too (they are in the durable log either way: a restart delivers them); then a final
        checkpoint (``checkpoint=True``), and the engine closes. Consumers' iterations end. If the processing task
        had failed, this raises :class:`ProcessingFailedError` once the engine is closed.

        Calls made while a close runs wait for it (and share its outcome); calls after it return at once.
        Cancelling the task that awaits it does not stop the close, which goes on (the cancellation still
        reaches the caller)."""
        if self._closing is None:
            self._closed = True
            self._stopping = True
            self._closing = asyncio.get_running_loop().create_task(
                self._close(checkpoint=checkpoint, drain=drain), name="reaqtive-aclose")
            self._closing.add_done_callback(_retrieve)
        elif self._closing.done():
            return
        await asyncio.shield(self._closing)

    async def _close(self, *, checkpoint: bool, drain: bool) -> None:
        loop = asyncio.get_running_loop()
        # Appends and reads already running in threads complete, then the store closes. Those of a loop that has
        # closed since (asyncio.run ended, and another one closes the engine) ended with it: nothing to wait for.
        inflight = {future for future in self._inflight if future.get_loop() is loop}
        if inflight:
            await asyncio.wait(inflight)
        task = self._task
        if task is not None and task.get_loop() is loop:
            assert self._wake is not None
            self._wake.set()
            await asyncio.wait({task})  # its failure, if any, is in self._failure
        try:
            if self._failure is None and self._engine.status is not EngineStatus.CLOSED:
                if drain:
                    await loop.run_in_executor(self._processing_thread, self._engine.process, None)
                if checkpoint:
                    await loop.run_in_executor(self._processing_thread, functools.partial(self._engine.checkpoint))
        finally:
            try:
                await loop.run_in_executor(self._processing_thread, self._engine.close)
            finally:
                self._processing_thread.shutdown(wait=False)
        if self._failure is not None:
            failure = self._failure
            raise ProcessingFailedError(f"the processing task had stopped ({type(failure).__name__}: "
                                        f"{error_text(failure)}); "
                                        "the engine is closed, reopen it to go on") from failure

    async def __aenter__(self) -> AsyncEngine:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- helpers ------------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError(f"the async engine on {str(self._engine.path)!r} is closed")

    async def _call(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run ``method`` in a worker thread. Shielded: a cancelled caller leaves it running to its end (a thread
        cannot be interrupted), and aclose() waits for it."""
        self._check_open()
        future = asyncio.ensure_future(asyncio.to_thread(method, *args, **kwargs))
        self._inflight.add(future)
        future.add_done_callback(self._call_done)
        try:
            return await asyncio.shield(future)
        except StoreError as error:
            if self._engine.status is EngineStatus.CLOSED:  # closed under it: say so, not "closed database"
                raise EngineClosedError(f"the async engine on {str(self._engine.path)!r} was closed during "
                                        f"{getattr(method, '__name__', method)!r}") from error
            raise

    def _call_done(self, future: asyncio.Future[Any]) -> None:
        self._inflight.discard(future)
        _retrieve(future)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark the outcome of a future whose awaiter may have been cancelled as seen (no "never retrieved" log)."""
    if not future.cancelled():
        future.exception()


def _set_threadsafe(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
    loop.call_soon_threadsafe(event.set)  # raises once the loop is closed: the signal then drops this listener


async def _wait(signal: Signal, seen: int) -> None:
    """Until ``signal`` fires past ``seen`` (at once if it already did)."""
    if signal.generation != seen:
        return
    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    unlisten = signal.listen(functools.partial(_set_threadsafe, loop, event))
    try:
        if signal.generation == seen:  # it may have fired before the listener was in place
            await event.wait()
    finally:
        unlisten()
