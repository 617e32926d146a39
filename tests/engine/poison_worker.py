"""The process ``test_poison_events.py`` kills: standing queries whose user functions raise on malformed events, under
each error policy (acceptance of issue 30).

Run as ``python -m tests.engine.poison_worker STORE [--pause KIND@P]`` from the repository root (``STORE``: an SQLite
file or a ``postgresql://`` URL). It is ``crash_worker.Worker`` (same markers, same pause points inside checkpoints,
same resumable producer protocol) with this workload:

* **the input** (:func:`event`, a pure function of the event's index, seeded): readings ``{"i", "sensor",
  "celsius", "weight"}`` and orders ``{"i", "qty", "pack"}`` in runs of :data:`RUN` events of one stream (one
  ``append_many`` each). After the first :data:`CLEAN` events, about one in :data:`BAD_EVERY` is malformed: a field
  missing, a field of the wrong type, a divisor of zero (only from :data:`ZERO_FROM` on, so that the decision
  function's stops come in the middle of the run); and now and then an event dated in the year 2300, quarantined
  at ``append`` (a dead letter of the other kind, which takes a sequence number and no log position);
* **the queries** (:data:`SHAPES`): a ``map`` reading a field, a ``filter`` with arithmetic, a ``scan`` whose
  accumulator divides, a ``group_by`` whose key selector reads a field with a per-group ``map`` + ``scan`` on the
  general path (inner units) and the same in keyed execution, a keyed aggregate (``aggregate_by_key`` over
  tumbling 10-second windows with a ``Fold`` that divides), and a ``flat_map`` whose selector raises on some orders;
* **the policies** (:data:`GROUPS`): each query under ``"skip"``, under ``"stop"`` (twice: ``stop`` is restarted
  with a fixed function by the test, ``redo`` with ``skip_failed``) and under the decision function
  :func:`decide` (registered by name: skip missing fields and wrong types, stop on a division by zero). Every
  function is registered by name, once per group (``pz_<group>_<name>``: the test fixes the functions of one group
  without touching the others);
* the event clock, a checkpoint every :data:`EVERY` events, ``process(max_events=BATCH)`` batches; at the end the
  clock moves to :data:`END` (the last windows close) and a checkpoint is taken.

**Markers** (one line each on stdout): ``opening``, ``ready P``, ``opened N`` (after the ``failed`` markers of
the ``N`` subscriptions the open found FAILED), ``batch A P`` after each processed batch (the log
position before and after it), ``done P``; and ``failed {json}`` for each FAILED subscription, once per run: at the
open (``"fresh": false``: its record said so) or right after the batch it failed in (``"fresh": true``), with what
its status says and the places that did **not** show it (``"missing"``: its status, the engine's status
DEGRADED, ``engine.faults``, ``stopped_error``/``subscription_error``, ``read_engine(...).failed``, the Prometheus
families ``reaqtive_subscriptions{state="failed"}``, ``reaqtive_failed_subscription`` and, for a fresh failure,
``reaqtive_subscription_user_errors_total{action="stop"}``, and the ``subscription_failed`` ERROR line with its
``extra=`` fields). ``--pause KIND@P`` stops at the first moment of ``KIND`` once the engine's log position is
``P`` or more, prints ``pause KIND P`` and blocks on stdin, for the test to kill it there: ``commit``, ``egress``,
``committed``, ``append``, ``recovered`` (as in ``crash_worker``); and

* ``setup@k``: after the ``k``-th subscription this run created;
* ``replay@k``: right after the store opened, process ``k`` events (the start of the recovery's replay), stop there;
* ``failed@P``: right after a batch in which a subscription failed on an event at log position ``P`` or later
  (before any checkpoint covers the failure).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from reaqtive import Fold, FunctionRegistry, Query, Tumbling, keyed_execution
from reaqtive.core.error_policy import ErrorContext
from reaqtive.engine import Engine, EngineStatus, SubscriptionFailedError, SubscriptionState
from reaqtive.engine.failures import error_name
from reaqtive.engine.metrics import PrometheusMetrics, read_engine
from tests.engine import crash_worker

SEED = 30
T0 = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)
STEP = timedelta(seconds=2)  # event i happens at T0 + i * STEP (the quarantined ones excepted)
EVENTS = 2_800
RUN = 4  # events per producer run: one stream, one append_many
CHUNK = 120  # events appended, then processed, per loop
BATCH = 40  # events per process() call
EVERY = 150  # a checkpoint every EVERY events
CLEAN = 700  # the first events are all well formed: a few checkpoints before the first failure
BAD_EVERY = 14  # after CLEAN, about one event in BAD_EVERY is malformed
ZERO_FROM = 1_400  # no divisor of zero before this event
FAR_EVERY = 400  # about one event in FAR_EVERY (after CLEAN) is dated in the year 2300
WINDOW = timedelta(seconds=10)
END = T0 + STEP * EVENTS + timedelta(minutes=5)  # where the clock goes at the end: every window closes
FAR = datetime(2300, 1, 1, tzinfo=UTC)
READINGS, ORDERS = "pz://readings", "pz://orders"
STREAMS = (READINGS, ORDERS)
SHAPES = ("map", "filter", "scan", "group", "keyed", "agg", "flat")
GROUPS = ("skip", "stop", "redo", "decide")
LOGGER = "tests.poison_worker.engine"
STORE_LABEL = "pz"

READING_FLAWS = ("no_celsius", "no_weight", "no_sensor", "str_celsius", "null_weight", "str_sensor")
ORDER_FLAWS = ("no_qty", "str_qty", "null_pack")
ZERO_FLAWS = {READINGS: "zero_weight", ORDERS: "zero_pack"}


def uri(group: str, shape: str) -> str:
    return f"pz://{group}/{shape}"


# -- the input: a pure function of the event index ---------------------------------------------------------------


def stream_of_run(run: int) -> str:
    return READINGS if random.Random(f"pz-run-{SEED}-{run}").random() < 0.7 else ORDERS


@cache
def flaw(i: int) -> str | None:
    """What is wrong with event ``i`` (``None``: nothing; ``"far"``: its time is in the year 2300)."""
    if i < CLEAN:
        return None
    rng = random.Random(f"pz-flaw-{SEED}-{i}")
    if rng.randrange(FAR_EVERY) == 0:
        return "far"
    if rng.randrange(BAD_EVERY) != 0:
        return None
    stream = stream_of_run(i // RUN)
    flaws = READING_FLAWS if stream == READINGS else ORDER_FLAWS
    if i >= ZERO_FROM:
        flaws = (*flaws, ZERO_FLAWS[stream])
    return rng.choice(flaws)


@cache
def event(i: int) -> tuple[str, dict[str, Any], datetime]:
    """Event ``i``: its stream, value and event time."""
    stream = stream_of_run(i // RUN)
    rng = random.Random(f"pz-event-{SEED}-{i}")
    when = T0 + STEP * i
    value: dict[str, Any]
    if stream == READINGS:
        value = {"i": i, "sensor": rng.randrange(4), "celsius": round(rng.uniform(-5.0, 45.0), 1),
                 "weight": rng.randrange(1, 5)}
    else:
        value = {"i": i, "qty": rng.randrange(7), "pack": rng.randrange(1, 4)}
    kind = flaw(i)
    if kind == "far":
        when = FAR + STEP * i
    elif kind is not None:
        change, _, field = kind.partition("_")
        if change == "no":
            del value[field]
        else:
            value[field] = {"str": {"celsius": "hot", "sensor": "x7", "qty": "many"}.get(field), "null": None,
                            "zero": 0}[change]
    return stream, value, when


# -- the functions of the queries (each raises on some malformed events) ----------------------------------------

SCAN_SEED: list[Any] = [0, 0.0]
STATS_SEED: list[Any] = [-1, 0, 0.0]
AGG_SEED: list[Any] = [0, 0.0]


def cel(r: dict[str, Any]) -> list[Any]:
    """The ``map``: KeyError without ``celsius``, TypeError for ``"hot"``."""
    return [r["i"], round(r["celsius"] * 1.8 + 32, 2)]


def heavy(r: dict[str, Any]) -> bool:
    """The ``filter``: KeyError without ``celsius`` or ``weight``, TypeError for a text or a null, ZeroDivisionError."""
    return bool(r["celsius"] / r["weight"] > 8)


def acc(state: list[Any], r: dict[str, Any]) -> list[Any]:
    """The ``scan`` accumulator: divides by ``weight``."""
    return [state[0] + 1, round(state[1] + 120 / r["weight"], 6)]


def sensor_of(r: dict[str, Any]) -> int:
    """The ``group_by`` key selector: KeyError without ``sensor``, ValueError for ``"x7"``."""
    return int(r["sensor"])


def pair(r: dict[str, Any]) -> list[Any]:
    """The per-group ``map``: KeyError without ``celsius``, TypeError for ``"hot"``."""
    return [r["sensor"], round(r["celsius"] + 0.0, 1)]


def stats(state: list[Any], p: list[Any]) -> list[Any]:
    """The per-group ``scan``: [sensor, count, total]."""
    return [p[0], state[1] + 1, round(state[2] + p[1], 3)]


def zone(r: dict[str, Any]) -> int:
    """The keyed aggregate's key: KeyError without ``sensor``, TypeError for ``"x7"``."""
    return int(r["sensor"] % 2)


