"""Adversarial user errors: the error policy must hold whatever the user's function raises, and health must show it.

A user function may raise an exception that cannot even describe itself (its ``__str__`` raises: a wrapper around
a closed resource, a message built lazily from a field that is gone). The policy still decides: under ``skip`` the
element is a dead letter and the query goes on; under ``stop`` the query is FAILED (not a fault): the same as for
any other error of a user function. An element that cannot describe itself (its ``__repr__`` raises) is kept as a
dead letter too.
"""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from reaqtive import Query
from reaqtive.engine import Engine, FunctionRegistry

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class SpeechlessError(Exception):
    """An error whose message cannot be made."""

    def __str__(self) -> str:
        raise RuntimeError("the message is gone")


class Opaque:
    """An element without a ``repr``."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def speechless_on_1(x: int) -> int:
    if x == 1:
        raise SpeechlessError
    return x


def opaque_on_0(x: int) -> object:
    return Opaque() if x == 0 else x


def refuse_opaque(x: object) -> object:
    if isinstance(x, Opaque):
        raise ValueError("opaque")
    return x


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (speechless_on_1, opaque_on_0, refuse_opaque):
        registry.register(function.__name__, function)
    return registry


def run(path: Path, query: Query[object], policy: str, values: list[int]) -> Engine:
    engine = Engine(path, start=T0, functions=functions())
    engine.create_stream("a")
    engine.create_subscription("q", query, on_error=policy)  # type: ignore[arg-type]
    engine.create_subscription("sum", Query.stream("a").scan(0, operator.add))
    for i, value in enumerate(values):
        engine.append("a", value, T0 + timedelta(seconds=i + 1))
    engine.process()
    return engine


def test_an_element_without_a_repr_is_skipped_as_a_dead_letter(tmp_path: Path) -> None:
    engine = run(tmp_path / "s.db", Query.stream("a").map(opaque_on_0).map(refuse_opaque), "skip", [2, 0, 3])
    assert [o.value for o in engine.outputs("q")] == [2, 3]
    assert [(d.subscription, d.pos) for d in engine.dead_letters()] == [("q", 2)]  # (the second event)
    assert engine.subscription_status("q").state.value == "running"
    engine.close()




def test_a_speechless_error_under_skip_is_a_dead_letter_and_the_query_goes_on(tmp_path: Path) -> None:
    engine = run(tmp_path / "s.db", Query.stream("a").map(speechless_on_1), "skip", [2, 1, 3])
    assert engine.subscription_status("q").state.value == "running"
    assert [o.value for o in engine.outputs("q")] == [2, 3]
    assert [(d.subscription, d.pos) for d in engine.dead_letters()] == [("q", 2)]  # (the second event)
    assert not engine.faults
    engine.close()


def test_a_speechless_error_under_stop_fails_the_query_visibly(tmp_path: Path) -> None:
    engine = run(tmp_path / "s.db", Query.stream("a").map(speechless_on_1), "stop", [2, 1, 3])
    assert engine.subscription_status("q").state.value == "failed"
    assert isinstance(engine.subscription_error("q"), SpeechlessError)
    assert [o.value for o in engine.outputs("sum")] == [2, 3, 6]
    engine.close()


class OnceEach:
    """An observer function that refuses every output once, then takes it (a connector whose every first write
    times out): it never fails twice in a row on one output, and every call after a refusal gets through."""

    def __init__(self) -> None:
        self.refused: set[int] = set()
        self.got: list[int] = []

    def __call__(self, output: object) -> None:
        seq: int = output.seq  # type: ignore[attr-defined]
        if seq not in self.refused:
            self.refused.add(seq)
            raise ConnectionError(f"the first write of #{seq} timed out")
        self.got.append(seq)


def test_an_observer_that_refuses_each_output_once_gets_every_output(tmp_path: Path) -> None:
    observer = OnceEach()
    registry = functions()
    registry.register("once_each", observer)
    engine = Engine(tmp_path / "s.db", start=T0, functions=registry, observer_backoff=0.0, observer_retries=3)
    engine.create_stream("a")
    engine.define_observer("obs://once-each", observer)
    engine.create_subscription("q", Query.stream("a").scan(0, operator.add), observer="obs://once-each")
    for i in range(8):
        engine.append("a", i, T0 + timedelta(seconds=i + 1))
    for _ in range(40):  # a refused output is handed again at the next processing
        engine.process()
    assert not engine.faults
    assert engine.subscription_status("q").state.value == "running"
    assert observer.got == list(range(8))
    engine.close()
