"""The keyed state table: per-key records of one operator, checkpointed in pages that are inner units.

A small stateful operator (a running count per key, ``testkeyed:count``) uses the table; it runs standalone,
under the checkpoint-anywhere harness (restarts at every tick, through real bytes, with bounded demand too),
against a dict model over random put/pop sequences with restarts, and in the engine, closed and reopened. A
checkpoint after changing 3 keys of 5,000 writes those keys' pages only. Measured here (printed with ``-s``): the
memory per key, and, with ``REAQTIVE_BIG=1``, the store size and open + recovery time for 1,000,000 keys.
"""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, Query, SimpleSubject, from_iterable
from reaqtive.core.arguments import arguments
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize, walk
from reaqtive.engine import DISCARD_SINK, Engine
from reaqtive.state import (
    STATE_CATEGORY,
    CheckpointMode,
    InnerEnvironment,
    MissingStateError,
    SqliteCheckpointStore,
    StateError,
    StatefulUnaryOperatorBase,
    save_subscription,
    state_loader,
)
from reaqtive.state.host import QueryHost, QueryState
from reaqtive.state.keyed import KeyedPage, KeyedStateTable
from reaqtive.state.traversal import confirm_saved
from reaqtive.testing import TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.engine.corruption_support import decode_state
from tests.operators._forged_support import forge, pointers, run_from, save_at, value_at
from tests.operators.test_checkpoint_bounded_demand import Case
from tests.operators.test_forged_state import wrong_values
from tests.support import Recorder

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# -- the test operator: a running count per key ----------------------------------------------------------------------


def keyed_count(*, page_size: int = 1024) -> OperatorCall[tuple[int, int]]:
    """A running count per key (a test operator): a key ``k > 0`` counts, emitting ``(k, count)``; ``-k`` forgets
    key ``k``, emitting ``(k, -count)`` (``(k, 0)`` if it was not counted). State: a keyed state table."""
    return OperatorCall("testkeyed:count", (page_size,))


@dataclass(frozen=True, slots=True)
class KeyedCountArgs:
    source: Subscribable[Any]
    page_size: int

    @classmethod
    def read(cls, query: Expression[Any]) -> KeyedCountArgs:
        args = arguments(query, "source", "page_size")
        return cls(args.source(0), args.integer(1, minimum=1))


@register_operator("testkeyed:count", frames=2, builder=keyed_count, args=KeyedCountArgs)
class KeyedCount(StatefulUnaryOperatorBase[int, tuple[int, int]]):
    name = "testkeyed:count"
    version: Version = (1,)

    __slots__ = ("_source", "table")

    def __init__(self, query: Expression[Any], downstream: Subscriber[tuple[int, int]]) -> None:
        super().__init__(downstream)
        args = KeyedCountArgs.read(query)
        self._source: Subscribable[int] = args.source
        self.table: KeyedStateTable[int] = KeyedStateTable(page_size=args.page_size)

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self.table.attach(self, context)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: int) -> None:
        table = self.table
        if value < 0:
            record = table.pop(-value)
            self._downstream.on_next((-value, 0 if record is None else -record[0]))
            return
        record = table.get(value)
        count = 1 if record is None else record[0] + 1
        table.put(value, (count,))
        self._downstream.on_next((value, count))

    def save_state_core(self, writer: StateWriter) -> None:
        self.table.save(writer)

    def load_state_core(self, reader: StateReader) -> None:
        self.table.load(reader)

    def on_dispose(self) -> None:
        self.table.dispose()
        super().on_dispose()


def model(elements: Iterable[int]) -> tuple[list[tuple[int, int]], dict[int, tuple[int]]]:
    """What the running count must emit, and its records (a dict keeps first-put order as the table must)."""
    counts: dict[int, tuple[int]] = {}
    out: list[tuple[int, int]] = []
    for x in elements:
        if x < 0:
            record = counts.pop(-x, None)
            out.append((-x, 0 if record is None else -record[0]))
        else:
            count = counts.get(x, (0,))[0] + 1
            counts[x] = (count,)
            out.append((x, count))
    return out, counts


