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
  sent; the processing task is woken by the append (no polling). ``POST /events/readings`` takes
  :class:`Reading` bodies (a JSON array of them, or one): FastAPI validates them, so a bad body (a field missing,
  a value of the wrong type) gets 422 with FastAPI's usual detail and nothing of it is appended. The stream is
  *typed* too (``create_stream("readings", schema="reading")``): the engine checks every event appended to it
  from anywhere else against the same model, and stores its validated JSON form;
* ``GET /outputs/{subscription}?after=N``: a consumer's cursor. Outputs come with their ``(subscription, seq)``
  id; a consumer that remembers the last ``seq`` it handled resumes after it and sees each output once, across
  restarts of the service (the replay after a crash produces the same outputs with the same ids);
* ``POST /acks/{subscription}``: acknowledgement, after which the durable sink may trim those outputs;
* error policies: ``hot`` skips a reading its function raises on (``on_error="skip"``: kept as a dead letter,
  ``GET /dead-letters``), ``readings-seen`` stops on one (the default): it is FAILED, ``/health`` answers 503 and
  says which and why, ``GET /outputs/readings-seen`` ends with the error, and after a fix
  ``POST /subscriptions/readings-seen/restart`` runs it again (``?skip_failed=true`` skips the element);
* ``GET /health`` and ``GET /metrics`` (Prometheus text, when ``reaqtive[prometheus]`` is installed).

The functions the queries use, and the validators of the typed streams (``SCHEMAS``), are registered by name
before the engine opens: recovery resolves stored queries and stream records by these names.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, BeforeValidator

from reaqtive import FunctionRegistry, Query
from reaqtive.engine import (
    DURABLE_SINK,
    AckError,
    ArtifactInUseError,
    ArtifactNotFoundError,
    EngineError,
    EngineStatus,
    Output,
    SchemaValidationError,
    SubscriptionFailedError,
    SubscriptionState,
    UnknownSchemaError,
)
from reaqtive.engine.aio import AsyncEngine

HOT_CELSIUS = 30.0


class Reading(BaseModel):
    """One reading: the body of ``POST /events/readings`` and the schema of the ``readings`` stream."""

    sensor: str
    celsius: float


def _as_list(body: Any) -> Any:
    return body if isinstance(body, list) else [body]


Readings = Annotated[list[Reading], BeforeValidator(_as_list)]
"""A JSON array of readings, or one reading (a bad one is reported at index 0)."""

SCHEMAS: dict[str, type[BaseModel]] = {"reading": Reading}
"""The validators of the typed streams, by the names their records store (``Engine(schemas=...)``)."""
STREAMS: dict[str, str | None] = {"readings": "reading"}
"""Each stream with its schema's name (``None``: untyped)."""


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


ON_ERROR: dict[str, str] = {"hot": "skip"}
"""Each query's error policy when a user function raises (absent: ``"stop"``)."""


def create_missing(engine: AsyncEngine) -> None:
    """The first start creates the streams and queries; a restart finds them recovered."""
    existing = {info.uri for info in engine.engine.artifacts()}
    for stream, schema in STREAMS.items():
        if stream not in existing:
            engine.engine.create_stream(stream, schema=schema)
    for uri, query in queries().items():
        if uri not in existing:
            engine.engine.create_subscription(uri, query, on_error=ON_ERROR.get(uri))


