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
* ``GET /health`` and ``GET /metrics`` (Prometheus text, when ``reaqtive[prometheus]`` is installed): the
  engine's collector is registered once, when the application starts, on a registry of the application's, and
  served by ``prometheus_client.make_asgi_app`` mounted at ``/metrics``.

The engine opens in the application's lifespan, configured by the ``REAQTIVE_*`` variables
(``AsyncEngine.from_env``; ``docs/deploying.md`` lists them), and lives on ``app.state.engine``; routes reach it
through a dependency (``EngineDep``). Request bodies are pydantic models, so FastAPI answers a bad one with 422.
The functions the queries use, and the validators of the typed streams (``SCHEMAS``), are registered by name
before the engine opens: recovery resolves stored queries and stream records by these names.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, BeforeValidator

from reaqtive import FunctionRegistry, Query
from reaqtive.engine import (
    DURABLE_SINK,
    AckError,
    ArtifactInUseError,
    ArtifactNotFoundError,
    EngineError,
    EngineSettings,
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
Events = Annotated[list[Any], BeforeValidator(_as_list), Body()]
"""The events of an untyped stream: a JSON array, or one JSON value (the engine checks a typed stream's)."""


class Ack(BaseModel):
    """The body of ``POST /acks/{subscription}``: the last ``seq`` the consumer has."""

    seq: int

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
    """The application, on the store ``store`` (default: ``$REAQTIVE_STORE``, else ``service.db``); the other
    ``REAQTIVE_*`` variables configure the engine, and ``engine_options`` override them."""
    metrics = _metrics_registry()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings = EngineSettings.from_env()  # checked before anything opens: a bad variable names itself
        options: dict[str, Any] = {"functions": make_functions(), "schemas": SCHEMAS}
        if settings.checkpoint_every_seconds is None:
            options["checkpoint_every_seconds"] = 5.0  # this service's default; the environment may say otherwise
        options.update(engine_options)
        engine = await AsyncEngine.from_env(store=store or settings.store or "service.db", **options)
        await engine.call(create_missing, engine)
        collector = _watch(metrics, engine)
        try:
            async with engine:  # starts the processing task; on the way out: final checkpoint, close
                app.state.engine = engine
                yield
                del app.state.engine
        finally:
            if collector is not None:
                collector.unregister()

    app = FastAPI(title="reaqtive example service", lifespan=lifespan)
    add_data_routes(app)
    add_operations_routes(app)
    if metrics is not None:
        from prometheus_client import make_asgi_app

        app.mount("/metrics", make_asgi_app(registry=metrics))
    return app


def get_engine(request: Request) -> AsyncEngine:
    """The dependency routes reach the engine through: the one the lifespan put on ``app.state``."""
    engine: AsyncEngine | None = getattr(request.app.state, "engine", None)
    if engine is None:
        raise HTTPException(503, "the engine is not running")
    return engine


EngineDep = Annotated[AsyncEngine, Depends(get_engine)]


def _metrics_registry() -> Any:
    """A Prometheus registry of the application's own (``None`` without ``reaqtive[prometheus]``): one per
    application, so that two applications in one process (tests) do not share metric names."""
    try:
        from prometheus_client import CollectorRegistry
    except ImportError:
        return None
    return CollectorRegistry()


def _watch(registry: Any, engine: AsyncEngine) -> Any:
    """Register the engine's collector on ``registry``, once, at startup; scrapes read the engine then."""
    if registry is None:
        return None
    from reaqtive.engine.metrics import PrometheusMetrics

    return PrometheusMetrics(engine.engine, registry=registry)  # labelled with the store's path


def add_data_routes(app: FastAPI) -> None:
    """Events in, outputs out, acknowledgements."""

    @app.post("/events/readings")  # before /events/{stream}: this route takes the readings stream's bodies
    async def append_readings(events: Readings, engine: EngineDep) -> dict[str, list[int]]:
        return {"seqs": await _append(engine, "readings", events)}

    @app.post("/events/{stream}")
    async def append(stream: str, events: Events, engine: EngineDep) -> dict[str, list[int]]:
        return {"seqs": await _append(engine, stream, events)}

    @app.get("/outputs/{subscription}")
    async def outputs(
        subscription: str, engine: EngineDep, after: int | None = None, limit: int | None = None
    ) -> StreamingResponse:
        try:  # refused before the response starts: an unknown URI, or one whose outputs go elsewhere
            info = await engine.call(engine.engine.info, subscription)
        except ArtifactNotFoundError as error:
            raise HTTPException(404, str(error)) from error
        if info.kind != "subscription" or info.observer != DURABLE_SINK:
            raise HTTPException(404, f"{subscription!r} has no outputs in the durable sink")
        return StreamingResponse(_json_lines(engine.stream_outputs(subscription, after=after), limit),
                                 media_type="application/x-ndjson")

    @app.post("/acks/{subscription}")
    async def ack(subscription: str, body: Ack, engine: EngineDep) -> dict[str, int]:
        try:
            await engine.ack(subscription, body.seq)
        except AckError as error:  # beyond the last output, or behind an acknowledgement
            raise HTTPException(422, str(error)) from error
        except ArtifactNotFoundError as error:
            raise HTTPException(404, str(error)) from error
        return {"acked": body.seq}


def add_operations_routes(app: FastAPI) -> None:
    """Health, restarts and dead letters (``/metrics`` is mounted by :func:`create_app`)."""

    @app.get("/health")
    async def health(engine: EngineDep) -> JSONResponse:
        """200 while every query runs; 503 (for a load balancer or an alert) when one is FAILED or stopped, with
        what stopped it: a query never stops silently."""
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
    async def restart(uri: str, engine: EngineDep, skip_failed: bool = False) -> dict[str, str]:
        """Run a FAILED (or stopped) query again from its last checkpoint, after a fix was deployed;
        ``?skip_failed=true`` skips the element that failed it (kept as a dead letter)."""
        try:
            await engine.restart_subscription(uri, skip_failed=skip_failed)
        except ArtifactNotFoundError as error:
            raise HTTPException(404, str(error)) from error
        except (ArtifactInUseError, ValueError) as error:
            raise HTTPException(409, str(error)) from error
        return {"restarted": uri}

    @app.get("/dead-letters")
    async def dead_letters(engine: EngineDep, after: int | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Skipped elements and quarantined events, after the cursor ``after`` (acknowledge with the engine's
        ``ack_dead_letters``)."""
        letters = await engine.dead_letters(after=after, limit=limit)
        return [{"id": d.id, "kind": d.kind, "subscription": d.subscription, "stream": d.stream, "pos": d.pos,
                 "reason": d.reason} for d in letters]


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
