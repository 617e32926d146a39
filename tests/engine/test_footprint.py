"""What an idle subscription keeps, piece by piece: nothing per subscription that a shared object can hold."""

from __future__ import annotations

import operator
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaqtive import OperatorContext, Query
from reaqtive.core.visitors import walk
from reaqtive.engine import DISCARD_SINK, Engine, StreamReader
from reaqtive.state import InnerEnvironment, SqliteCheckpointStore
from tests.support import memory_held_while_open

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_context_keeps_a_read_only_view_it_is_given_and_derived_contexts_share_the_settings() -> None:
    given = types.MappingProxyType({"limit": 5})
    context = OperatorContext("sub://1", settings=given)
    assert context._settings is given
    assert context.derive("sub://1/inner0")._settings is given
    copied = {"limit": 5}
    context = OperatorContext("sub://2", settings=copied)
    copied["limit"] = 6
    assert context.get_setting("limit") == 5, "a plain mapping is copied: the caller may change it later"
    assert context.derive("sub://2/inner0")._settings is context._settings
    with pytest.raises(TypeError):
        context.settings["limit"] = 7  # type: ignore[index]


def test_a_stream_reader_holds_no_bound_methods_of_its_environment(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", start=T0) as engine:
        engine.create_stream("s")
        engine.create_subscription("q", Query.stream("s").scan(0, operator.add), observer=DISCARD_SINK)
        engine.append("s", 1, T0 + timedelta(seconds=1))
        engine.process()
        (reader,) = [node for node in walk(engine._subscriptions["q"].handle) if isinstance(node, StreamReader)]
        held = [getattr(reader, slot, None) for cls in type(reader).__mro__ for slot in getattr(cls, "__slots__", ())]
        assert not [value for value in held if isinstance(value, types.MethodType)]
        assert reader.watermark == 1, "the log position of the event it read"


def test_reading_a_store_gives_one_key_object_per_key_across_categories(tmp_path: Path) -> None:
    store = SqliteCheckpointStore(tmp_path / "s.db")
    try:
        transaction = store.begin()
        for category in ("artifacts", "state", "outputs"):
            transaction.put(category, "sub://one", b"x")
        transaction.commit()
        snapshot = store.read()
        keys = [next(iter(dict(snapshot.items(category)))) for category in ("artifacts", "state", "outputs")]
        assert keys[0] is keys[1] is keys[2]
    finally:
        store.close()


def test_an_environment_holds_one_dirty_registry() -> None:
    environment = InnerEnvironment()
    assert environment.dirty is environment.dirty
    assert repr(environment.dirty) == "<DirtyRegistry 0 noted, 0 watched>"


def test_an_idle_subscription_holds_a_few_kilobytes_whatever_its_observer(tmp_path: Path) -> None:
    """A footprint bound, not a speed figure (bench/engine.py measures it): a per-subscription buffer (a msgpack
    packer holds 256 KB) would multiply it by a hundred."""
    from reaqtive.engine import DURABLE_SINK, FunctionRegistry

    path = tmp_path / "store.db"
    count = 200
    kept: list[object] = []
    functions = FunctionRegistry()
    functions.register("keep", kept.append)
    functions.register("neg", operator.neg)
    with Engine(path, functions=functions) as engine:
        engine.create_stream("s")
        engine.define_observer("obs://keep", kept.append)
        for i in range(count):
            observer = DURABLE_SINK if i % 2 else "obs://keep"
            engine.create_subscription(f"q{i}", Query.stream("s").map(operator.neg), observer=observer)
    held = memory_held_while_open(lambda: Engine(path, functions=functions))
    assert held / count < 16_384, f"{held / count:,.0f} bytes per idle subscription"


def test_recovered_subscriptions_of_one_query_share_their_constants_and_references(tmp_path: Path) -> None:
    """10,000 subscriptions of one query over a few streams hold a few lists after a recovery, not 20,000."""
    from reaqtive import Query
    from reaqtive.engine import DISCARD_SINK, Engine

    with Engine(tmp_path / "s.db") as engine:
        engine.create_stream("s://a")
        engine.create_stream("s://b")
        for i, stream in enumerate(["s://a", "s://a", "s://b"]):
            engine.create_subscription(f"q://{i}", Query.stream(stream).take(3), observer=DISCARD_SINK)
    with Engine(tmp_path / "s.db") as engine:
        first, second, other = (engine._records[f"q://{i}"] for i in range(3))
        assert first["constants"] is second["constants"] and first["refs"] is second["refs"]
        assert other["constants"] is not first["constants"] and other["refs"] == ["s://b"]
        assert engine.info("q://1").running
