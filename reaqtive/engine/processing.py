"""The processing thread of :meth:`~reaqtive.engine.Engine.start` and the loop of
:meth:`~reaqtive.engine.Engine.serve`: a part of the engine that owns them (the thread, what stopped it, whether
serving should end). It calls the engine through a few callbacks: process a batch, how long to wait when idle,
the couriers of observer functions around a serving loop, and the final checkpoint of :meth:`stop`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final

from reaqtive.engine.engine_errors import EngineClosedError, EngineRunningError, ProcessingStoppedError
from reaqtive.engine.handover import DELIVERY_BATCH, EngineLock
from reaqtive.engine.settings import check_whole
from reaqtive.engine.signals import Signal

__all__ = ["Processing"]

_COURIER_DRAIN_SECONDS: Final = 30.0  # how long serve() lets the couriers deliver what waits when it ends


class Processing:
    """The processing loop of :meth:`serve` and the thread of :meth:`start` (see the module docstring)."""

    def __init__(
        self, *, lock: EngineLock, where: str, check_open: Callable[[], None], process: Callable[[int], int],
        idle_seconds: Callable[[], float | None], appended: Signal, start_couriers: Callable[[], None],
        stop_couriers: Callable[[float], None], checkpoint: Callable[[], object], log: logging.Logger,
    ) -> None:
        self._lock = lock
        self._where = where  # the store's path, for the messages
        self._check_open = check_open
        self._process = process
        self._idle_seconds = idle_seconds
        self._appended = appended
        self._start_couriers = start_couriers
        self._stop_couriers = stop_couriers
        self._checkpoint = checkpoint
        self._log = log
        self._stop_serving = False  # set by stop_serving(), cleared when serve() returns
        self.driver: threading.Thread | None = None  # the processing thread of start()
        self._driver_error: BaseException | None = None  # what stopped it, for stop()

    def serve(self, *, batch_events: int = DELIVERY_BATCH, idle_seconds: float | None = None) -> None:
        """Process appended events as they come, on the calling thread, until :meth:`stop_serving` (or close)."""
        check_whole("batch_events", batch_events, minimum=1)
        with self._lock:
            self._check_open()
        self._start_couriers()  # observers get their outputs on threads of their own while this loop runs
        try:
            while not self._stop_serving:
                seen = self._appended.generation  # before the work: an append during it makes the wait return at once
                try:
                    delivered = self._process(batch_events)
                except EngineClosedError:
                    return
                if delivered < batch_events and not self._stop_serving:
                    self._appended.wait(seen, self._idle_seconds() if idle_seconds is None else idle_seconds)
        finally:
            self._stop_serving = False  # consumed: the next serve() runs
            self._stop_couriers(_COURIER_DRAIN_SECONDS)

    def start(self, *, batch_events: int = DELIVERY_BATCH) -> None:
        """Run :meth:`serve` on a processing thread of its own (``reaqtive-engine``)."""
        check_whole("batch_events", batch_events, minimum=1)
        with self._lock:
            self._check_open()
            if self.driver is not None and self.driver.is_alive():
                raise EngineRunningError(f"the engine on {self._where!r} already runs on its thread")
            self._driver_error = None
            self.driver = threading.Thread(target=self._drive, args=(batch_events,), name="reaqtive-engine",
                                           daemon=True)
            self.driver.start()

    def _drive(self, batch_events: int) -> None:
        try:
            self.serve(batch_events=batch_events)
        except BaseException as error:  # kept for stop() and `running`: a thread's error has nowhere else to go
            self._driver_error = error
            self._log.error("the engine's processing thread stopped: %s", error, exc_info=error,
                            extra={"reaqtive_event": "processing_failed", "error_type": type(error).__name__})

    @property
    def running(self) -> bool:
        """Whether the processing thread of :meth:`start` runs."""
        driver = self.driver
        return driver is not None and driver.is_alive()

    def stop(self, *, checkpoint: bool = True, timeout: float | None = 60.0) -> None:
        """Stop the processing thread once its batch is delivered, then take a final checkpoint (unless not)."""
        driver = self.driver
        if driver is not None:
            self.stop_serving()
            driver.join(timeout)
            if driver.is_alive():
                raise TimeoutError(f"the engine's processing thread did not stop within {timeout} s")
            self.driver = None
        error, self._driver_error = self._driver_error, None
        if error is not None:
            raise ProcessingStoppedError(f"the engine's processing thread stopped on an error: {error!r}") from error
        if checkpoint:
            self._checkpoint()

    def stop_serving(self) -> None:
        """Make :meth:`serve` return once the batch at hand is delivered (from any thread)."""
        self._stop_serving = True
        self._appended.fire()

