"""The engine's artifacts: URIs, definitions, reference tracking, templates, metadata, observers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.engine import (
    ArtifactExistsError,
    ArtifactInUseError,
    ArtifactNotFoundError,
    Engine,
    EngineClosedError,
    Output,
    UnpersistableQueryError,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
received: list[Output] = []


def double(x: int) -> int:
    return x * 2


def collect(output: Output) -> None:
    received.append(output)


def test_duplicate_uris_are_refused_across_kinds(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("a")
        with pytest.raises(ArtifactExistsError, match="'a' already exists"):
            engine.create_stream("a")
        with pytest.raises(ArtifactExistsError):
            engine.create_subscription("a", Query.stream("a"))
        with pytest.raises(ArtifactExistsError, match="built-in"):
            engine.create_stream("reaqtive://sinks/durable")


def test_subscription_uris_that_nest_are_refused_because_inner_states_live_under_uri_slash(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__], start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("app://q", Query.stream("raw").map(double))
        with pytest.raises(ArtifactExistsError, match="'app://q/high' would nest with subscription 'app://q'"):
            engine.create_subscription("app://q/high", Query.stream("raw").map(double))
        engine.create_subscription("app://qx", Query.stream("raw").map(double))  # a longer name, not nested
        engine.create_subscription("app://r/deep/one", Query.stream("raw").map(double))
        with pytest.raises(ArtifactExistsError, match="'app://r' would nest with subscription 'app://r/deep/one'"):
            engine.create_subscription("app://r", Query.stream("raw").map(double))
        engine.define_observable("app://q/doubled", Query.stream("raw").map(double))  # other kinds do not nest
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:  # the recovered subscriptions are known as well
        with pytest.raises(ArtifactExistsError, match="nest with subscription 'app://r/deep/one'"):
            engine.create_subscription("app://r/deep", Query.stream("raw").map(double))
        engine.delete_subscription("app://q")
        engine.create_subscription("app://q/high", Query.stream("raw").map(double))
        assert {info.uri for info in engine.artifacts() if info.kind == "subscription"} == {
            "app://q/high", "app://qx", "app://r/deep/one"}


def test_a_query_that_cannot_be_persisted_is_refused_at_creation(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("a")
        with pytest.raises(UnpersistableQueryError, match="argument 1 of 'map'"):
            engine.create_subscription("q", Query.stream("a").map(lambda x: x))
        assert [info.uri for info in engine.artifacts()] == ["a"], "nothing was stored"


def test_unknown_references_are_refused(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine, \
            pytest.raises(ArtifactNotFoundError, match="'nope'"):
        engine.create_subscription("q", Query.stream("nope").map(double))


def test_undefining_or_deleting_what_a_live_query_uses_is_refused(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.define_observable("doubled", Query.stream("raw").map(double))
        engine.define_observer("collector", collect)
        engine.create_subscription("q", Query.stream("doubled").take(5), observer="collector")
        with pytest.raises(ArtifactInUseError, match="'q'"):
            engine.undefine("doubled")
        with pytest.raises(ArtifactInUseError, match="'doubled'"):
            engine.delete_stream("raw")
        with pytest.raises(ArtifactInUseError):
            engine.undefine("collector")
        engine.delete_subscription("q")
        engine.undefine("collector")
        engine.undefine("doubled")
        engine.delete_stream("raw")
        assert engine.artifacts() == []


def test_observable_definitions_expand_and_observers_receive_outputs_with_ids(tmp_path: Path) -> None:
    received.clear()
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.define_observable("doubled", Query.stream("raw").map(double))
        engine.define_observer("collector", collect)
        engine.create_subscription("q", Query.stream("doubled").skip(1), observer="collector")
        engine.append_many("raw", [(i, T0 + timedelta(seconds=i)) for i in range(4)])
        engine.process()
    assert received == [Output("q", 0, 2), Output("q", 1, 4), Output("q", 2, 6)]


def test_similar_queries_share_a_template_removed_when_unused(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        for sensor in ("1", "2", "3"):
            engine.create_stream(f"iot://{sensor}")
            engine.create_subscription(f"q://{sensor}", Query.stream(f"iot://{sensor}").map(double).take(int(sensor)))
        templates = {key for key, _ in engine._store.checkpoints.read().items("templates")}
        assert len(templates) == 1
        for sensor in ("1", "2"):
            engine.delete_subscription(f"q://{sensor}")
        assert len(list(engine._store.checkpoints.read().items("templates"))) == 1
        engine.delete_subscription("q://3")
        assert list(engine._store.checkpoints.read().items("templates")) == []


def test_metadata_describes_each_artifact(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").map(double))
        engine.append("raw", 1, T0)
        engine.process()
        engine.checkpoint()
        info = engine.info("q")
        assert info.kind == "subscription" and info.running and info.references == ("raw",)
        assert info.expression == {"op": "map", "args": [{"stream": "raw"}, {"fn": f"{double.__module__}:double"}]}
        assert info.state_bytes > 0 and info.created <= datetime.now(UTC)
        assert engine.info("raw").kind == "stream"


def test_creations_are_durable_at_once_without_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    engine = Engine(path, allow_modules=[__name__])
    engine.create_stream("raw")
    engine.create_subscription("q", Query.stream("raw").map(double))
    engine.close()  # no checkpoint
    with Engine(path, allow_modules=[__name__]) as recovered:
        assert {info.uri for info in recovered.artifacts()} == {"raw", "q"}
        recovered.append("raw", 5, T0)
        recovered.process()
        assert [o.value for o in recovered.outputs("q")] == [10]


def test_a_closed_engine_refuses_work(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "s.db", allow_modules=[__name__])
    engine.close()
    engine.close()
    with pytest.raises(EngineClosedError):
        engine.create_stream("x")


def test_created_at_tells_a_recreated_uri_from_the_one_before(tmp_path: Path) -> None:
    with Engine.in_memory(start=T0) as engine:
        assert engine.created_at("q") is None
        engine.create_stream("s")
        engine.create_subscription("q", Query.stream("s").map(abs))
        first = engine.created_at("q")
        assert first is not None and first.tzinfo is not None
        engine.delete_subscription("q")
        assert engine.created_at("q") is None
        engine.create_subscription("q", Query.stream("s").map(abs))
        assert engine.created_at("q") not in (None, first)


def test_a_subscription_to_an_observer_that_does_not_exist_names_it_and_how_to_make_it() -> None:
    with Engine(":memory:") as engine:
        engine.create_stream("s://here")
        with pytest.raises(ArtifactNotFoundError, match=r"'q://1' refers to 'obs://nope', which does not exist "
                                                         r"\(.*engine.define_observer\(uri, function\), or pass a "
                                                         r"sink object as observer=\)"):
            engine.create_subscription("q://1", Query.stream("s://here"), observer="obs://nope")
        assert "q://1" not in engine.artifacts()
