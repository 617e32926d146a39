"""One rule for every call that names a subscription or a stream: an unknown one (never created, or deleted)
raises :class:`ArtifactNotFoundError` naming it, sync and async alike, instead of answering as if it existed
(``outputs`` gave ``[]``, ``is_paused`` gave ``False``). The listings that filter records which outlive their
artifact (``dead_letters(stream=...)``/``(subscription=...)``) and the existence check ``created_at`` (``None``:
there is none) are the documented exceptions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from reaqtive import Query
from reaqtive.engine import ArtifactInUseError, ArtifactNotFoundError, Engine
from reaqtive.engine.aio import AsyncEngine

T0 = datetime(2026, 1, 1, tzinfo=UTC)

SUBSCRIPTION_CALLS: dict[str, Callable[[Engine, str], object]] = {
    "outputs": lambda e, u: e.outputs(u),
    "outputs(after, limit)": lambda e, u: e.outputs(u, after=0, limit=10),
    "ack": lambda e, u: e.ack(u, 0),
    "info": lambda e, u: e.info(u),
    "pause": lambda e, u: e.pause(u),
    "resume": lambda e, u: e.resume(u),
    "is_paused": lambda e, u: e.is_paused(u),
    "is_behind": lambda e, u: e.is_behind(u),
    "priority": lambda e, u: e.priority(u),
    "set_priority": lambda e, u: e.set_priority(u, 1),
    "stopped_error": lambda e, u: e.stopped_error(u),
    "subscription_error": lambda e, u: e.subscription_error(u),
    "subscription_status": lambda e, u: e.subscription_status(u),
    "restart_subscription": lambda e, u: e.restart_subscription(u),
    "delete_subscription": lambda e, u: e.delete_subscription(u),
}
STREAM_CALLS: dict[str, Callable[[Engine, str], object]] = {
    "append": lambda e, u: e.append(u, 1, T0),
    "append_many": lambda e, u: e.append_many(u, [(1, T0)]),
    "extend": lambda e, u: e.extend(u, [(1, T0)]),
    "delete_stream": lambda e, u: e.delete_stream(u),
}
ASYNC_CALLS: dict[str, Callable[[AsyncEngine, str], Any]] = {
    "outputs": lambda e, u: e.outputs(u),
    "ack": lambda e, u: e.ack(u, 0),
    "pause": lambda e, u: e.pause(u),
    "resume": lambda e, u: e.resume(u),
    "set_priority": lambda e, u: e.set_priority(u, 1),
    "restart_subscription": lambda e, u: e.restart_subscription(u),
    "append": lambda e, u: e.append(u, 1, T0),
    "append_many": lambda e, u: e.append_many(u, [(1, T0)]),
    "stream_outputs": lambda e, u: anext(aiter(e.stream_outputs(u))),
}


def make_engine() -> Engine:
    """An engine with a stream and a subscription on it, and a subscription and a stream that were deleted."""
    engine = Engine.in_memory(start=T0)
    engine.create_stream("s")
    engine.create_stream("s-gone")
    engine.create_subscription("q://live", Query.stream("s"))
    engine.create_subscription("q://gone", Query.stream("s"))
    engine.append("s", 1, T0)
    engine.process()
    engine.delete_subscription("q://gone")
    engine.delete_stream("s-gone")
    return engine


@pytest.fixture
def engine() -> Iterator[Engine]:
    with make_engine() as engine:
        yield engine


@pytest.mark.parametrize("call", SUBSCRIPTION_CALLS.values(), ids=SUBSCRIPTION_CALLS.keys())
@pytest.mark.parametrize("uri", ["q://nosuch", "q://gone"])
def test_every_call_naming_an_unknown_subscription_raises(
    call: Callable[[Engine, str], object], uri: str, engine: Engine
) -> None:
    with pytest.raises(ArtifactNotFoundError, match=repr(uri)):
        call(engine, uri)


@pytest.mark.parametrize("call", SUBSCRIPTION_CALLS.values(), ids=SUBSCRIPTION_CALLS.keys())
def test_every_call_naming_a_subscription_that_exists_answers(
    call: Callable[[Engine, str], object], engine: Engine
) -> None:
    """The other side of the rule: the same calls on a live subscription do not raise it (restarting one that
    runs is refused for that reason, not as unknown)."""
    try:
        call(engine, "q://live")
    except ArtifactInUseError as error:
        assert not isinstance(error, ArtifactNotFoundError)
        assert "runs: only a failed or stopped one restarts" in str(error)


@pytest.mark.parametrize("call", STREAM_CALLS.values(), ids=STREAM_CALLS.keys())
@pytest.mark.parametrize("uri", ["nosuch", "s-gone"])
def test_every_call_naming_an_unknown_stream_raises(
    call: Callable[[Engine, str], object], uri: str, engine: Engine
) -> None:
    with pytest.raises(ArtifactNotFoundError, match=repr(uri)):
        call(engine, uri)


@pytest.mark.parametrize("call", ASYNC_CALLS.values(), ids=ASYNC_CALLS.keys())
@pytest.mark.parametrize("uri", ["q://nosuch", "q://gone"])
def test_every_async_call_naming_an_unknown_artifact_raises(
    call: Callable[[AsyncEngine, str], Any], uri: str
) -> None:
    async def main() -> None:
        async with AsyncEngine(make_engine()) as engine:
            with pytest.raises(ArtifactNotFoundError, match=repr(uri)):
                await call(engine, uri)

    asyncio.run(main())


def test_outputs_of_a_live_subscription_are_listed(engine: Engine) -> None:
    assert [output.value for output in engine.outputs("q://live")] == [1]


def test_the_documented_exceptions_answer_for_an_unknown_artifact(engine: Engine) -> None:
    assert engine.created_at("q://gone") is None, "created_at is the existence check"
    assert engine.dead_letters("s-gone") == [] and engine.dead_letters(subscription="q://gone") == [], (
        "dead letters outlive their artifact: the listing filters them"
    )
