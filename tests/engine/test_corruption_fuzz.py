"""Corruption fuzz (acceptance of issue 14): a damaged store recovers exactly, or fails with a documented error.

One real store is built once (``corruption_support.build_store``): four durable streams (ints, dict records, ints
that inner queries read at run time, words), an observable definition, and fifteen subscriptions of different
shapes: running sums and count buffers in pairs that share a template and differ only in constants, time and
time-or-count buffers, distinct, ``group_by`` with per-key inner queries (inner units under ``uri/...``),
``switch_latest`` and ``flat_map(..., max_concurrent=1)`` whose inners read ``Query.stream("s://c")`` (the second
withholds demand, so its outer reader lags and pins the log), ``skip``/``take`` (one finished, one running) and a
``take(...).sum()`` that completes only after recovery. It is fed, checkpointed, fed again (part of which is
processed), and closed without a checkpoint, as a crash leaves it.

**The oracle**: a copy opened unmutated under ``RecoveryPolicy.KEEP``; the engine processes the log, then a fixed
extra batch; each subscription's durable outputs and status are recorded. **Each case** (``REAQTIVE_FUZZ_CASES``,
default 1,000; ``REAQTIVE_FUZZ_SEED``; ``REAQTIVE_FUZZ_CASE=n`` runs case ``n`` alone and prints it) damages a
fresh copy with one mutation drawn from its own seeded RNG, runs the same under a watchdog, and classifies every
subscription:

* ``exact``: outputs, status and ending equal the oracle's;
* ``failed-documented``: the subscription is listed in ``engine.recovery.failures`` or ``engine.faults`` (stopped
  while running), or a step of the engine raised, with a documented error type (a
  ``reaqtive.core.errors.ReaqtiveError``: ``StateError``, ``StoreError``, ``EngineError``, ``RecoveryError``, ...);
  ``open-failed``: the open raised one;
* ``dead-lettered``: the subscription runs on, its results differ, and the engine quarantined events of a stream
  it reads (``engine.dead_letters()``): the damaged input was set aside and reported (a time-based subscription
  counts any quarantined event: every event moves the clock);
* ``untyped-error``: the same with ``ValueError``, ``KeyError``, ``TypeError``, ``sqlite3.Error``, ...;
* ``silently-wrong``: running (or finished normally), outputs or status differ;
* ``silently-ended``: ended by an error that was not reported as a recovery failure, or no longer known to the
  engine at all;
* ``harmed-healthy``: a subscription the mutation did not touch is not exact;
* ``deleted-stored``: under KEEP a failed subscription's rows (artifact, state, inner states, output counter, the
  ingress events of its streams) are not all in the file byte for byte after the engine checkpointed and closed;
  or an open that failed changed the file;
* ``hang``: the run did not finish within ``REAQTIVE_FUZZ_TIMEOUT`` seconds of CPU time (default 2), or 15 times
  that of wall time (a wait: on a loaded machine a healthy run can wait seconds for a core).

Which damage is in scope: whatever a store could detect in principle.

* **Damage behind a stale checksum**: bit flips and truncation of any blob row (state, artifacts, templates, the
  engine's delivery record, output counters) and flips of the ``crc`` column itself.
* **Rows exchanged, copied or deleted** (the crc moving with the value): in scope because a row checksum that
  covers category and key (``row_crc``; the store's ``row_checksum`` helper when it has one) tells a row in the
  wrong place; every stored row a subscription has is written at its creation, so a missing one is damage.
* **Forgeries behind a valid checksum** (the blob's own CRC and the row's recomputed): only values no real run
  can produce. A state record of a version the operator does not load, another operator name, a path that does
  not exist, a record dropped, duplicated or moved, an entry missing or inserted in front, a value where a
  segment was written, a wrong format byte, length or magic; a field whose type the *operator* defines (the
  disposed flag, counts, inner ids and slots, watermarks, containers, deadlines: ``corruption_support.FIELDS``)
  holding another type, even one with the same meaning (``1`` for ``True``, ``"7"`` for ``7``); a few impossible
  values of the right type (``state-range``: negative counts and ids, a watermark beyond the stream's head or
  below -1, a partial count buffer as long as a full one, a time window's deadline in 1900 or 2226). JSON rows:
  records, templates and the delivery record with fields of the wrong type, missing or extra constants, unknown
  operators and functions, and a template changed into *another well-formed query* (its id is its content's
  hash, so that too is detectable). Output counters that are not numbers, or negative.
* **The ingress log and the durable sink**: payloads flipped or truncated, times moved to 2226, before 1970 or
  out of range, or exchanged, sequence numbers beyond the head or negative, an event moved to another or an
  unknown stream, deleted, duplicated after the head, payloads exchanged, two events of one stream reordered;
  sink rows flipped, truncated, deleted, exchanged or renumbered. (Detectable once the rows carry a checksum over
  all their columns and the engine checks that sequence numbers are contiguous.)
* **The store's own tables and the file**: ``reaqtive_meta`` values, a dropped table, a truncated file, a zeroed
  page.

Out of scope, because no store can tell them from real state: a right-typed, in-range value that is simply
another one (a running sum of 41 instead of 42, a watermark a few events back, a counter of 12 instead of 13, a
disposed flag of ``True`` instead of ``False``); **user data** of any type (accumulators, buffered elements,
keys, the members of a distinct set: their type is the user's, and a wrong one fails in the user's function);
a constant of the right type with another value (``buffer(4)`` for ``buffer(3)``: another query); an extra entry
at the end of a segment (skipped by design, so that layouts can grow); and events a producer could have appended
(a payload of an unexpected type).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reaqtive.testing.postgres import PostgresCluster
from tests.engine import corruption_support as fuzz

SEED = int(os.environ.get("REAQTIVE_FUZZ_SEED", "14"))
CASES = int(os.environ.get("REAQTIVE_FUZZ_CASES", "1000"))
ONLY = os.environ.get("REAQTIVE_FUZZ_CASE")
TIMEOUT = float(os.environ.get("REAQTIVE_FUZZ_TIMEOUT", "2.0"))
# The cases run in shards (case i in shard i % SHARDS) so that parallel workers share them: the same cases are
# checked, in a quarter of the time on four workers.
SHARDS = 4


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "pristine.db"
    fuzz.build_store(path)
    return path


@pytest.fixture(scope="module")
def store_map(pristine: Path) -> fuzz.StoreMap:
    return fuzz.StoreMap.read(pristine)


@pytest.fixture(scope="module")
def oracle(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> fuzz.Run:
    copy = tmp_path_factory.mktemp("oracle") / "oracle.db"
    shutil.copyfile(pristine, copy)
    run = fuzz.observe(copy, timeout=30.0)
    assert run.open_error is None and run.run_error is None and not run.hang, (run.open_error, run.run_error)
    return run


def test_the_undamaged_store_recovers_exactly(
    pristine: Path, store_map: fuzz.StoreMap, oracle: fuzz.Run, tmp_path: Path
) -> None:
    """The oracle is what the fuzz compares with: recovering the undamaged store must give what an engine that
    never stopped gives, with no subscription stopped, no event quarantined, nothing deleted."""
    reference = fuzz.build_store(tmp_path / "never-stopped.db", crash=False)
    assert reference is not None
    problems = []
    for uri, seen in oracle.subscriptions.items():
        if seen.failure or seen.fault or seen.ended_with:
            problems.append(f"{uri}: stopped: {fuzz.describe(seen.failure or seen.fault or seen.ended_with)}")
        if seen.outputs != reference[uri]:
            got, want = seen.outputs or [], reference[uri]
            first = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
                         min(len(got), len(want)))
            problems.append(f"{uri}: {len(got)} outputs after recovery, {len(want)} without a stop; first "
                            f"difference at #{first}: {got[first:first + 2]} instead of {want[first:first + 2]}")
    problems += [f"{uri}: deleted {rows}" for uri, rows in fuzz.deleted_rows(oracle, store_map.needs()).items()]
    assert not oracle.dead_letters and not oracle.append_errors, (oracle.dead_letters, oracle.append_errors)
    assert not problems, "\n".join(problems)


def test_the_store_has_every_shape_the_fuzz_attacks(store_map: fuzz.StoreMap, oracle: fuzz.Run) -> None:
    state = store_map.keys("state")
    assert {"q://group", "q://switch", "q://bounded"} <= {key.rsplit("/", 2)[0] for key in state if
                                                         key.count("/") > 3}, "inner units under uri/..."
    assert len(store_map.keys("templates")) < len(fuzz.SUBSCRIPTIONS), "some subscriptions share a template"
    assert {row["stream"] for row in store_map.ingress} == set(fuzz.STREAMS), "every stream has events in the log"
    assert min(row["pos"] for row in store_map.ingress) < fuzz.BEFORE_CHECKPOINT, "a lagging reader pins the log"
    names = {record.name for key in state for record in fuzz.decode_state(store_map.blobs[("state", key)][0])}
    assert set(fuzz.FIELDS) - {"*"} <= names, sorted(set(fuzz.FIELDS) - names)
    assert all(seen.outputs for seen in oracle.subscriptions.values()), "every subscription has outputs"
    assert not any(row["subscription"] == "q://agg" for row in store_map.egress), "it completes after recovery"
    assert [value for _, _, value in oracle.subscriptions["q://agg"].outputs or []] != []


def test_the_forgeries_reencode_real_blobs_to_the_same_bytes_and_checksums(store_map: fuzz.StoreMap) -> None:
    """The mutators rebuild state blobs and row checksums themselves: they must agree with the store."""
    for (category, key), (value, crc) in store_map.blobs.items():
        assert fuzz.row_crc(category, key, value) == crc, f"row_crc disagrees with the store on {category}/{key}"
        if category == "state":
            assert fuzz.encode_state(fuzz.decode_state(value)) == value, key


def test_the_watchdog_turns_a_run_that_never_ends_into_an_outcome() -> None:
    with pytest.raises(fuzz.HangError):
        with fuzz.watchdog(0.2):
            while True:
                pass


def test_the_watchdog_turns_a_run_that_waits_forever_into_an_outcome() -> None:
    """A wait uses no CPU time: the wall-time bound (``WALL_FACTOR`` times the CPU bound) ends it."""
    started = time.monotonic()
    with pytest.raises(fuzz.HangError):
        with fuzz.watchdog(0.02):
            while True:
                threading.Event().wait(0.01)
    assert time.monotonic() - started >= 0.02 * fuzz.WALL_FACTOR


@pytest.mark.parametrize("shard", range(SHARDS), ids=lambda shard: f"shard{shard}")
def test_a_damaged_store_recovers_exactly_or_fails_with_a_documented_error(
    shard: int, pristine: Path, store_map: fuzz.StoreMap, oracle: fuzz.Run, tmp_path: Path
) -> None:
    if ONLY is not None and shard != int(ONLY) % SHARDS:
        pytest.skip(f"REAQTIVE_FUZZ_CASE={ONLY} runs in shard {int(ONLY) % SHARDS}")
    data = pristine.read_bytes()
    needs = store_map.needs()
    cases = [int(ONLY)] if ONLY is not None else range(shard, CASES, SHARDS)
    table: dict[str, Counter[str]] = defaultdict(Counter)
    per_subscription: Counter[str] = Counter()
    examples: dict[tuple[str, str], str] = {}
    started = time.perf_counter()
    for case in cases:
        mutation = fuzz.mutation_for_case(store_map, SEED, case)
        path = tmp_path / f"case{case}.db"
        path.write_bytes(data)
        mutation.damage(path)
        run = fuzz.observe(path, TIMEOUT)
        verdict = fuzz.classify(run, oracle, mutation.touched, needs)
        table[mutation.cls][verdict.worst] += 1
        per_subscription.update(verdict.outcomes.values())
        for uri, outcome in verdict.outcomes.items():
            if outcome in fuzz.BAD and (mutation.cls, outcome) not in examples:
                examples[(mutation.cls, outcome)] = (f"case {case}: {mutation.what} -> {uri}: "
                                                     f"{verdict.details[uri]}")
        if ONLY is not None:
            print(f"\ncase {case} [{mutation.cls}] {mutation.what}; touched {sorted(mutation.touched)}")
            for uri, outcome in verdict.outcomes.items():
                print(f"  {uri:22} {outcome:18} {verdict.details[uri]}")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    elapsed = time.perf_counter() - started

    report = render(table, per_subscription, examples, len(cases), elapsed)
    print(report)
    bad = {outcome: sum(counts[outcome] for counts in table.values()) for outcome in fuzz.BAD}
    assert not any(bad.values()), report


def render(table: dict[str, Counter[str]], per_subscription: Counter[str], examples: dict[tuple[str, str], str],
           cases: int, elapsed: float) -> str:
    """Cases per mutation class and worst outcome, per-subscription totals, one example per bad pair."""
    columns = fuzz.OUTCOMES
    width = max(len(name) for name in [*table, "mutation class"]) + 2
    lines = [f"\n{cases} cases in {elapsed:.1f} s (worst outcome of each case, by mutation class)",
             "mutation class".ljust(width) + "".join(f"{c:>18}" for c in columns)]
    totals: Counter[str] = Counter()
    for name in sorted(table):
        totals.update(table[name])
        lines.append(name.ljust(width) + "".join(f"{table[name][c] or '.':>18}" for c in columns))
    lines.append("total".ljust(width) + "".join(f"{totals[c]:>18}" for c in columns))
    lines.append("per subscription: " + ", ".join(f"{c} {per_subscription[c]}" for c in columns))
    if examples:
        lines.append("first example of each bad outcome:")
        lines += [f"  [{cls} / {outcome}] {text}" for (cls, outcome), text in sorted(examples.items())]
    return "\n".join(lines)


# -- the same fuzz on a PostgreSQL store ---------------------------------------------------------------------------
#
# The store is built the same way in a database of the throwaway server; each case damages a copy of it (CREATE
# DATABASE ... TEMPLATE) through SQL with the same mutations (their statements run on PostgreSQL unchanged but for
# the parameter marks), and is classified the same way. The file's own damage (truncation, zeroed pages) has no
# equivalent: a database is not a file the engine reads, so those draws are skipped. Fewer cases than on SQLite:
# each costs a database copy and a few more round trips.

PG_CASES = int(os.environ.get("REAQTIVE_FUZZ_PG_CASES", "80"))
PG_TIMEOUT = float(os.environ.get("REAQTIVE_FUZZ_PG_TIMEOUT", "10.0"))


class PostgresDamage:
    """What the mutations call on a ``sqlite3.Connection`` (``execute`` with ``?`` parameters), on a psycopg
    connection inside one transaction. Two statements need PostgreSQL's words: ``reaqtive_meta.value`` is
    ``jsonb`` (a value of another type becomes that JSON), and a duplicated log row gets the next ``pos``, as
    SQLite's ``INTEGER PRIMARY KEY`` gives it."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def execute(self, statement: str, parameters: tuple[Any, ...] = ()) -> Any:
        from psycopg.types.json import Jsonb

        if statement.startswith("UPDATE reaqtive_meta SET value = ?"):
            parameters = (Jsonb(parameters[0]), *parameters[1:])
        if statement.startswith("INSERT INTO reaqtive_ingress (") and "pos" not in statement.partition(")")[0]:
            columns, _, values = statement.partition(") VALUES (")
            statement = (f"{columns.replace('(', '(pos, ', 1)}) SELECT COALESCE(MAX(pos), 0) + 1, "
                         f"{values.rstrip(')')} FROM reaqtive_ingress")
        return self._connection.execute(statement.replace("?", "%s"), parameters)


