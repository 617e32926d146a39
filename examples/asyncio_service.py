"""A complete asyncio service around the engine: readings in over HTTP, standing queries, results streamed out.

Run (``pip install 'reaqtive[service]'`` gives FastAPI and uvicorn)::

    REAQTIVE_STORE=service.db uvicorn examples.asyncio_service:app --port 8000
    curl -X POST localhost:8000/events/readings -d '[{"sensor": "k1", "celsius": 31.5}]'
    curl -N 'localhost:8000/outputs/hot?after=-1'          # streams each alert as a JSON line, as it comes
    curl -X POST localhost:8000/acks/hot -d '{"seq": 0}'   # done with #0: the sink may trim it

What it shows (``docs/deploying.md`` explains each):

* the engine opens (and recovers) when the application starts, and **closes with a final checkpoint** when it
  stops: uvicorn turns SIGTERM into the application's shutdown, which awaits ``aclose()``;
* ``POST /events/{stream}``: each request's events are appended in one transaction, durable when the response is
  sent; the processing task is woken by the append (no polling);
* ``GET /outputs/{subscription}?after=N``: a consumer's cursor. Outputs come with their ``(subscription, seq)``
  id; a consumer that remembers the last ``seq`` it handled resumes after it and sees each output once, across
  restarts of the service (the replay after a crash produces the same outputs with the same ids);
* ``POST /acks/{subscription}``: acknowledgement, after which the durable sink may trim those outputs;
* ``GET /health`` and ``GET /metrics`` (Prometheus text, when ``reaqtive[prometheus]`` is installed).

The functions the queries use are registered by name, before the engine opens: recovery resolves stored queries
by these names.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

from reaqtive import FunctionRegistry, Query
from reaqtive.engine import DURABLE_SINK, AckError, ArtifactNotFoundError, EngineStatus, Output
from reaqtive.engine.aio import AsyncEngine

HOT_CELSIUS = 30.0
STREAMS = ("readings",)


def is_hot(reading: dict[str, Any]) -> bool:
    return float(reading["celsius"]) > HOT_CELSIUS


def count_one(count: int, _reading: object) -> int:
    return count + 1


def make_functions() -> FunctionRegistry:
    """The functions the service's queries use, by name (this module may run as ``__main__``)."""
    functions = FunctionRegistry()
    functions.register("is_hot", is_hot)
    functions.register("count_one", count_one)
    return functions


def queries() -> dict[str, Query[Any]]:
    """The standing queries: created once, recovered on every later start."""
    readings = Query.stream("readings")
    return {"hot": readings.filter(is_hot), "readings-seen": readings.scan(0, count_one)}


def create_missing(engine: AsyncEngine) -> None:
    """The first start creates the streams and queries; a restart finds them recovered."""
    existing = {info.uri for info in engine.engine.artifacts()}
    for stream in STREAMS:
        if stream not in existing:
            engine.engine.create_stream(stream)
    for uri, query in queries().items():
        if uri not in existing:
            engine.engine.create_subscription(uri, query)


def create_app(store: str | None = None, **engine_options: Any) -> FastAPI:
    """The application, on the store ``store`` (default: ``$REAQTIVE_STORE``, else ``service.db``)."""
    state: dict[str, AsyncEngine] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        target = store or os.environ.get("REAQTIVE_STORE", "service.db")
        options: dict[str, Any] = {"functions": make_functions(), "checkpoint_every_seconds": 5.0}
        options.update(engine_options)
        engine = await AsyncEngine.open(target, **options)
        await engine.call(create_missing, engine)
        async with engine:  # starts the processing task; on the way out: final checkpoint, close
            state["engine"] = engine
            yield
            state.clear()

    app = FastAPI(title="reaqtive example service", lifespan=lifespan)

    def engine_of() -> AsyncEngine:
        if "engine" not in state:
            raise HTTPException(503, "the engine is not running")
        return state["engine"]

    add_data_routes(app, engine_of)
    add_operations_routes(app, engine_of)
    return app


def add_data_routes(app: FastAPI, engine_of: Callable[[], AsyncEngine]) -> None:
    """Events in, outputs out, acknowledgements."""

    @app.post("/events/{stream}")
    async def append(stream: str, request: Request) -> dict[str, list[int]]:
        body = await request.json()
        events = body if isinstance(body, list) else [body]
        now = datetime.now(UTC)
        try:
            seqs = await engine_of().append_many(stream, [(event, now) for event in events])
        except ArtifactNotFoundError as error:
            raise HTTPException(404, str(error)) from error
        except (TypeError, ValueError) as error:
            raise HTTPException(422, str(error)) from error
        return {"seqs": seqs}

    @app.get("/outputs/{subscription}")
    async def outputs(subscription: str, after: int | None = None, limit: int | None = None) -> StreamingResponse:
        engine = engine_of()
        try:  # refused before the response starts: an unknown URI, or one whose outputs go elsewhere
            info = await engine.call(engine.engine.info, subscription)
        except ArtifactNotFoundError as error:
            raise HTTPException(404, str(error)) from error
        if info.kind != "subscription" or info.observer != DURABLE_SINK:
            raise HTTPException(404, f"{subscription!r} has no outputs in the durable sink")
        return StreamingResponse(_json_lines(engine.stream_outputs(subscription, after=after), limit),
                                 media_type="application/x-ndjson")

    @app.post("/acks/{subscription}")
    async def ack(subscription: str, request: Request) -> dict[str, int]:
        seq = (await request.json()).get("seq")
        try:
            await engine_of().ack(subscription, seq)
        except (AckError, TypeError) as error:
            raise HTTPException(422, str(error)) from error
        except ArtifactNotFoundError as error:
            raise HTTPException(404, str(error)) from error
        return {"acked": seq}


def add_operations_routes(app: FastAPI, engine_of: Callable[[], AsyncEngine]) -> None:
    """Health and metrics."""

    @app.get("/health")
    async def health() -> dict[str, Any]:
        engine = engine_of()
        status = engine.engine.status
        streams = engine.engine.streams()
        return {
            "status": status.value,
            "healthy": status in (EngineStatus.RUNNING, EngineStatus.CHECKPOINTING),
            "lag": {uri: s.appended - 1 - s.delivered for uri, s in streams.items()},
        }

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        try:
            from prometheus_client import CollectorRegistry, generate_latest

            from reaqtive.engine.metrics import PrometheusMetrics
        except ImportError as error:
            raise HTTPException(404, "metrics need reaqtive[prometheus]") from error
        registry = CollectorRegistry()
        PrometheusMetrics(engine_of().engine, registry=registry)
        return PlainTextResponse(generate_latest(registry).decode())


async def _json_lines(outputs: AsyncIterator[Output], limit: int | None) -> AsyncIterator[bytes]:
    """Each output as a JSON line, as it comes (at most ``limit``); ends when the engine stops."""
    if limit is not None and limit <= 0:
        return
    sent = 0
    async for output in outputs:
        yield json.dumps({"subscription": output.subscription, "seq": output.seq, "value": output.value}).encode()
        yield b"\n"
        sent += 1
        if sent == limit:  # without waiting for one more
            return


app = create_app()
"""The application uvicorn serves (``uvicorn examples.asyncio_service:app``), on ``$REAQTIVE_STORE``; tests call
:func:`create_app` with their own store. Nothing opens before the application starts."""