class World:
    """One life of a hosted running count (the host the engine and the harness use), fed through a subject."""

    def __init__(self, page_size: int, state: QueryState | None = None) -> None:
        self.host = QueryHost(TestScheduler())
        self.subject: SimpleSubject[int] = SimpleSubject()
        self.recorder = Recorder(initial=LONG_MAX)
        query = self.subject.as_query().pipe(keyed_count(page_size=page_size))
        self.query = self.host.bind("sub://k", query, self.recorder)
        self.query.start(state)

    @property
    def environment(self) -> InnerEnvironment:
        return self.host.environment

    @property
    def table(self) -> KeyedStateTable[int]:
        return next(node for node in walk(self.query.handle) if isinstance(node, KeyedCount)).table

    def feed(self, elements: Iterable[int]) -> None:
        for x in elements:
            self.subject.on_next(x)

    def save(self, previous: QueryState | None = None, mode: CheckpointMode = CheckpointMode.DIFFERENTIAL) -> Any:
        saving = self.query.save(previous, mode)
        saving.confirm()
        return saving

    def crash(self) -> None:
        self.host.dispose()


# -- the table on its own ---------------------------------------------------------------------------------------------


def test_an_unattached_table_is_a_dict_in_first_put_order() -> None:
    table: KeyedStateTable[str] = KeyedStateTable(page_size=2)
    for key in "abcde":
        table.put(key, (ord(key),))
    table.put("b", (0,))  # an update keeps the key's place
    assert table.pop("a") == (97,) and table.pop("a") is None
    table.put("a", (1,))  # popped and put again: a new key, last
    assert list(table.items()) == [("b", (0,)), ("c", (99,)), ("d", (100,)), ("e", (101,)), ("a", (1,))]
    assert len(table) == 5 and "c" in table and "z" not in table and table.get("z") is None
    table.put("f", (2,))
    assert len(table.page_ids()) == 4, "b | c,d | e,a (the newest page took 'a' again) | f"


def test_page_size_must_be_a_positive_int() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="page_size"):
            KeyedStateTable(page_size=bad)  # type: ignore[arg-type]


def test_the_owner_may_change_the_table_while_iterating_its_items() -> None:
    table: KeyedStateTable[int] = KeyedStateTable(page_size=2)
    for key in range(6):
        table.put(key, (key,))
    seen = []
    for key, _ in table.items():
        seen.append(key)
        table.pop(key)
    assert seen == list(range(6)) and len(table) == 0 and table.page_ids() == []


# -- standalone ------------------------------------------------------------------------------------------------------

ELEMENTS = [1, 2, 1, 3, 4, 5, -2, 1, -1, -3, 6, 2, -7, 4, -4, -5, -6, 8, 2]


def test_standalone_it_counts_per_key() -> None:
    out: list[tuple[int, int]] = []
    from_iterable(ELEMENTS).pipe(keyed_count(page_size=2)).run(out.append)
    assert out == model(ELEMENTS)[0]


def test_standalone_the_owner_blob_holds_every_record_and_every_change_dirties_it() -> None:
    subject: SimpleSubject[int] = SimpleSubject()
    recorder = Recorder(initial=LONG_MAX)
    handle = initialize(subject.as_query().pipe(keyed_count(page_size=2)).subscribe(recorder), OperatorContext("s"))
    for x in ELEMENTS[:9]:
        subject.on_next(x)
    blob = save_subscription(handle)
    assert blob is not None
    confirm_saved(handle)
    assert save_subscription(handle, CheckpointMode.DIFFERENTIAL) is None
    subject.on_next(5)
    assert save_subscription(handle, CheckpointMode.DIFFERENTIAL) is not None, "a changed record dirties the owner"
    handle.dispose()
    subject2: SimpleSubject[int] = SimpleSubject()
    recorder2 = Recorder(initial=LONG_MAX)
    handle2 = subject2.as_query().pipe(keyed_count(page_size=2)).subscribe(recorder2)
    initialize(handle2, OperatorContext("s"), state_loader(blob))
    for x in ELEMENTS[9:]:
        subject2.on_next(x)
    assert recorder.values[:9] + recorder2.values == model(ELEMENTS)[0]


