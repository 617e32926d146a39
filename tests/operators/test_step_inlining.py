"""Which steps ``runs_inline`` compiles into their stage, and that a step of any other shape is called instead and
computes the same: the inlining reads the step's own source, so a shape it does not understand must never change
what the stage does."""

from __future__ import annotations

from typing import Any

import pytest

from reaqtive.core.expression import Expression
from reaqtive.core.streams import Subscriber
from reaqtive.operators.distinct import DistinctStep
from reaqtive.operators.keyed_steps import SKIP, KeyedStep
from reaqtive.operators.step_stage import StepStage, inlinable, runs_inline


class PlainStep(KeyedStep):
    """Counts elements and passes every other one."""

    initial = 0

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        """A docstring
        of two lines."""
        if state % 2:
            return state + 1, SKIP
        return state + 1, value


class OtherNames(KeyedStep):
    initial = 0

    def next(self, count: Any, element: Any) -> tuple[Any, Any]:  # type: ignore[override]
        return count + 1, element


class ReturnOnTheSameLine(KeyedStep):
    initial = 0

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state % 2: return state + 1, SKIP  # noqa: E701
        return state + 1, value


class WithALoop(KeyedStep):
    initial = 0

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        for _ in range(1):
            if state % 2:
                return state + 1, SKIP
        return state + 1, value


class AssignsItsParameter(KeyedStep):
    initial = 0

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        state = state + 1
        return state, value


class UsesTheInlinedLocals(KeyedStep):
    initial = 0

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        output = value
        return state + 1, output


class PassesItself(KeyedStep):
    initial = 0

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        return state + 1, id(self) and value


class MultiLineReturn(KeyedStep):
    initial = 0

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        return (state + 1,
                value)


class MultiLineString(KeyedStep):
    initial = 0

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        text = """
        return 1, 2"""
        return state + 1, value + 0 * len(text)


@pytest.mark.parametrize("step", [OtherNames, ReturnOnTheSameLine, WithALoop, AssignsItsParameter,
                                  UsesTheInlinedLocals, PassesItself, MultiLineReturn, MultiLineString])
def test_a_step_of_another_shape_is_not_inlined(step: type[KeyedStep]) -> None:
    assert inlinable(step) is None


def test_a_plain_step_with_a_docstring_is_inlined() -> None:
    assert inlinable(PlainStep) is not None


class _Stage(StepStage):
    def __init__(self, query: Expression[Any], downstream: Subscriber[Any], step: KeyedStep) -> None:
        super().__init__(downstream, query, step)  # type: ignore[arg-type]


@pytest.mark.parametrize("step", [PlainStep, ReturnOnTheSameLine, WithALoop, MultiLineString])
def test_decorating_any_shape_gives_a_stage_that_computes_what_the_step_computes(step: type[KeyedStep]) -> None:
    stage_type = type(f"{step.__name__}Stage", (_Stage,), {"__slots__": (), "name": "test:stage", "version": (1,)})
    runs_inline(stage_type)(step)
    inlined = stage_type.on_next is not StepStage.on_next
    assert inlined == (step is PlainStep)
    seen: list[Any] = []

    class Sink:
        def on_next(self, value: Any) -> None:
            seen.append(value)

    stage = stage_type(None, Sink(), step())  # type: ignore[arg-type]
    for value in range(10):
        stage.on_next(value)
    expected, state = [], step.initial
    for value in range(10):
        state, output = step().next(state, value)
        if output is not SKIP:
            expected.append(output)
    assert seen == expected
    assert expected == ([0, 2, 4, 6, 8] if step is not MultiLineString else list(range(10)))


@pytest.mark.parametrize("inline", [True, False])
def test_a_distinct_key_seen_before_leaves_the_stage_unchanged(inline: bool) -> None:
    """The set of keys changes in place: only a new key marks the state changed (a differential checkpoint then
    saves it), not an element dropped as seen before."""
    stage_type = type("DistinctTestStage", (_Stage,), {"__slots__": (), "name": "test:stage", "version": (1,)})
    if inline:
        runs_inline(stage_type)(DistinctStep)
    assert (stage_type.on_next is not StepStage.on_next) == inline

    class Sink:
        def on_next(self, value: Any) -> None:
            pass

    stage = stage_type(None, Sink(), DistinctStep(None))  # type: ignore[arg-type]
    changes = []
    for value in [1, 2, 1, 1, 3, 2]:
        stage._state.changed = False
        stage.on_next(value)
        changes.append(stage._state.changed)
    assert changes == [True, True, False, False, True, False]
