"""``reaqtive inspect --outputs/--state/--graph``: one artifact's outputs and state decoded, and its query drawn as
a Mermaid flowchart, read from the file without changing it."""

from __future__ import annotations

import hashlib
import json
import operator
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.cli import main
from reaqtive.cli.views import jsonable, mermaid_graph
from reaqtive.engine import Engine
from reaqtive.engine.inspection import ArtifactSummary

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def label(x: int) -> str:
    return f"reading {x}"


def by_parity(x: int) -> int:
    return x % 2


def count_group(group: Query[int]) -> Query[int]:
    return group.count()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Sums, labels, a combination of two streams, and a group_by with inner subscriptions; checkpointed."""
    path = tmp_path / "store.db"
    with Engine(path, start=T0, allow_modules=[__name__]) as engine:
        engine.create_stream("s")
        engine.create_stream("t")
        engine.create_subscription("q://sum", Query.stream("s").scan(0, operator.add))
        engine.create_subscription("q://labels", Query.stream("s").map(label))
        engine.create_subscription("q://both", Query.stream("s").combine_latest(Query.stream("t"), max))
        engine.create_subscription("q://groups", Query.stream("s").group_by(by_parity).flat_map(count_group))
        engine.append_many("s", [(i, T0 + timedelta(seconds=i)) for i in range(10)])
        engine.append_many("t", [(100, T0 + timedelta(seconds=10))])
        engine.process()
        engine.checkpoint()
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- outputs -------------------------------------------------------------------------------------------------------


def test_outputs_are_decoded_as_the_engine_reads_them(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", str(store), "--outputs", "q://labels")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "outputs of q://labels in the durable sink (10)"
    assert [line.split(maxsplit=1) for line in lines[1:]] == [[str(i), repr(f"reading {i}")] for i in range(10)]


def test_outputs_as_json_lines_match_the_engine(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", str(store), "--json", "--outputs", "q://sum")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    with Engine(store, allow_modules=[__name__]) as engine:
        expected = [(output.seq, output.value) for output in engine.outputs("q://sum")]
    assert [(r["seq"], r["value"]) for r in rows] == expected
    assert {r["subscription"] for r in rows} == {"q://sum"}


def test_a_damaged_output_row_is_shown_as_such_and_the_others_still_listed(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(store) as db:
        db.execute("UPDATE reaqtive_egress SET payload = X'00' WHERE subscription = 'q://labels'")
        db.execute("UPDATE reaqtive_egress SET crc = crc + 1 WHERE subscription = 'q://sum'")
    db.close()
    code, out, _ = run(capsys, "inspect", str(store), "--outputs", "q://sum")
    assert code == 0 and "fails its checksum" in out and "<undecodable" in out


def test_inspecting_outputs_state_and_graph_never_writes_the_store(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = digest(store)
    for option in ("--outputs", "--state", "--graph"):
        assert run(capsys, "inspect", str(store), option, "q://groups")[0] == 0
    assert digest(store) == before


# -- state ---------------------------------------------------------------------------------------------------------


def test_state_shows_each_stateful_operator_with_its_decoded_fields(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "inspect", str(store), "--json", "--state", "q://sum")
    assert code == 0
    nodes = json.loads(out)
    scan = next(n for n in nodes if n["name"].startswith("reaqtive:scan"))
    assert scan["key"] == "q://sum" and sum(range(10)) in scan["entries"], scan
    assert [n["path"] for n in nodes] == sorted(n["path"] for n in nodes), "pre-order: outermost first"


def test_state_includes_inner_subscriptions(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", str(store), "--json", "--state", "q://groups")
    assert code == 0
    keys = {node["key"] for node in json.loads(out)}
    assert "q://groups" in keys and any(key.startswith("q://groups/") for key in keys), keys
    code, out, _ = run(capsys, "inspect", str(store), "--state", "q://groups")
    inner = [line for line in out.splitlines() if "(inner)" in line]
    assert inner and all(line.split()[0].startswith("q://groups/") for line in inner)


def test_state_is_what_was_last_saved_not_what_ran_since(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state is saved with the subscription when it is created, then by each checkpoint: what an engine
    processed after the last one is not in the file (a recovery replays it)."""
    path = tmp_path / "fresh.db"
    with Engine(path, start=T0) as engine:
        engine.create_stream("s")
        engine.create_subscription("q://sum", Query.stream("s").scan(0, operator.add))
        engine.append_many("s", [(5, T0 + timedelta(seconds=1))])
        engine.process()
        code, out, _ = run(capsys, "inspect", str(path), "--json", "--state", "q://sum")  # the engine runs on
    assert code == 0
    scan = next(n for n in json.loads(out) if n["name"].startswith("reaqtive:scan"))
    assert 0 in scan["entries"] and 5 not in scan["entries"]