def test_a_standalone_state_loads_into_pages_under_an_environment_and_a_paged_one_needs_an_environment() -> None:
    subject: SimpleSubject[int] = SimpleSubject()
    handle = initialize(subject.as_query().pipe(keyed_count(page_size=2)).subscribe(Recorder(initial=LONG_MAX)),
                        OperatorContext("sub://k"))
    for x in ELEMENTS[:6]:
        subject.on_next(x)
    blob = save_subscription(handle)
    assert blob is not None
    world = World(2, QueryState(blob))
    assert list(world.table.items()) == list(model(ELEMENTS[:6])[1].items())
    assert world.table.page_ids() == ["sub://k/keyed0/0", "sub://k/keyed0/1", "sub://k/keyed0/2"]
    world.feed(ELEMENTS[6:])
    assert world.recorder.values == model(ELEMENTS)[0][6:]
    paged = world.save(None, CheckpointMode.FULL).state
    world.crash()
    assert paged.main is not None
    standalone = subject.as_query().pipe(keyed_count(page_size=2)).subscribe(Recorder(initial=LONG_MAX))
    with pytest.raises(StateError, match="HigherOrderEnvironment"):
        initialize(standalone, OperatorContext("sub://k"), state_loader(paged.main))


# -- hosted: pages are inner units -----------------------------------------------------------------------------------


def test_pages_are_inner_units_in_first_put_order_and_an_emptied_page_is_deleted() -> None:
    world = World(2)
    world.feed([1, 2, 3, 4, 5])
    assert world.table.page_ids() == ["sub://k/keyed0/0", "sub://k/keyed0/1", "sub://k/keyed0/2"]
    assert sorted(world.environment.inner_subscriptions()) == world.table.page_ids()
    world.feed([6])  # the newest page had room
    world.feed([7])  # a new page
    assert world.table.page_ids()[-1] == "sub://k/keyed0/3"
    world.feed([-3, -4])
    assert "sub://k/keyed0/1" not in world.environment.inner_subscriptions()
    assert world.environment.removed_inner_ids() == ["sub://k/keyed0/1"]
    world.feed([-6, -7])  # the newest page empties: the page before it (with room now) takes new keys again
    world.feed([8])
    assert world.table.page_ids() == ["sub://k/keyed0/0", "sub://k/keyed0/2"]
    assert list(world.table.items()) == [(1, (1,)), (2, (1,)), (5, (1,)), (8, (1,))]
    world.crash()


def test_a_restart_restores_every_page_before_the_owner_starts() -> None:
    world = World(3)
    world.feed(ELEMENTS[:10])
    state = world.save().state
    assert sorted(state.inner) == world.table.page_ids()
    world.crash()
    again = World(3, state)
    assert list(again.table.items()) == list(model(ELEMENTS[:10])[1].items())
    assert again.query.unclaimed() == [] and again.query.load_failures() == {}
    again.feed(ELEMENTS[10:])
    assert again.recorder.values == model(ELEMENTS)[0][10:]
    again.crash()


def test_a_missing_page_fails_the_recovery_and_a_page_copied_over_another_is_refused() -> None:
    world = World(2)
    world.feed([1, 2, 3, 4])
    state = world.save().state
    world.crash()
    first, second = sorted(state.inner)
    with pytest.raises(MissingStateError):
        World(2, QueryState(state.main, {first: state.inner[first]}))
    with pytest.raises(StateError, match="each key in one page"):
        World(2, QueryState(state.main, {first: state.inner[first], second: state.inner[first]}))


# -- (iv) a checkpoint writes the dirty pages only -------------------------------------------------------------------


def test_a_checkpoint_after_changing_3_keys_of_5000_writes_their_3_pages_only() -> None:
    world = World(1024)
    world.feed(range(1, 5001))
    pages = world.table.page_ids()
    assert len(pages) == 5
    full = world.save()
    assert len(full.written) == 6, "the owner and its five pages"
    world.environment.dirty.take()
    world.feed([1, 2500, 5000])  # keys of pages 0, 2 and 4
    assert world.environment.dirty.take() == {pages[0], pages[2], pages[4]}, "the owner is clean"
    differential = world.save(full.state)
    assert sorted(differential.written) == [pages[0], pages[2], pages[4]]
    again = world.save(differential.state)
    assert again.written == (), "nothing changed since"
    size = {unit: len(blob) for unit, blob in differential.state.inner.items()}
    written = sum(size[unit] for unit in differential.written)
    assert written < sum(size.values()) * 0.65, "3 pages of 5 (and not the owner)"
    world.environment.dirty.take()
    world.feed([5001])  # a new key, into the newest page (it has room)
    assert world.environment.dirty.take() == {pages[4]}
    state = world.save(again.state).state
    world.feed(range(5002, 5122))  # the newest page fills, then a new page opens, and the owner lists it
    assert world.environment.dirty.take() == {pages[4], "sub://k", world.table.page_ids()[-1]}
    world.save(state)
    world.feed([-5121])  # the new page empties: it is deleted, and the owner no longer lists it
    assert world.environment.dirty.take() == {"sub://k"}
    assert world.environment.removed_inner_ids() == ["sub://k/keyed0/5"]
    world.crash()