def postgres_rows(dsn: str) -> dict[str, Any] | None:
    """:func:`fuzz.stored_rows` of a database: every blob row and the (stream, seq) pairs of the log."""
    import psycopg

    try:
        with psycopg.connect(dsn) as db:
            blobs = {(row[0], row[1]): tuple(row) for row in db.execute("SELECT * FROM reaqtive_blobs")}
            ingress = {(stream, seq + i) for stream, seq, count in
                       db.execute("SELECT stream, seq, count FROM reaqtive_ingress").fetchall()
                       for i in range(min(count, 4096))}
    except psycopg.Error:
        return None
    return {"blobs": blobs, "ingress": ingress}


def postgres_store_map(dsn: str) -> fuzz.StoreMap:
    import psycopg

    def rows(db: Any, table: str, order: str) -> list[dict[str, Any]]:
        cursor = db.execute(f"SELECT * FROM {table} ORDER BY {order}")
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    with psycopg.connect(dsn) as db:
        blobs = {(category, key): (bytes(value), crc)
                 for category, key, value, crc in db.execute("SELECT category, key, value, crc FROM reaqtive_blobs")}
        heads = dict(db.execute("SELECT stream, next_seq FROM reaqtive_stream_heads").fetchall())
        # a nominal file of two pages: the file mutations are drawn (and skipped) as on SQLite
        return fuzz.StoreMap(blobs, rows(db, "reaqtive_ingress", "pos"),
                             rows(db, "reaqtive_egress", "subscription, seq"), heads, size=8192, page_size=4096)


