"""A recovered timer's place in line: what a timed stage saves of its pending timer task besides when it is due
and when it was armed (see ``docs/scheduler.md``, "A recovered timer keeps its place in line").

The virtual scheduler tells a task its *number*, its place among the tasks armed in the same tick
(``task.arrival``), when it queues it. A stage reads it from its pending task at a checkpoint (never per
element), saves it beside the arming time, and passes both back when it re-arms the recovered timer
(``ActionTask(..., armed=..., arrival=...)``). Other schedulers tell nothing: the number is ``None``, and a
recovered timer without one goes in line after the timers of its armed tick, as a state without it always did.
"""

from __future__ import annotations

from typing import Final, Protocol

from reaqtive.core.operator import StateReader

__all__ = ["MAX_NUMBER", "number_of", "read_number"]

MAX_NUMBER: Final = (1 << 32) - 1
"""The largest number a scheduler tells (its counter, masked to 32 bits)."""


class _Told(Protocol):
    arrival: int | None


def number_of(task: _Told | None) -> int | None:
    """The place in line the scheduler told ``task`` (``None``: no task, or a scheduler that tells none)."""
    return None if task is None else task.arrival


def read_number(reader: StateReader, field: str = "timer number") -> int | None:
    """Read a saved number (``None``, or from 0 to :data:`MAX_NUMBER`)."""
    return reader.read_optional_int(field, 0, MAX_NUMBER)