# -- (ii) checkpoint anywhere ------------------------------------------------------------------------------------------

SCRIPT = [
    on_next(210, 1), on_next(220, 2), on_next(230, 1), on_next(240, 3), on_next(250, -2), on_next(260, -1),
    on_next(270, 4), on_next(280, 2), on_next(290, -3), on_next(300, -4), on_next(310, 5), on_next(320, 2),
    on_next(330, -9), on_completed(400),
]


@pytest.mark.parametrize("page_size", [1, 2, 1024])
def test_checkpoint_anywhere(page_size: int) -> None:
    assert_checkpoint_anywhere(lambda xs: xs.pipe(keyed_count(page_size=page_size)), SCRIPT)


@pytest.mark.parametrize(
    "demand", [Demand(initial=1, batch=1), Demand(requests=((215, 1), (265, 3), (305, 2), (350, 20)))], ids=str
)
def test_checkpoint_anywhere_with_bounded_demand(demand: Demand) -> None:
    assert_checkpoint_anywhere(lambda xs: xs.pipe(keyed_count(page_size=2)), SCRIPT, demand=demand)


# -- (iii) against a dict model ---------------------------------------------------------------------------------------

RESTART = 0  # in a step list: save, crash and recover here (elements are keys > 0 and pops < 0)
steps = st.lists(st.integers(-8, 8), max_size=80)


@settings(max_examples=150, deadline=None)
@given(steps=steps, page_size=st.integers(1, 4), full=st.booleans())
def test_the_table_behaves_as_a_dict_across_restarts(steps: list[int], page_size: int, full: bool) -> None:
    elements = [x for x in steps if x != RESTART]
    expected, records = model(elements)
    mode = CheckpointMode.FULL if full else CheckpointMode.DIFFERENTIAL
    world, state, out = World(page_size), None, []
    try:
        for x in steps:
            if x != RESTART:
                world.feed([x])
                continue
            state = world.save(state, mode).state
            assert sorted(state.inner) == sorted(world.table.page_ids()), "the stored pages are the live ones"
            out += world.recorder.values
            world.crash()
            world = World(page_size, state)
        out += world.recorder.values
        assert out == expected
        assert list(world.table.items()) == list(records.items())
        assert len(world.table) == len(records) and all(world.table.get(k) == r for k, r in records.items())
    finally:
        world.crash()


# -- memory ------------------------------------------------------------------------------------------------------------


def test_memory_per_key_for_100000_keys() -> None:
    world = World(1024)
    table = world.table
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        base = 10**6  # keys and counts that are not the interpreter's cached small ints: every one is allocated
        for i in range(100_000):
            table.put(base + i, (base + i,))
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    per_key = used / 100_000
    print(f"\nkeyed table, hosted, 100,000 keys, record (int,): {per_key:.0f} B/key (key, record, index, pages)")
    assert per_key < 300
    world.crash()


# -- (v) the engine ----------------------------------------------------------------------------------------------------