def load(a: list[Any], r: dict[str, Any]) -> list[Any]:
    """The keyed aggregate's fold: divides ``celsius`` by ``weight``."""
    return [a[0] + 1, round(a[1] + r["celsius"] / r["weight"], 4)]


def copies(o: dict[str, Any]) -> list[list[int]]:
    """What the ``flat_map`` selector emits for an order: KeyError without ``qty``, TypeError for a text or a null,
    ZeroDivisionError for a pack of 0."""
    return [[o["i"], k] for k in range(o["qty"] // o["pack"])]


BASE: dict[str, Callable[..., Any]] = {f.__name__: f for f in (cel, heavy, acc, sensor_of, pair, stats, zone, load,
                                                               copies)}
FALLBACK: dict[str, Callable[..., Any]] = {
    "cel": lambda r: [r.get("i"), None],
    "heavy": lambda r: False,
    "acc": lambda state, r: state,
    "sensor_of": lambda r: -1,
    "pair": lambda r: [r.get("sensor"), 0.0],
    "stats": lambda state, p: state,
    "zone": lambda r: -1,
    "load": lambda a, r: a,
    "copies": lambda o: [],
}
"""What the fixed functions return where the originals raise (the same as the originals everywhere else)."""
USER_ERRORS = (KeyError, TypeError, ValueError, ZeroDivisionError)


def fixed(name: str) -> Callable[..., Any]:
    """The fixed version of function ``name``: the original's result, or a default where the original raises."""
    original, fallback = BASE[name], FALLBACK[name]

    def function(*args: Any) -> Any:
        try:
            return original(*args)
        except USER_ERRORS:
            return fallback(*args)

    function.__name__ = f"fixed_{name}"
    return function


def decide(error: Exception, context: ErrorContext) -> str:
    """The decision function: a missing field or a wrong type is skipped, anything else (a division by zero)
    stops the query."""
    return "skip" if isinstance(error, (KeyError, TypeError, ValueError)) else "stop"


def decision(error: Exception) -> str:
    return decide(error, ErrorContext(None, "", ""))


def _wrapped(original: Callable[..., Any]) -> Callable[..., Any]:
    """A function object of its own (a registry names a function by its identity: each group has its own)."""

    def function(*args: Any) -> Any:
        return original(*args)

    function.__name__ = original.__name__
    return function


def functions(fixed_groups: Collection[str] = ()) -> tuple[FunctionRegistry, dict[str, dict[str, Callable[..., Any]]]]:
    """The registry of every function the queries name, and the functions by group and name: those of the groups
    in ``fixed_groups`` fixed (:func:`fixed`), under the same names."""
    registry = FunctionRegistry()
    table: dict[str, dict[str, Callable[..., Any]]] = {}
    for group in GROUPS:
        own = {name: fixed(name) if group in fixed_groups else _wrapped(function) for name, function in BASE.items()}

        def per_sensor(g: Any, own: dict[str, Callable[..., Any]] = own) -> Query[Any]:
            result: Query[Any] = g.map(own["pair"]).scan(STATS_SEED, own["stats"])
            return result

        def expand(o: dict[str, Any], own: dict[str, Callable[..., Any]] = own) -> Query[Any]:
            return Query.from_iterable(own["copies"](o))

        own["per_sensor"], own["expand"] = per_sensor, expand
        for name, function in own.items():
            registry.register(f"pz_{group}_{name}", function)
        table[group] = own
    registry.register("pz_decide", decide)
    return registry, table


def query(shape: str, own: dict[str, Callable[..., Any]]) -> Query[Any]:
    readings, orders = Query.stream(READINGS), Query.stream(ORDERS)
    if shape == "map":
        return readings.map(own["cel"])
    if shape == "filter":
        return readings.filter(own["heavy"])
    if shape == "scan":
        return readings.scan(SCAN_SEED, own["acc"])
    if shape in ("group", "keyed"):
        return readings.group_by(own["sensor_of"]).flat_map(own["per_sensor"])
    if shape == "agg":
        return readings.aggregate_by_key(own["zone"], Tumbling(WINDOW), Fold(AGG_SEED, own["load"]))
    assert shape == "flat", shape
    return orders.flat_map(own["expand"])


def on_error(group: str) -> Any:
    return {"skip": "skip", "stop": "stop", "redo": "stop", "decide": decide}[group]


def create_subscriptions(engine: Engine, table: dict[str, dict[str, Callable[..., Any]]],
                         after_each: Callable[[], None] = lambda: None) -> None:
    """Create the streams and the subscriptions that are missing, in a fixed order (``group`` on the general path,
    with inner units; ``keyed`` in keyed execution)."""
    existing = {info.uri for info in engine.artifacts()}
    for stream in STREAMS:
        if stream not in existing:
            engine.create_stream(stream)
    for group in GROUPS:
        for shape in SHAPES:
            name = uri(group, shape)
            if name in existing:
                continue
            with keyed_execution(shape != "group"):
                engine.create_subscription(name, query(shape, table[group]), on_error=on_error(group))
            after_each()


# -- what a FAILED subscription must show, everywhere -----------------------------------------------------------


class Records(logging.Handler):
    """Keeps the engine's log records (its own logger), for the check of the ERROR line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def engine_logger() -> tuple[logging.Logger, Records]:
    logger = logging.getLogger(LOGGER)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    records = Records()
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.addHandler(records)
    return logger, records


def invisible(engine: Engine, uri_: str, metrics: Any, records: Records, *, fresh: bool) -> list[str]:
    """The places that do not show FAILED subscription ``uri_`` (empty: it is visible everywhere). ``metrics``: a
    ``CollectorRegistry`` a :class:`PrometheusMetrics` of ``engine`` (labelled :data:`STORE_LABEL`) is in;
    ``fresh``: it failed in this process (else its record said so when the engine opened)."""
    missing = []
    status = engine.subscription_status(uri_)
    if status.state is not SubscriptionState.FAILED or status.error_type is None or status.position is None:
        missing.append(f"subscription_status ({status.state.name}, {status.error_type}, {status.position})")
    if status not in engine.subscriptions():
        missing.append("engine.subscriptions()")
    if engine.status is not EngineStatus.DEGRADED:
        missing.append(f"engine.status ({engine.status.name})")
    if uri_ not in {fault.uri for fault in engine.faults}:
        missing.append("engine.faults")
    stopped = engine.stopped_error(uri_)
    if not isinstance(stopped, SubscriptionFailedError) or stopped.position != status.position:
        missing.append(f"stopped_error ({stopped!r:.80})")
    error = engine.subscription_error(uri_)
    if error is None or error_name(error) != status.error_type:
        missing.append(f"subscription_error ({error!r:.80})")
    readings = read_engine(engine)
    if readings.failed.get(uri_) != status.error_type:
        missing.append(f"read_engine().failed ({dict(readings.failed).get(uri_)})")
    failed_now = sum(s.state is SubscriptionState.FAILED for s in engine.subscriptions())
    sample = metrics.get_sample_value
    got = sample("reaqtive_subscriptions", {"store": STORE_LABEL, "state": "failed"})
    if got != failed_now:
        missing.append(f'reaqtive_subscriptions{{state="failed"}} ({got}, {failed_now} failed)')
    labels = {"store": STORE_LABEL, "subscription": uri_, "error_type": str(status.error_type)}
    if sample("reaqtive_failed_subscription", labels) != 1.0:
        missing.append("reaqtive_failed_subscription")
    if fresh and not (sample("reaqtive_subscription_user_errors_total", {**labels, "action": "stop"}) or 0) >= 1:
        missing.append('reaqtive_subscription_user_errors_total{action="stop"}')
    fields = {"subscription": uri_, "error_type": status.error_type, "pos": status.position, "unit": status.unit,
              "operator": status.operator, "path": status.path}
    logged = [r for r in records.records if getattr(r, "reaqtive_event", None) == "subscription_failed"
              and getattr(r, "subscription", None) == uri_]
    if not any(r.levelno == logging.ERROR and all(getattr(r, k, "?") == v for k, v in fields.items())
               for r in logged):
        shown = [{k: getattr(r, k, "?") for k in fields} | {"level": r.levelname} for r in logged]
        missing.append(f"the subscription_failed ERROR line with {fields} (logged: {shown})")
    return missing


# -- the run ------------------------------------------------------------------------------------------------------


class Worker(crash_worker.Worker):
    """``crash_worker.Worker`` with this module's workload, markers and pause points."""

    def __init__(self, path: str, pause: tuple[str, int] | None) -> None:
        super().__init__(path, EVENTS, EVERY, pause)
        self.reported: set[str] = set()
        self.created = 0

    def processed(self) -> int:
        """The engine's log position (what the pause points compare with)."""
        return int(self.engine._positions.cursor.pos)

    def run(self) -> None:
        from prometheus_client import CollectorRegistry

        registry, self.table = functions()
        logger, self.records = engine_logger()
        self.say("opening")
        self.engine = engine = self.open(functions=registry, checkpoint_every_events=EVERY, synchronous="NORMAL",
                                         logger=logger, start=T0)
        self.metrics = CollectorRegistry()
        PrometheusMetrics(engine, registry=self.metrics, store=STORE_LABEL)
        self._install_fault_points()
        self.say(f"ready {self.processed()}")
        self.say(f"opened {self.report_failed(fresh=False, count=True)}")
        self.maybe_pause("recovered")
        if self.pause is not None and self.pause[0] == "replay":
            before = self.processed()
            engine.process(max_events=self.pause[1])  # the start of the recovery's replay
            self.say(f"batch {before} {self.processed()}")
            self.report_failed(fresh=True)
            self.say(f"pause replay {self.processed()}")
            sys.stdin.readline()  # the test kills us here
            self.pause = None
        create_subscriptions(engine, self.table, self.created_one)
        while True:
            before = self.processed()
            if engine.process(max_events=BATCH):
                self.say(f"batch {before} {self.processed()}")
                if self.report_failed(fresh=True):
                    self.maybe_pause("failed")
                continue
            appended = self.appended()
            if appended >= EVENTS:
                break
            self.produce(appended, min(EVENTS, appended + CHUNK))
        if engine.now < END:
            engine.advance_time(END)  # the last windows close (again after a kill: the clock is the checkpoint's)
        engine.checkpoint()
        position = self.processed()
        engine.close()
        self.say(f"done {position}")

    def created_one(self) -> None:
        self.created += 1
        pause = self.pause
        if pause is not None and pause[0] == "setup" and self.created >= pause[1]:
            self.pause = None
            self.say(f"pause setup {self.created}")
            sys.stdin.readline()

    def report_failed(self, *, fresh: bool, count: bool = False) -> int:
        """Say ``failed {json}`` for each FAILED subscription not reported in this run yet, with the places that do
        not show it; whether one failed at the pause's position or later (``failed@P``), or (``count``) how many
        were reported."""
        engine = self.engine
        at_pause = reported = 0
        for status in engine.subscriptions():
            if status.state is not SubscriptionState.FAILED or status.uri in self.reported:
                continue
            self.reported.add(status.uri)
            missing = invisible(engine, status.uri, self.metrics, self.records, fresh=fresh)
            self.say("failed " + json.dumps({
                "uri": status.uri, "pos": status.position, "error_type": status.error_type,
                "operator": status.operator, "unit": status.unit, "path": status.path, "fresh": fresh,
                "at": self.processed(), "missing": missing}))
            reported += 1
            if self.pause is not None and self.pause[0] == "failed" and (status.position or 0) >= self.pause[1]:
                at_pause = 1
        return reported if count else at_pause

    def maybe_pause(self, kind: str) -> None:
        if kind == "failed":
            pause = self.pause
            if pause is None or pause[0] != "failed":
                return
            self.pause = None
            self.say(f"pause failed {self.processed()}")
            sys.stdin.readline()
            return
        super().maybe_pause(kind)

    def produce(self, start: int, stop: int) -> None:
        """Append events ``start..stop`` (``start`` is at a run boundary), one ``append_many`` per run."""
        assert start % RUN == 0, f"the store holds a partial run: {start} events appended"
        for run_start in range(start, stop, RUN):
            batch = [event(i) for i in range(run_start, min(stop, run_start + RUN))]
            self.engine.append_many(batch[0][0], [(value, when) for _, value, when in batch])
            self.maybe_pause("append")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="poison_worker")
    parser.add_argument("store", help="an SQLite file or a postgresql:// URL")
    parser.add_argument("--pause", default=None, help="KIND@POSITION")
    args = parser.parse_args(argv)
    pause = None
    if args.pause:
        kind, _, position = args.pause.partition("@")
        pause = (kind, int(position))
    store = args.store if args.store.startswith(("postgresql://", "postgres://")) else str(Path(args.store))
    Worker(store, pause).run()
    return 0


if __name__ == "__main__":
    from tests.engine import poison_worker  # noqa: PLW0406  (one module object, whatever the entry)

    sys.exit(poison_worker.main())
