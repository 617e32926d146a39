"""The next output sequence number of a subscription, kept by the engine (see :mod:`reaqtive.engine.egress`): a
counter committed with each checkpoint only when it moved, which reports its first move after a checkpoint to the
stage that owns it (so that a differential checkpoint finds the moved counters without looking at all of them).
"""

from __future__ import annotations

from typing import Final, Protocol

__all__ = ["CounterReporter", "OutputCounter"]


class CounterReporter(Protocol):
    """What an armed counter reports its first move to (the egress stamp of its subscription)."""

    def counter_moved(self) -> None: ...


class OutputCounter:
    """The next output sequence number of one subscription, and the value the store holds."""

    __slots__ = ("_stamp", "committed", "next", "pending")

    def __init__(self, next_seq: int = 0, committed: int | None = None) -> None:
        self.next = next_seq
        self.committed = committed
        """The value in the store (``None``: not stored yet)."""
        self.pending = next_seq
        """The value a checkpoint in flight writes."""
        self._stamp: CounterReporter | None = None

    def arm(self, stamp: CounterReporter | None = None) -> None:
        """Report moves through ``stamp`` (the one given before, by default; none ever given: a no-op): at once
        if the counter is not what the store holds, else at its next move."""
        if stamp is not None:
            self._stamp = stamp
        stamp = self._stamp
        if stamp is None:
            return
        if _NEXT.__get__(self, OutputCounter) != self.committed:
            self.__class__ = OutputCounter
            stamp.counter_moved()
        else:
            self.__class__ = _ReportingCounter

    def rearm(self) -> None:
        """A checkpoint wrote (or found unchanged) the counter's value: report the next move again. (If that
        checkpoint then fails, the host reports the counter again itself.)"""
        if self._stamp is not None:
            self.__class__ = _ReportingCounter


_NEXT: Final = OutputCounter.__dict__["next"]  # the slot itself, under the reporting property


class _ReportingCounter(OutputCounter):
    """An armed counter: the first store to ``next`` reports its subscription, then the object is a plain
    :class:`OutputCounter` again (same layout, so the ``__class__`` assignment is allowed)."""

    __slots__ = ()

    def _get_next(self) -> int:
        return int(_NEXT.__get__(self, OutputCounter))

    def _set_next(self, value: int) -> None:
        _NEXT.__set__(self, value)
        self.__class__ = OutputCounter  # type: ignore[assignment]  # later moves: plain slot stores
        stamp = self._stamp
        assert stamp is not None  # only armed counters report
        stamp.counter_moved()

    next = property(_get_next, _set_next)
