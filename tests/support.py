"""Test doubles for the core tests (the full virtual-time kit lives in reaqtive.testing)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reaqtive.core.streams import LONG_MAX, Subscription

if TYPE_CHECKING:
    from reaqtive.engine import Engine


class Recorder:
    """A Reactive Streams subscriber that records every signal.

    ``initial``: demand requested in ``on_subscribe`` (0 = none). ``per_item``: demand re-requested from inside
    each ``on_next`` (0 = none). It checks rule 1.1 itself: never more elements than requested.
    """

    def __init__(self, initial: int = 0, per_item: int = 0) -> None:
        self.initial = initial
        self.per_item = per_item
        self.subscription: Subscription | None = None
        self.values: list[Any] = []
        self.errors: list[BaseException] = []
        self.completed = 0
        self.subscribed = 0
        self.requested = 0
        self.violations: list[str] = []

    def on_subscribe(self, subscription: Subscription) -> None:
        if subscription is None:
            raise TypeError("rule 2.13")
        self.subscribed += 1
        self.subscription = subscription
        if self.initial:
            self.request(self.initial)

    def request(self, n: int) -> None:
        if n > 0:
            self.requested = min(self.requested + n, LONG_MAX)
        assert self.subscription is not None
        self.subscription.request(n)

    def cancel(self) -> None:
        assert self.subscription is not None
        self.subscription.cancel()

    def on_next(self, value: Any) -> None:
        if value is None:
            raise TypeError("rule 2.13")
        self.values.append(value)
        if self.requested != LONG_MAX and len(self.values) > self.requested:
            self.violations.append(f"rule 1.1: element {len(self.values)} with only {self.requested} requested")
        if self.terminated:
            self.violations.append("rule 1.7: on_next after a terminal signal")
        if self.per_item:
            self.request(self.per_item)

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("rule 2.13")
        if self.terminated:
            self.violations.append("rule 1.7: second terminal signal")
        self.errors.append(error)

    def on_complete(self) -> None:
        if self.terminated:
            self.violations.append("rule 1.7: second terminal signal")
        self.completed += 1

    @property
    def terminated(self) -> bool:
        return bool(self.errors) or self.completed > 0


def stable_id(value: object) -> str:
    """A parametrized test's id from ``repr(value)`` without memory addresses (``<function f at 0x7f...>``) and with
    a set's elements sorted (their order changes with the hash seed of the process): every process must give a
    test the same id (pytest-xdist's workers each collect the suite, and refuse to run when their collections
    differ)."""
    if isinstance(value, set | frozenset):
        inner = ", ".join(sorted(stable_id(element) for element in value))
        return f"{{{inner}}}" if isinstance(value, set) else f"frozenset({{{inner}}})"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def memory_held_while_open(open_engine: Callable[[], Engine], look: Callable[[Engine], object] = lambda _: None) -> int:
    """Python memory an engine holds once ``open_engine()`` returned (tracemalloc, after a collection), as
    bench/engine.py measures it; ``look`` sees the engine before it is closed."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        engine = open_engine()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        try:
            look(engine)
        finally:
            engine.close()
    finally:
        tracemalloc.stop()
    return held
