"""A small service that embeds the engine: temperature readings in, standing queries, results out, restarts.

Run: .venv/bin/python examples/service.py

What a service does with an :class:`~reaqtive.Engine`, in order:

1. **open** it on its store (a SQLite file): the first time this creates the file; every later time it
   *recovers*: definitions, streams and subscriptions come back with their checkpointed state;
2. **register the functions** its queries use, *before* opening (recovery re-binds stored queries by these names);
3. **create what is missing** (create is refused for a URI that exists, so check first): a stream per sensor,
   the standing queries of its configuration, and more at run time when a user asks ("watch sensor s07");
4. **append** events as they arrive (each append is durable when it returns) and **process** them;
5. let the engine **checkpoint** periodically (here every 200 events or 30 s), and take one before a planned stop;
6. **read outputs** from the durable sink (each has a ``(subscription, seq)`` id);
7. **close**.

The functions are registered by name (``FUNCTIONS``) rather than persisted by import path: this file runs as a
script (``__main__``), and names keep working when code moves between modules.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import Engine, FunctionRegistry, Query

READINGS = "svc://readings"  # every reading, as {"sensor": ..., "celsius": ...}


def sensor_stream(sensor: str) -> str:
    """The URI of one sensor's stream."""
    return f"svc://sensors/{sensor}"


# -- the functions queries use, by registered name -------------------------------------------------------------


def make_functions(hot: float) -> FunctionRegistry:
    """The registry of the service's functions; ``hot`` is configuration (a closure is fine: it is registered)."""
    functions = FunctionRegistry()

    def too_hot(reading: dict[str, Any]) -> bool:
        return float(reading["celsius"]) > hot

    functions.register("too_hot", too_hot)
    functions.register("alert_text", lambda r: f"{r['sensor']} is at {r['celsius']:.1f} C (above {hot:g})")
    functions.register("celsius", lambda r: float(r["celsius"]))
    functions.register("nonempty", bool)
    functions.register("mean", lambda xs: round(sum(xs) / len(xs), 2))
    functions.register("count_one", lambda n, _: n + 1)
    return functions


# -- the service -------------------------------------------------------------------------------------------------


class TemperatureService:
    """Readings in; alerts, a reading count and per-sensor watches out; survives restarts."""

    def __init__(
        self, store: Path, *, hot: float = 30.0, start: datetime | None = None, checkpoint_every_events: int = 200
    ) -> None:
        self.engine = Engine(
            store,
            functions=make_functions(hot),
            checkpoint_every_events=checkpoint_every_events,
            checkpoint_every_seconds=30.0,
        )
        recovery = self.engine.recovery
        self.recovered = recovery.subscriptions
        if recovery.failures:  # the default policy would have raised; a KEEP policy reports here
            for failure in recovery.failures:
                print(f"not recovered: {failure.uri}: {failure.error}")
        self._known = {info.uri for info in self.engine.artifacts()}  # what exists: create only what is missing
        if not self._known:
            # A fresh store's event-time clock starts at 1970: move it to the start of the input before any
            # time-based query exists, or its first window would open in 1970. (A recovered clock is kept.)
            self.engine.advance_time(start or datetime.now(UTC))
        self._create_missing()

    def _ensure_stream(self, uri: str) -> None:
        if uri not in self._known:
            self.engine.create_stream(uri)
            self._known.add(uri)

    def _ensure_subscription(self, uri: str, query: Query[Any]) -> None:
        if uri not in self._known:
            self.engine.create_subscription(uri, query)
            self._known.add(uri)

    def _create_missing(self) -> None:
        """The standing queries every instance of the service has (created once; recovered afterwards)."""
        self._ensure_stream(READINGS)
        f = self.engine.functions.resolve
        readings: Query[dict[str, Any]] = Query.stream(READINGS)
        for uri, query in (
            ("svc://alerts", readings.filter(f("too_hot")).map(f("alert_text"))),
            ("svc://count", readings.scan(0, f("count_one"))),
        ):
            self._ensure_subscription(uri, query)

    def watch(self, sensor: str, minutes: int = 5) -> str:
        """Start (once) a standing query for ``sensor``: its average every ``minutes`` minutes of event time.
        Watches of different sensors differ only in constants, so they share one stored template."""
        uri = f"svc://watch/{sensor}"
        self._ensure_stream(sensor_stream(sensor))
        f = self.engine.functions.resolve
        averages = (Query.stream(sensor_stream(sensor)).map(f("celsius"))
                    .buffer(timedelta(minutes=minutes)).filter(f("nonempty")).map(f("mean")))
        self._ensure_subscription(uri, averages)
        return uri

    def record(self, sensor: str, celsius: float, when: datetime) -> None:
        """Append one reading (durable when this returns) to the fleet's stream and to the sensor's."""
        engine = self.engine
        self._ensure_stream(sensor_stream(sensor))
        reading = {"sensor": sensor, "celsius": celsius}
        engine.append(READINGS, reading, when)
        engine.append(sensor_stream(sensor), reading, when)

    def step(self) -> int:
        """Process what was appended (checkpointing as the policy says); returns how many events."""
        return self.engine.process()

    def results(self, uri: str) -> list[Any]:
        """The outputs of one query so far, in order."""
        return [output.value for output in self.engine.outputs(uri)]

    def close(self) -> None:
        """A planned stop: checkpoint (so a restart replays nothing), then close."""
        self.engine.checkpoint()
        self.engine.close()


# -- a run ------------------------------------------------------------------------------------------------------

T0 = datetime(2026, 4, 1, 12, 0, tzinfo=UTC)


def feed(service: TemperatureService, start: int, stop: int) -> None:
    """Readings ``start..stop``: three sensors, one reading every 10 s each; s07 warms up."""
    for i in range(start, stop):
        sensor = ("s01", "s04", "s07")[i % 3]
        celsius = 20.0 + (i % 5) + (i / 20 if sensor == "s07" else 0.0)
        service.record(sensor, round(celsius, 1), T0 + timedelta(seconds=10 * (i // 3)))


def main(store: Path | None = None) -> dict[str, list[Any]]:
    """Run the service, stop it, start it again (it recovers), go on; print and return the results."""
    with tempfile.TemporaryDirectory() as scratch:
        path = store or Path(scratch) / "service.db"
        service = TemperatureService(path, start=T0)
        watch = service.watch("s07")
        feed(service, 0, 300)
        print(f"first run: processed {service.step()} events (each reading goes to two streams)")
        service.close()

        service = TemperatureService(path, start=T0)  # a restart: everything is recovered from the store
        print(f"second run: recovered {service.recovered} subscriptions")
        feed(service, 300, 600)
        print(f"second run: processed {service.step()} events")
        results = {uri: service.results(uri) for uri in ("svc://alerts", "svc://count", watch)}
        service.close()
    print(f"readings counted: {results['svc://count'][-1]}")
    print(f"5-minute averages of s07: {results[watch]}")
    print(f"alerts: {len(results['svc://alerts'])}, first: {results['svc://alerts'][0]}")
    return results


if __name__ == "__main__":
    main()