def test_a_damaged_state_blob_is_shown_as_damaged(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with sqlite3.connect(store) as db:
        db.execute("UPDATE reaqtive_blobs SET value = X'00' WHERE category = 'state' AND key = 'q://sum'")
    db.close()
    code, out, _ = run(capsys, "inspect", str(store), "--state", "q://sum")
    assert code == 0 and "DAMAGED" in out


@pytest.mark.parametrize("option", ["--outputs", "--state", "--graph"])
def test_a_stream_has_no_outputs_state_or_query_to_show(
    option: str, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "inspect", str(store), option, "s")
    assert (code, out) == (2, "")
    assert err.startswith(f"reaqtive inspect: {option}: 's' ") and len(err.strip().splitlines()) == 1, err


# -- JSON of decoded values ------------------------------------------------------------------------------------


JSON_NATIVE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=30,
)
STATE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary()
    | st.datetimes(timezones=st.just(UTC)) | st.timedeltas(),
    lambda children: st.lists(children, max_size=4) | st.tuples(children, children)
    | st.frozensets(st.integers(), max_size=4)
    | st.dictionaries(st.integers() | st.text() | st.tuples(st.integers(), st.text()), children, max_size=4),
    max_leaves=30,
)


@given(JSON_NATIVE)
def test_jsonable_keeps_json_values_as_they_are(value: object) -> None:
    assert jsonable(value) == value
    if isinstance(value, dict):
        assert list(jsonable(value)) == list(value), "keys keep their order"


@given(STATE_VALUES)
def test_jsonable_makes_any_state_value_writable_as_json(value: object) -> None:
    json.dumps(jsonable(value), allow_nan=False)


def test_jsonable_converts_what_json_lacks() -> None:
    assert jsonable({(1, "a"): {1, 2}, "t": (T0, timedelta(seconds=90)), "b": b"x", "f": [float("inf")]}) == {
        "(1, 'a')": [1, 2], "t": [T0.isoformat(), 90.0], "b": "b'x'", "f": ["inf"]}


def test_jsonable_handles_values_nested_deeper_than_the_recursion_limit() -> None:
    value: list[object] = []
    for _ in range(5_000):
        value = [value]
    json_text_depth = 0
    converted = jsonable(value)
    while converted:
        (converted,) = converted
        json_text_depth += 1
    assert json_text_depth == 5_000


def test_an_unknown_uri_is_one_line_naming_what_there_is(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", str(store), "--outputs", "q://nope")
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1
    assert "no artifact 'q://nope'" in err and "q://sum" in err


def test_artifact_options_refuse_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "inspect", str(tmp_path), "--graph", "q://x")
    assert code == 2 and "not a directory" in err


# -- graph ---------------------------------------------------------------------------------------------------------


def edges(graph: str) -> set[tuple[str, str]]:
    """The graph's edges by node label."""
    labels = dict(line.strip().split("[", 1) for line in graph.splitlines() if '["' in line)
    named = {ident: text.strip('[]"') for ident, text in labels.items()}
    pairs = (line.strip().split(" --> ") for line in graph.splitlines() if " --> " in line)
    return {(named[a], named[b]) for a, b in pairs}


def test_graph_draws_each_input_into_the_operator_reading_it(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "inspect", str(store), "--graph", "q://both")
    assert code == 0 and out.startswith("flowchart LR\n")
    assert edges(out) == {
        ("stream s", "combine_latest(max)"),
        ("stream t", "combine_latest(max)"),
        ("combine_latest(max)", "subscription q://both"),
        ("subscription q://both", "durable sink"),
    }


def test_graph_draws_a_stream_read_twice_as_one_node() -> None:
    expression = {"op": "merge", "args": [{"stream": "s"}, {"q": {"op": "map", "args": [{"stream": "s"},
                                                                                         {"fn": "@f"}]}}]}
    graph = mermaid_graph(ArtifactSummary("q://m", "subscription", "", expression, "", None, [], 0, 0))
    assert graph.count('["stream s"]') == 1
    assert edges(graph) == {("stream s", "merge()"), ("stream s", "map(@f)"), ("map(@f)", "merge()"),
                            ("merge()", "subscription q://m")}


def test_graph_labels_cannot_break_out_of_their_quotes() -> None:
    expression = {"op": "filter", "args": [{"stream": 'a"] --> evil["x'}, {"fn": "m:f"}]}
    graph = mermaid_graph(ArtifactSummary("q://<x>", "subscription", "", expression, "", None, [], 0, 0))
    for line in graph.splitlines()[1:]:
        if '["' in line:
            assert line.count('"') == 2, line
    assert "#quot;" in graph and "#lt;" in graph


def test_graph_of_a_query_thousands_of_stages_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.db"
    query = Query.stream("s")
    for _ in range(2_000):
        query = query.map(abs)
    with Engine(path, start=T0) as engine:
        engine.create_stream("s")
        engine.define_observable("defs://deep", query)
    code, out, err = run(capsys, "inspect", str(path), "--graph", "defs://deep")
    assert code == 0 and err == ""
    assert out.count('["map(abs)"]') == 2_000 and out.count(" --> ") == 2_001