def database_name(dsn: str) -> str:
    return dsn.rsplit("/", 1)[1]


@pytest.fixture(scope="module")
def pg_pristine(postgres_server: PostgresCluster) -> Iterator[str]:
    dsn = postgres_server.create_database()
    fuzz.build_store(dsn)  # type: ignore[arg-type]  (a store target: a path or a DSN)
    yield dsn
    postgres_server.drop_database(database_name(dsn))


@pytest.fixture(scope="module")
def pg_store_map(pg_pristine: str) -> fuzz.StoreMap:
    return postgres_store_map(pg_pristine)


@pytest.fixture
def postgres_fuzz(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fuzz's row snapshots (the deletion check) read the database rather than a file."""
    monkeypatch.setattr(fuzz, "stored_rows", postgres_rows)


@pytest.fixture(scope="module")
def pg_oracle(pg_pristine: str, postgres_server: PostgresCluster) -> Iterator[fuzz.Run]:
    copy = postgres_server.create_database(template=database_name(pg_pristine))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fuzz, "stored_rows", postgres_rows)
        run = fuzz.observe(copy, timeout=60.0)  # type: ignore[arg-type]
    assert run.open_error is None and run.run_error is None and not run.hang, (run.open_error, run.run_error)
    yield run
    postgres_server.drop_database(database_name(copy))


