"""A subscription's error policy (issue 30): a user function that raises stops its query visibly (FAILED), or the
element is skipped and kept as a dead letter; a FAILED query stays failed across restarts and runs again with
``restart_subscription``, exactly once. On SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query
from reaqtive.core.error_policy import ErrorContext
from reaqtive.engine import (
    ArtifactInUseError,
    Engine,
    EngineStatus,
    FunctionRegistry,
    SubscriptionFailedError,
    SubscriptionState,
)
from reaqtive.engine.aio import AsyncEngine
from reaqtive.engine.expressions import UnpersistableQueryError
from reaqtive.engine.failures import RecordedError
from tests.engine.store_targets import STORES, store_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def celsius(reading: dict[str, Any]) -> float:
    return float(reading["celsius"])


def celsius_or_zero(reading: dict[str, Any]) -> float:
    """The fix: a reading without its field, or with one that is not a number, counts as 0."""
    try:
        return float(reading.get("celsius", 0))
    except ValueError:
        return 0.0


def skip_key_errors(error: Exception, context: ErrorContext) -> str:
    return "skip" if isinstance(error, KeyError) else "stop"


def functions(fixed: bool = False) -> FunctionRegistry:
    registry = FunctionRegistry()
    registry.register("celsius", celsius_or_zero if fixed else celsius)
    registry.register("celsius_or_zero", celsius_or_zero)
    registry.register("skip_key_errors", skip_key_errors)
    registry.register("add", operator.add)
    return registry


READINGS: list[dict[str, Any]] = [{"celsius": 21}, {"celsius": 35}, {"sensor": "k1"}, {"celsius": 40},
                                  {"celsius": "hot"}, {"celsius": 12}]


def total(readings: list[dict[str, Any]], function: Any) -> list[float]:
    """The oracle: a running sum of ``function`` over the readings it does not fail on."""
    sums, running = [], 0.0
    for reading in readings:
        try:
            value = function(reading)
        except (KeyError, ValueError):
            continue
        running += value
        sums.append(running)
    return sums


QUERY = Query.stream("r").map(celsius).scan(0.0, operator.add)


@pytest.fixture(params=STORES)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    return store_sql(request.param, tmp_path, request).target


def open_engine(target: Path | str, fixed: bool = False, **options: Any) -> Engine:
    return Engine(target, functions=functions(fixed), start=T0, synchronous="NORMAL", **options)


def values(engine: Engine, uri: str) -> list[Any]:
    return [output.value for output in engine.outputs(uri)]


def test_stop_makes_the_subscription_failed_visibly_and_it_stays_failed_across_a_restart(target: Path | str) -> None:
    with open_engine(target) as engine:
        engine.create_stream("r")
        engine.create_subscription("q", QUERY)
        engine.create_subscription("other", Query.stream("r").map(celsius_or_zero).scan(0.0, operator.add))
        engine.append_many("r", [(reading, at(i)) for i, reading in enumerate(READINGS)])
        engine.process()
        status = engine.subscription_status("q")
        assert status.state is SubscriptionState.FAILED
        assert (status.error_type, status.position, status.operator) == ("KeyError", 3, "reaqtive:map")
        assert engine.status is EngineStatus.DEGRADED
        assert [fault.uri for fault in engine.faults] == ["q"]
        assert isinstance(engine.subscription_error("q"), KeyError)
        stopped = engine.stopped_error("q")
        assert isinstance(stopped, SubscriptionFailedError) and stopped.failure is not None
        assert values(engine, "q") == [21.0, 56.0], "the outputs before the failure stay"
        assert engine.subscription_status("other").state is SubscriptionState.RUNNING
        engine.checkpoint()
    with open_engine(target) as engine:
        status = engine.subscription_status("q")
        assert status.state is SubscriptionState.FAILED and status.position == 3
        assert engine.status is EngineStatus.DEGRADED
        assert isinstance(engine.subscription_error("q"), RecordedError)
        engine.append("r", {"celsius": 1}, at(10))
        engine.process()
        assert values(engine, "q") == [21.0, 56.0], "a FAILED query does not run after a restart"


def test_restart_after_a_fix_goes_on_exactly_once(target: Path | str) -> None:
    with open_engine(target, checkpoint_every_events=2) as engine:
        engine.create_stream("r")
        engine.create_subscription("q", QUERY)
        engine.append_many("r", [(reading, at(i)) for i, reading in enumerate(READINGS[:4])])
        engine.process()
        assert engine.subscription_status("q").state is SubscriptionState.FAILED
        engine.create_subscription("running", Query.stream("r"))
        with pytest.raises(ArtifactInUseError, match="only a failed or stopped one restarts"):
            engine.restart_subscription("running")
    with open_engine(target, fixed=True) as engine:  # the host registered a fixed function under the same name
        engine.restart_subscription("q")
        assert engine.subscription_status("q").state is SubscriptionState.CATCHING_UP
        engine.process()
        engine.append_many("r", [({"celsius": 5}, at(10))])
        engine.process()
        assert engine.subscription_status("q").state is SubscriptionState.RUNNING
        assert engine.status is EngineStatus.RUNNING and engine.faults == []
        assert values(engine, "q") == total([*READINGS[:4], {"celsius": 5}], celsius_or_zero)
        assert [o.seq for o in engine.outputs("q")] == list(range(5))


def test_restart_can_skip_the_element_that_failed_it(target: Path | str) -> None:
    with open_engine(target) as engine:
        engine.create_stream("r")
        engine.create_subscription("q", QUERY)
        engine.append_many("r", [(reading, at(i)) for i, reading in enumerate(READINGS[:4])])
        engine.process()
        engine.restart_subscription("q", skip_failed=True)
        engine.process()
        assert values(engine, "q") == [21.0, 56.0, 96.0], "the reading without its field is skipped, once"
        (letter,) = [d for d in engine.dead_letters(subscription="q")]
        assert letter.error_type == "KeyError" and letter.pos == 3
        engine.append("r", {"sensor": "k2"}, at(10))  # its own policy again: stop
        engine.process()
        assert engine.subscription_status("q").state is SubscriptionState.FAILED


@pytest.mark.parametrize("policy", ["skip", "skip_key_errors"])
def test_skip_drops_the_failing_elements_and_keeps_each_as_a_dead_letter_once(
    target: Path | str, policy: str
) -> None:
    on_error: Any = "skip" if policy == "skip" else skip_key_errors
    with open_engine(target) as engine:
        engine.create_stream("r")
        engine.create_subscription("q", QUERY, on_error=on_error)
        engine.append_many("r", [(reading, at(i)) for i, reading in enumerate(READINGS)])
        engine.process(max_events=4)
        engine._outputs.buffer.clear()  # a kill: what the sink had not written is lost, and nothing was checkpointed
    with open_engine(target) as engine:
        engine.process()
        if policy == "skip":
            assert values(engine, "q") == total(READINGS, celsius)
            letters = engine.dead_letters(subscription="q")
            assert [(d.pos, d.error_type) for d in letters] == [(3, "KeyError"), (5, "ValueError")]
            assert letters[0].value == {"sensor": "k1"} and "celsius" in letters[0].message
        else:
            assert engine.subscription_status("q").state is SubscriptionState.FAILED, "ValueError: stop"
            assert values(engine, "q") == [21.0, 56.0, 96.0]
            assert [(d.pos, d.error_type) for d in engine.dead_letters(subscription="q")] == [(3, "KeyError")]


def test_a_decision_function_must_be_persistable(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", start=T0) as engine:
        engine.create_stream("r")
        with pytest.raises(UnpersistableQueryError):
            engine.create_subscription("q", Query.stream("r"), on_error=lambda error, context: "skip")
        with pytest.raises(ValueError, match="on_error must be 'stop', 'skip' or a function"):
            engine.create_subscription("q", Query.stream("r"), on_error="ignore")  # type: ignore[arg-type]
        assert "q" not in [info.uri for info in engine.artifacts()]


def test_the_engine_wide_default_applies_to_subscriptions_without_their_own(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", functions=functions(), start=T0, on_error="skip") as engine:
        engine.create_stream("r")
        engine.create_subscription("q", QUERY)
        engine.create_subscription("strict", QUERY, on_error="stop")
        engine.append_many("r", [(reading, at(i)) for i, reading in enumerate(READINGS)])
        engine.process()
        assert values(engine, "q") == total(READINGS, celsius)
        assert engine.subscription_status("strict").state is SubscriptionState.FAILED
        assert engine.subscription_status("q").on_error == "default"


def test_stream_outputs_of_a_failed_subscription_raises_after_its_outputs(tmp_path: Path) -> None:
    async def main() -> None:
        async with await AsyncEngine.open(tmp_path / "s.db", functions=functions(), start=T0) as engine:
            await engine.create_stream("r")
            await engine.create_subscription("q", QUERY)
            await engine.append_many("r", [(reading, at(i)) for i, reading in enumerate(READINGS)])
            seen: list[float] = []
            with pytest.raises(SubscriptionFailedError, match="KeyError"):
                async for output in engine.stream_outputs("q", after=-1):
                    seen.append(output.value)
            assert seen == [21.0, 56.0]

    asyncio.run(asyncio.wait_for(main(), 30))