def engine_counts(path: Path, elements: list[int], crash_after: int | None = None) -> list[object]:
    engine = Engine(path)
    engine.create_stream("raw")
    engine.create_subscription("q", Query.stream("raw").pipe(keyed_count(page_size=4)))
    engine.append_many("raw", [(x, T0 + timedelta(seconds=i)) for i, x in enumerate(elements)])
    if crash_after is not None:
        engine.process(max_events=len(elements) // 2)
        engine.checkpoint()
        engine.process(max_events=crash_after)
        engine.close()  # no checkpoint: what happened since the last one is replayed
        engine = Engine(path)
    engine.process()
    values = [output.value for output in engine.outputs("q")]
    engine.close()
    return values


def test_the_engine_recovers_the_pages(tmp_path: Path) -> None:
    elements = [k % 37 + 1 for k in range(300)] + [-(k + 1) for k in range(0, 37, 3)] + [k + 1 for k in range(50)]
    expected = engine_counts(tmp_path / "oracle.db", elements)
    assert expected == model(elements)[0]
    assert engine_counts(tmp_path / "crashed.db", elements, crash_after=57) == expected


def test_the_engine_checkpoints_only_the_dirty_pages(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Engine(path) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").pipe(keyed_count(page_size=4)))
        engine.append_many("raw", [(x, T0) for x in range(1, 41)])
        engine.process()
        full = engine.checkpoint(full=True)
        assert full.dirty_subscriptions == 11, "the query and its 10 pages"
        engine.append_many("raw", [(x, T0) for x in (1, 2, 17)])
        engine.process()
        assert engine.checkpoint().dirty_subscriptions == 2, "pages 0 and 4: the query is clean"
    store = SqliteCheckpointStore(path)
    try:
        keys = sorted(key for key, _ in store.read(strict=False).items(STATE_CATEGORY))
    finally:
        store.close()
    assert len([key for key in keys if key.startswith("q/keyed0/")]) == 10


@pytest.mark.skipif(os.environ.get("REAQTIVE_BIG") != "1", reason="a measurement: run with REAQTIVE_BIG=1 and -s")
def test_measure_the_engine_with_1000000_keys(tmp_path: Path) -> None:
    keys = 1_000_000
    path = tmp_path / "big.db"
    started = time.perf_counter()
    with Engine(path, synchronous="NORMAL") as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").pipe(keyed_count()), observer=DISCARD_SINK)
        for start in range(1, keys + 1, 100_000):
            engine.append_many("raw", [(x, T0) for x in range(start, start + 100_000)])
            engine.process()
        fed = time.perf_counter() - started
        checkpoint = engine.checkpoint()
    store = SqliteCheckpointStore(path)
    try:
        state_bytes = sum(len(blob) for _, blob in store.read().items(STATE_CATEGORY))
    finally:
        store.close()
    size = sum(p.stat().st_size for p in tmp_path.iterdir() if p.name.startswith("big.db"))
    started = time.perf_counter()
    engine = Engine(path, synchronous="NORMAL")
    recovered = time.perf_counter() - started
    try:
        engine.append_many("raw", [(x, T0) for x in (1, keys)])
        engine.process()
        assert engine.checkpoint().dirty_subscriptions == 2, "the first and the last page"
    finally:
        engine.close()
    print(f"\n1,000,000 keys: fed and processed in {fed:.1f} s, checkpoint {checkpoint.bytes_written / 1e6:.1f} MB "
          f"written in {checkpoint.pause_seconds:.2f} s pause; store {size / 1e6:.1f} MB (state {state_bytes / 1e6:.1f}"
          f" MB in {1 + keys // 1024 + 1} units); open + recover {recovered:.2f} s")
    assert recovered < 5


# -- forged state --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [245, 285])
def test_a_forged_field_is_refused_naming_the_operator_or_changes_nothing(stop: int) -> None:
    # The machinery of tests/operators/test_forged_state.py: each value the table saves, replaced in turn by values
    # of other types and out of range, behind a valid checksum. Keys and the fields of records are the user's.
    case = Case("keyed count", lambda xs: xs.pipe(keyed_count(page_size=2)), SCRIPT)
    blobs = save_at(case, stop)
    assert len(blobs) > 2, "the owner and several pages"
    real = run_from(case, stop, blobs)
    assert real.error is None, f"the real state does not recover: {real.error!r}"
    problems = []
    for unit, blob in blobs.items():
        for index, record in enumerate(decode_state(blob)):
            values = record.values()
            for pointer in pointers(values):
                if record.name == KeyedPage.name and pointer[0] in (1, 2) and len(pointer) > 1 + (pointer[0] == 2):
                    continue  # a key, or a field of a record: the user's values
                for forged in wrong_values(value_at(values, pointer)):
                    outcome = run_from(case, stop, {**blobs, unit: forge(blob, index, pointer, forged)})
                    same = outcome.error is None and outcome.messages == real.messages
                    if outcome.rejected_by(record.name) or same:
                        continue
                    if record.name == KeyedPage.name and pointer[0] == 2 and type(forged) is list:
                        continue  # a record forged as another list (of the user's values): out of scope
                    what = f"{outcome.error!r:.200}" if outcome.error is not None else f"{outcome.messages!r:.200}"
                    problems.append(f"{unit or 'query'} {record.name} {list(pointer)} = {forged!r:.40}: {what}")
    assert not problems, "\n".join(problems)