def test_on_postgresql_the_undamaged_store_recovers_as_on_sqlite(
    pg_oracle: fuzz.Run, oracle: fuzz.Run, pg_store_map: fuzz.StoreMap
) -> None:
    """The PostgreSQL oracle must be the SQLite one: the same outputs and endings for every subscription, nothing
    stopped, quarantined or deleted."""
    assert set(pg_oracle.subscriptions) == set(oracle.subscriptions)
    for uri, seen in pg_oracle.subscriptions.items():
        want = oracle.subscriptions[uri]
        assert not (seen.failure or seen.fault or seen.ended_with), (uri, seen)
        assert (seen.outputs, seen.running) == (want.outputs, want.running), uri
    assert not pg_oracle.dead_letters and not pg_oracle.append_errors
    assert not fuzz.deleted_rows(pg_oracle, pg_store_map.needs())


@pytest.mark.usefixtures("postgres_fuzz")
def test_on_postgresql_a_damaged_store_recovers_exactly_or_fails_with_a_documented_error(
    pg_pristine: str, pg_store_map: fuzz.StoreMap, pg_oracle: fuzz.Run, postgres_server: PostgresCluster
) -> None:
    import psycopg

    needs = pg_store_map.needs()
    table: dict[str, Counter[str]] = defaultdict(Counter)
    per_subscription: Counter[str] = Counter()
    examples: dict[tuple[str, str], str] = {}
    started = time.perf_counter()
    done = 0
    case = -1
    while done < (1 if ONLY is not None else PG_CASES):
        case = int(ONLY) if ONLY is not None else case + 1
        mutation = fuzz.mutation_for_case(pg_store_map, SEED, case)
        if mutation.apply is None:
            continue  # damage to a file: no equivalent in a database
        done += 1
        dsn = postgres_server.create_database(template=database_name(pg_pristine))
        try:
            with psycopg.connect(dsn) as db, db.transaction():
                mutation.apply(PostgresDamage(db))  # type: ignore[arg-type]
            run = fuzz.observe(dsn, PG_TIMEOUT)  # type: ignore[arg-type]
        finally:
            postgres_server.drop_database(database_name(dsn))  # also ends what a hung run left connected
        verdict = fuzz.classify(run, pg_oracle, mutation.touched, needs)
        table[mutation.cls][verdict.worst] += 1
        per_subscription.update(verdict.outcomes.values())
        for uri, outcome in verdict.outcomes.items():
            if outcome in fuzz.BAD and (mutation.cls, outcome) not in examples:
                examples[(mutation.cls, outcome)] = (f"case {case}: {mutation.what} -> {uri}: "
                                                     f"{verdict.details[uri]}")
        if ONLY is not None:
            print(f"\ncase {case} [{mutation.cls}] {mutation.what}; touched {sorted(mutation.touched)}")
            for uri, outcome in verdict.outcomes.items():
                print(f"  {uri:22} {outcome:18} {verdict.details[uri]}")
    report = render(table, per_subscription, examples, done, time.perf_counter() - started)
    print(report)
    bad = {outcome: sum(counts[outcome] for counts in table.values()) for outcome in fuzz.BAD}
    assert not any(bad.values()), report