def create_app(store: str | None = None, **engine_options: Any) -> FastAPI:
    """The application, on the store ``store`` (default: ``$REAQTIVE_STORE``, else ``service.db``)."""
    state: dict[str, AsyncEngine] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        target = store or os.environ.get("REAQTIVE_STORE", "service.db")
        options: dict[str, Any] = {"functions": make_functions(), "schemas": SCHEMAS, "checkpoint_every_seconds": 5.0}
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

    @app.post("/events/readings")  # before /events/{stream}: this route takes the readings stream's bodies
    async def append_readings(events: Readings) -> dict[str, list[int]]:
        return {"seqs": await _append(engine_of(), "readings", events)}

    @app.post("/events/{stream}")
    async def append(stream: str, request: Request) -> dict[str, list[int]]:
        return {"seqs": await _append(engine_of(), stream, _as_list(await request.json()))}

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
    async def health() -> JSONResponse:
        """200 while every query runs; 503 (for a load balancer or an alert) when one is FAILED or stopped, with
        what stopped it: a query never stops silently."""
        engine = engine_of()
        status = engine.engine.status
        streams = engine.engine.streams()
        stopped = [
            {"subscription": s.uri, "state": s.state.value, "error": f"{s.error_type}: {s.error}",
             "position": s.position}
            for s in await engine.subscriptions()
            if s.state in (SubscriptionState.FAILED, SubscriptionState.STOPPED)
        ]
        healthy = status in (EngineStatus.RUNNING, EngineStatus.CHECKPOINTING) and not stopped
        body = {
            "status": status.value,
            "healthy": healthy,
            "lag": {uri: s.appended - 1 - s.delivered for uri, s in streams.items()},
            "stopped": stopped,
        }
        return JSONResponse(body, status_code=200 if healthy else 503)

    @app.post("/subscriptions/{uri}/restart")
    async def restart(uri: str, skip_failed: bool = False) -> dict[str, str]:
        """Run a FAILED (or stopped) query again from its last checkpoint, after a fix was deployed;
        ``?skip_failed=true`` skips the element that failed it (kept as a dead letter)."""
        engine = engine_of()
        try:
            await engine.restart_subscription(uri, skip_failed=skip_failed)
        except ArtifactNotFoundError as error:
            raise HTTPException(404, str(error)) from error
        except (ArtifactInUseError, ValueError) as error:
            raise HTTPException(409, str(error)) from error
        return {"restarted": uri}

    @app.get("/dead-letters")
    async def dead_letters(after: int | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Skipped elements and quarantined events, after the cursor ``after`` (acknowledge with the engine's
        ``ack_dead_letters``)."""
        letters = await engine_of().dead_letters(after=after, limit=limit)
        return [{"id": d.id, "kind": d.kind, "subscription": d.subscription, "stream": d.stream, "pos": d.pos,
                 "reason": d.reason} for d in letters]

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


async def _append(engine: AsyncEngine, stream: str, events: list[Any]) -> list[int]:
    """Append a request's events in one transaction, stamped now; the engine's refusals as HTTP statuses (a typed
    stream's refusal as FastAPI reports a bad body: 422, the event's index and the field in ``loc``)."""
    now = datetime.now(UTC)
    try:
        return await engine.append_many(stream, [(event, now) for event in events])
    except ArtifactNotFoundError as error:
        raise HTTPException(404, str(error)) from error
    except SchemaValidationError as error:
        raise RequestValidationError([
            {"type": "schema", "loc": ("body", error.index, *_path(field)), "msg": message}
            for field, message in error.problems
        ]) from error
    except UnknownSchemaError as error:
        raise HTTPException(503, str(error)) from error
    except (TypeError, ValueError) as error:
        raise HTTPException(422, str(error)) from error


def _path(field: str | None) -> list[str | int]:
    """A dotted field path (``readings.1.celsius``) as FastAPI's ``loc`` has it (``["readings", 1, "celsius"]``)."""
    return [int(part) if part.isdigit() else part for part in field.split(".")] if field else []


async def _json_lines(outputs: AsyncIterator[Output], limit: int | None) -> AsyncIterator[bytes]:
    """Each output as a JSON line, as it comes (at most ``limit``); ends when the engine stops, or, after a last
    line ``{"error": ...}``, when the query failed (it produces nothing more until it is restarted)."""
    if limit is not None and limit <= 0:
        return
    sent = 0
    try:
        async for output in outputs:
            yield json.dumps({"subscription": output.subscription, "seq": output.seq, "value": output.value}).encode()
            yield b"\n"
            sent += 1
            if sent == limit:  # without waiting for one more
                return
    except (SubscriptionFailedError, EngineError) as error:
        yield json.dumps({"error": str(error)}).encode() + b"\n"


app = create_app()
"""The application uvicorn serves (``uvicorn examples.asyncio_service:app``), on ``$REAQTIVE_STORE``; tests call
:func:`create_app` with their own store. Nothing opens before the application starts."""
