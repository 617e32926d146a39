"""Adversarial user values on the error paths of the operators: describing a failure must never fail.

An operator that builds the error of a user function's mistake (a selector returning ``None``, a key that cannot
be hashed) names the value in the message. A value may not describe itself: its ``__repr__`` raises (a proxy to a
closed resource), and an unhashable key's ``__hash__`` may raise an error whose ``__str__`` raises too. Then the
error policy must still decide as for any other user error: under ``skip`` the element is dropped and the query
goes on; without a policy the query ends with the operator's ``TypeError``. Nothing may escape to the source.
Fused and unfused, keyed and not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from reaqtive import keyed_execution
from reaqtive.operators._fusion import set_stage_fusion
from reaqtive.testing import RecordingPolicy, TestScheduler, on_completed, on_next


class Opaque:
    """A value whose ``repr`` raises."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class SpeechlessTypeError(TypeError):
    def __str__(self) -> str:
        raise RuntimeError("no message")


class OpaqueKey(Opaque):
    """A key that cannot be hashed and cannot be shown."""

    def __hash__(self) -> int:
        raise TypeError("no hash")


class SpeechlessKey(Opaque):
    """A key whose hash fails with an error that cannot be shown either."""

    def __hash__(self) -> int:
        raise SpeechlessTypeError


def opaque_for_2(x: int) -> object:
    return Opaque() if x == 2 else x


def none_for_opaque(x: object) -> object:
    return None if isinstance(x, Opaque) else x


CASES: dict[str, tuple[Callable[[Any], Any], list[int]]] = {
    "map returning None": (lambda xs: xs.map(opaque_for_2).map(none_for_opaque), [1, 3]),
    "map returning None, then filter": (
        lambda xs: xs.map(opaque_for_2).map(none_for_opaque).filter(lambda x: x > 0), [1, 3]),
    "map_indexed returning None": (
        lambda xs: xs.map(opaque_for_2).map_indexed(lambda x, i: none_for_opaque(x) and (x, i)), [(1, 0), (3, 1)]),
    "scan returning None": (
        lambda xs: xs.map(opaque_for_2).scan(0, lambda acc, x: None if isinstance(x, Opaque) else acc + x), [1, 4]),
    "group_by key that cannot be shown": (
        lambda xs: xs.group_by(lambda x: OpaqueKey() if x == 2 else x % 2).flat_map(lambda g: g.to_list()),
        [[1, 3]]),
    "group_by key whose hash error cannot be shown": (
        lambda xs: xs.group_by(lambda x: SpeechlessKey() if x == 2 else x % 2).flat_map(lambda g: g.to_list()),
        [[1, 3]]),
}


def run(create: Callable[[Any], Any], policy: RecordingPolicy | None) -> list[Any]:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(300))
    settings = policy.settings if policy is not None else None
    return scheduler.start(lambda: create(xs), context=scheduler.create_context(settings=settings)).messages


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "general"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_value_that_cannot_be_shown_is_skipped_under_skip(case: str, keyed: bool, fused: bool) -> None:
    create, expected = CASES[case]
    policy = RecordingPolicy(skip=True)
    previous = set_stage_fusion(fused)
    try:
        with keyed_execution(keyed):
            messages = run(create, policy)
    finally:
        set_stage_fusion(previous)
    assert [m.value.value for m in messages[:-1]] == expected  # type: ignore[union-attr]
    assert messages[-1].value == on_completed(300).value
    assert len(policy.calls) == 1
    assert isinstance(policy.calls[0].error, TypeError)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "general"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_value_that_cannot_be_shown_fails_the_query_without_a_policy(case: str, keyed: bool) -> None:
    create, _ = CASES[case]
    with keyed_execution(keyed):
        messages = run(create, None)
    error = messages[-1].value.error  # type: ignore[union-attr]
    assert isinstance(error, TypeError)
    assert "<" in str(error)  # the value is named by its type
