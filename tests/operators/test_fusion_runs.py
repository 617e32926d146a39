"""A fused run's two loops over a logged run (issue 31): ``collect_run``, which the engine's reader calls when the
run's outputs go into the egress's list, sets the cursor only before a stage's rare path, when an exception
propagates and at the end; ``on_next_run`` sets it per element. Wherever something can look at the cursor (a
user error's policy, a ``None`` returned, an exception escaping) both show the same position, and they give the
same outputs, the same stopping point and the same state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, Query, from_iterable
from reaqtive.core.error_policy import ERROR_POLICY_SETTING
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import set_context_all, subscribe_all
from reaqtive.operators import _fusion
from reaqtive.operators._fusion import FusedEntry, FusedStep
from tests.operators.test_fusion import entries
from tests.support import Recorder

POS0 = 1000  # the log position of values[0]


def bound(query: Query[Any], recorder: Recorder, context: OperatorContext) -> FusedEntry:
    """The entry of ``query``'s one fused run, its stages subscribed and given ``context``, not started (a
    source that ends at once would end the run)."""
    handle: SubscriptionHandle = query.subscribe(recorder)
    subscribe_all(handle)
    set_context_all(handle, context)
    (entry,) = entries(handle)
    return entry


class Cursor:
    __slots__ = ("pos",)

    def __init__(self) -> None:
        self.pos = -1


class Source:
    """What the loop asks of its source: whether it was disposed."""

    def __init__(self) -> None:
        self._disposed = False


class Policy:
    """Skips a failed element unless it is ``stop_at``; records where the cursor stood when it was asked."""

    def __init__(self, cursor: Cursor, stop_at: int | None, seen: list[tuple[str, int, object]]) -> None:
        self.cursor, self.stop_at, self.seen = cursor, stop_at, seen

    def skips(self, operator: Any, error: Exception, element: object) -> bool:
        self.seen.append((type(error).__name__, self.cursor.pos, element))
        return element != self.stop_at


class Escape(BaseException):
    """Raised by a user function past the stages' ``except Exception``: it propagates out of the loop."""


@dataclass(frozen=True)
class Faults:
    """Where the user's functions fail: ``fail`` (the map raises), ``none`` (it returns ``None``), ``escape``
    (it raises past the stages), ``stop_at`` (the policy stops there instead of skipping)."""

    fail: frozenset[int] = frozenset()
    none: frozenset[int] = frozenset()
    escape: int | None = None
    stop_at: int | None = None


def functions(faults: Faults) -> tuple[Callable[[int], int | None], Callable[[int], bool],
                                       Callable[[int, int], int | None]]:
    def select(x: int) -> int | None:
        if x == faults.escape:
            raise Escape(x)
        if x in faults.fail:
            raise ValueError(x)
        return None if x in faults.none else x

    def keep(x: int) -> bool:
        if x % 7 == 3:
            raise KeyError(x)
        return x % 5 != 1

    def add(total: int, x: int) -> int | None:
        return None if x % 11 == 9 else total + x

    return select, keep, add


def run(loop: str, values: list[int], start: int, faults: Faults) -> tuple[Any, ...]:
    """``values[start:]`` through a fused map -> filter -> scan with ``loop``; everything it left behind."""
    select, keep, add = functions(faults)
    cursor, source, seen, outputs = Cursor(), Source(), [], []  # type: ignore[var-annotated]
    context = OperatorContext("test://runs", settings={ERROR_POLICY_SETTING: Policy(cursor, faults.stop_at, seen)})
    recorder = Recorder()
    entry = bound(from_iterable([]).map(select).filter(keep).scan(0, add), recorder, context)
    try:
        reached: object = getattr(entry, loop)(values, start, len(values), cursor, POS0, source, outputs.append)
    except Escape as error:
        reached = f"escaped {error.args[0]}"
    last = getattr(entry, "_s2")  # noqa: B009  (a generated slot)
    return reached, cursor.pos, outputs, seen, recorder.errors and repr(recorder.errors), last._value


FAULTS = st.builds(
    Faults,
    fail=st.frozensets(st.integers(0, 60), max_size=6),
    none=st.frozensets(st.integers(0, 60), max_size=3),
    escape=st.none() | st.integers(0, 60),
    stop_at=st.none() | st.integers(0, 60),
)


@settings(max_examples=120, deadline=None)
@example(values=list(range(40)), start=0, faults=Faults(fail=frozenset({4, 12}), none=frozenset({20})))
@example(values=list(range(40)), start=3, faults=Faults(fail=frozenset({4, 12}), stop_at=12))
@example(values=list(range(40)), start=0, faults=Faults(escape=17))
@example(values=[5, 6], start=2, faults=Faults())
@given(values=st.lists(st.integers(0, 60), max_size=50), start=st.integers(0, 5), faults=FAULTS)
def test_collect_run_leaves_what_on_next_run_leaves_wherever_the_cursor_can_be_seen(
    values: list[int], start: int, faults: Faults,
) -> None:
    start = min(start, len(values))
    assert run("collect_run", values, start, faults) == run("on_next_run", values, start, faults)


def test_a_source_disposed_by_a_side_effect_stops_both_loops_at_the_same_element() -> None:
    def loop_result(loop: str) -> tuple[Any, ...]:
        cursor, source, outputs = Cursor(), Source(), []  # type: ignore[var-annotated]

        def side_effect(x: int) -> None:
            if x == 4:
                source._disposed = True

        entry = bound(from_iterable([]).do(side_effect).map(lambda x: x * 2), Recorder(),
                      OperatorContext("test://runs"))
        reached = getattr(entry, loop)(list(range(10)), 0, 10, cursor, POS0, source, outputs.append)
        return reached, cursor.pos, outputs

    assert loop_result("collect_run") == loop_result("on_next_run") == (5, POS0 + 4, [0, 2, 4, 6, 8])


def entry_class(code: str) -> type[FusedEntry]:
    """The entry class of a run of one stage whose step is ``code``."""

    class Shape:
        fused_step = FusedStep("_selector", code)

    return _fusion._entry_class.__wrapped__((Shape,))  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("code", [
    """
    if {value} < 0:
        {stop}
    elif {stage}._check({value}):
        {stop}
    {result} = {fn}({value})
    """,
    """
    {result} = {fn}(
        {stage}._check({value}))
    """,
])
def test_a_step_calling_its_stage_where_no_statement_can_go_before_gets_the_per_element_loop(code: str) -> None:
    """An ``elif``'s condition, a line inside a statement of several lines: collect_run is on_next_run there."""
    names = entry_class(code).collect_run.__code__.co_names
    assert "on_next_run" in names and "pos" not in names


def test_a_step_calling_its_stage_on_a_line_of_its_own_gets_the_cursor_before_the_call() -> None:
    names = entry_class("""
        if {value} < 0:
            {stage}._check({value})
            {stop}
        {result} = {fn}({value})
        """).collect_run.__code__.co_names
    assert "on_next_run" not in names and "pos" in names


def test_the_fused_query_the_engine_runs_takes_collect_run_for_its_outputs() -> None:
    query: Query[int] = from_iterable([]).map(lambda x: x + 1).filter(bool)
    entry = bound(query, Recorder(), OperatorContext("test://runs"))
    outputs: list[int] = []
    cursor = Cursor()
    assert entry.collect_run([1, -1, 2], 0, 3, cursor, POS0, Source(), outputs.append) == 3
    assert outputs == [2, 3] and cursor.pos == POS0 + 2
