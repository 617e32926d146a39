"""StepStage and runs_inline (reaqtive.operators.step_stage): a stage run by its operator's keyed step gives the
same results whether the step's ``next`` is compiled into the stage's ``on_next`` or called per element."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reaqtive import from_iterable
from reaqtive.core.expression import Expression
from reaqtive.core.streams import Subscriber
from reaqtive.operators import take_while
from reaqtive.operators.step_stage import StepStage, runs_inline


def _values(query: Any) -> tuple[list[Any], list[type]]:
    values: list[Any] = []
    errors: list[type] = []
    query.run(values.append, on_error=lambda error: errors.append(type(error)))
    return values, errors


def test_a_step_without_source_leaves_the_stage_calling_it(monkeypatch: pytest.MonkeyPatch) -> None:
    class Stage(StepStage):
        name = "test:stage"

        def __init__(self, query: Expression[Any], downstream: Subscriber[Any]) -> None:
            raise NotImplementedError

    def no_source(obj: object) -> str:
        raise OSError("no source")

    monkeypatch.setattr(inspect, "getsource", no_source)
    runs_inline(Stage)(take_while.TakeWhileStep)
    assert Stage.on_next is StepStage.on_next


@given(st.lists(st.integers(-5, 5), max_size=20), st.integers(-5, 5), st.booleans())
def test_the_inlined_stage_gives_what_the_step_called_per_element_gives(
    values: list[int], bound: int, inclusive: bool
) -> None:
    def predicate(x: int) -> bool:
        if x == 0:
            raise ZeroDivisionError("a user error")
        return x < bound

    inlined = _values(from_iterable(values).take_while(predicate, inclusive=inclusive))
    stage = take_while.TakeWhile
    compiled = stage.on_next
    try:
        stage.on_next = StepStage.on_next  # type: ignore[method-assign]
        called = _values(from_iterable(values).take_while(predicate, inclusive=inclusive))
    finally:
        stage.on_next = compiled  # type: ignore[method-assign]
    assert inlined == called


@pytest.mark.parametrize(
    ("query", "keyed"),
    [
        (from_iterable([1]).sum(), True),
        (from_iterable([[1]]).sum([]), False),  # a start every key would share, changed in place: general path
        (from_iterable([1]).first_or_default(0), True),
        (from_iterable([1]).first_or_default([0]), False),
        (from_iterable([1]).element_at_or_default(3, (0,)), True),
        (from_iterable([1]).element_at_or_default(3, {0}), False),
    ],
    ids=["sum", "sum-list-start", "first_or_default", "first_or_default-list", "element_at-tuple", "element_at-set"],
)
def test_step_operator_keys_a_node_unless_its_owned_value_may_change_in_place(query: Any, keyed: bool) -> None:
    from reaqtive.operators.keyed_steps import keyed_step_factory

    factory = keyed_step_factory(query.op)
    assert factory is not None and factory.__module__.startswith("reaqtive.operators.")  # (the operator's module)
    assert (factory(query) is not None) == keyed


def test_step_operator_builds_each_op_its_own_step() -> None:
    from reaqtive.operators.keyed_steps import keyed_step_factory

    plain = from_iterable([1]).first()
    with_default = from_iterable([1]).first_or_default(5)
    assert _values(from_iterable([]).first_or_default(5)) == ([5], [])
    assert _values(from_iterable([]).first()) == ([], [ValueError])
    for query in (plain, with_default):
        factory = keyed_step_factory(query.op)
        assert factory is not None
        assert factory(query)._op == query.op  # type: ignore[union-attr]  # (its messages name the node's op)
