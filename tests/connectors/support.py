"""What the connector tests share: the standing queries whose outputs the sinks receive (module-level
functions, persisted by import path), and how to read the expected outputs from the engine's durable sink."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import Query
from reaqtive.engine import Engine, FunctionRegistry, Output

ALLOWED = "tests.connectors.support"
T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
STREAM = "in://numbers"
# Each query runs twice: once into the sink under test (``q://``), once into the durable sink (``oracle://``),
# whose content the engine guarantees effectively-once: the oracle of what the sink must hold.
QUERIES = ("double", "running-sum", "pairs")


def double(x: int) -> int:
    return x * 2


def add(a: int, b: int) -> int:
    return a + b


def total(xs: list[int]) -> int:
    return sum(xs)


def value_of(i: int) -> int:
    """Event ``i``'s value: a deterministic function of its index."""
    return (i * 7919 + 13) % 1000


def when(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def query(name: str) -> Query[Any]:
    numbers: Query[int] = Query.stream(STREAM)
    if name == "double":
        return numbers.map(double)
    if name == "running-sum":
        return numbers.scan(0, add)
    return numbers.buffer(2).map(total)


def open_engine(path: Path, observer: str, function: object, **options: Any) -> Engine:
    """The engine on ``path`` with ``function`` registered as ``observer`` (in every process, before the store
    recovers), the stream and the queries created when missing."""
    functions = FunctionRegistry()
    functions.register(observer, function)  # type: ignore[arg-type]  # before recovery: the store names it
    settings = {"observer_backoff": 0, "observer_retries": 1000, "synchronous": "NORMAL", **options}
    engine = Engine(path, functions=functions, allow_modules=[ALLOWED], start=T0, **settings)
    known = {info.uri for info in engine.artifacts()}
    if STREAM not in known:
        engine.create_stream(STREAM)
    if f"obs://{observer}" not in known:
        engine.define_observer(f"obs://{observer}", function)  # type: ignore[arg-type]
    for name in QUERIES:
        if f"q://{name}" not in known:
            engine.create_subscription(f"q://{name}", query(name), observer=f"obs://{observer}")
        if f"oracle://{name}" not in known:
            engine.create_subscription(f"oracle://{name}", query(name))
    return engine


def expected(engine: Engine) -> dict[str, list[tuple[int, Any]]]:
    """Per ``q://`` subscription, the ``(seq, value)`` the sink must have received: the oracle's outputs."""
    return {f"q://{name}": [(o.seq, o.value) for o in engine.outputs(f"oracle://{name}")] for name in QUERIES}


def file_outputs(path: Path) -> dict[str, list[tuple[int, Any]]]:
    """Per subscription, the ``(seq, value)`` of each line of a JSON-lines sink file, in file order."""
    found: dict[str, list[tuple[int, Any]]] = {f"q://{name}": [] for name in QUERIES}
    for line in path.read_bytes().splitlines():
        record = json.loads(line)
        found.setdefault(record["subscription"], []).append((record["seq"], record["value"]))
    return found


def as_output(subscription: str, seq: int, value: Any) -> Output:
    return Output(subscription, seq, value)
