"""Pipelines for the fusion tests: chains of fusible stages (and stages that split runs), described as data so that
hypothesis can draw them and every run builds fresh, identical user functions that log their calls."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._fusion import set_stage_fusion

NEVER = -1
"""A ``fail_on`` residue no value has: the function never raises."""


@dataclass(frozen=True)
class Step:
    """One stage: ``kind``, a parameter, and the residue (value mod 13) on which its function raises."""

    kind: str
    param: int = 1
    fail_on: int = NEVER


FUSIBLE_KINDS = ("map", "map_none", "filter", "filter_bad_bool", "do", "scan", "scan_seed")
SPLITTING_KINDS = ("take", "map_indexed", "distinct_until_changed")
"""Stages that do not fuse: a run ends at them."""


class _BadBool:
    """A predicate result whose truth cannot be told: ``bool()`` of it raises."""

    def __bool__(self) -> bool:
        raise ArithmeticError("no truth value")


@dataclass
class Calls:
    """What the user's functions saw, in order: ``(stage index, kind, argument)``; and, for ``dispose`` steps,
    the handle to dispose (set once the query is subscribed)."""

    log: list[tuple[int, str, Any]] = field(default_factory=list)
    handle: SubscriptionHandle | None = None


def _check(calls: Calls | None, index: int, kind: str, value: Any, fail_on: int) -> None:
    if calls is not None:
        calls.log.append((index, kind, value))
    if fail_on != NEVER and value % 13 == fail_on:
        raise ValueError(f"stage {index} ({kind}) fails on {value}")


def _stage(query: Query[Any], index: int, step: Step, calls: Calls | None) -> Query[Any]:
    kind, param, fail_on = step.kind, step.param, step.fail_on

    if kind == "map":

        def select(x: int) -> int:
            _check(calls, index, kind, x, fail_on)
            return x * param + 1

        return query.map(select)
    if kind == "map_none":

        def select_or_none(x: int) -> int | None:
            _check(calls, index, kind, x, fail_on)
            return None if x % 11 == param % 11 else x + param

        return query.map(select_or_none)
    if kind == "filter":

        def keep(x: int) -> bool:
            _check(calls, index, kind, x, fail_on)
            return x % (param + 1) != 0

        return query.filter(keep)
    if kind == "filter_bad_bool":

        def keep_or_bad(x: int) -> object:
            _check(calls, index, kind, x, fail_on)
            return _BadBool() if x % 7 == param % 7 else x % 2 == 0

        return query.filter(keep_or_bad)
    if kind == "do":

        def look(x: int) -> None:
            _check(calls, index, kind, x, fail_on)

        return query.do(look)
    if kind == "dispose":  # a side effect that disposes its own subscription, from inside the stage

        def dispose_at(x: int) -> None:
            _check(calls, index, kind, x, NEVER)
            if calls is not None and calls.handle is not None and x % 13 == fail_on:
                calls.handle.dispose()

        return query.do(dispose_at)
    if kind == "scan":

        def add(acc: int, x: int) -> int:
            _check(calls, index, kind, x, fail_on)
            return acc + x

        return query.scan(add)
    if kind == "scan_seed":

        def add_seeded(acc: int, x: int) -> int:
            _check(calls, index, kind, x, fail_on)
            return (acc + x) % 1000

        return query.scan(param, add_seeded)
    if kind == "take":
        return query.take(param + 3)
    if kind == "map_indexed":
        return query.map_indexed(lambda x, i: x + i)
    if kind == "distinct_until_changed":
        return query.distinct_until_changed()
    raise AssertionError(kind)


def build(source: Query[Any], steps: tuple[Step, ...], calls: Calls | None = None) -> Query[Any]:
    """``source`` with ``steps`` applied in order."""
    query = source
    for index, step in enumerate(steps):
        query = _stage(query, index, step, calls)
    return query


def steps_strategy(*, dispose: bool = False, max_size: int = 8) -> st.SearchStrategy[tuple[Step, ...]]:
    """Chains of mostly fusible stages; each function raises on one residue of 13 now and then."""
    kinds = FUSIBLE_KINDS * 3 + SPLITTING_KINDS + (("dispose",) if dispose else ())
    step = st.builds(
        Step,
        kind=st.sampled_from(kinds),
        param=st.integers(1, 4),
        fail_on=st.one_of(st.just(NEVER), st.just(NEVER), st.integers(0, 12)),
    )
    return st.lists(step, min_size=1, max_size=max_size).map(tuple)


@contextmanager
def fusion(enabled: bool) -> Iterator[None]:
    """Bind with fusion on or off inside the block (the process-wide switch, restored after)."""
    previous = set_stage_fusion(enabled)
    try:
        yield
    finally:
        set_stage_fusion(previous)


class Alternating:
    """A query factory for the checkpoint harness that binds each world in the other form than the one before:
    every restart crosses from fused to unfused or back. It sets the process-wide switch when the harness calls
    it (right before the world subscribes and starts); the test restores the switch afterwards."""

    def __init__(self, create: Callable[..., Subscribable[Any]], first: bool) -> None:
        self._create = create
        self._next = first
        self.modes: list[bool] = []

    def __call__(self, *sources: Any) -> Subscribable[Any]:
        fused, self._next = self._next, not self._next
        self.modes.append(fused)
        set_stage_fusion(fused)
        return self._create(*sources)
