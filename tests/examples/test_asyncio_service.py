"""examples/asyncio_service.py, the service of docs/deploying.md: events in over HTTP (bodies validated: 422 for a
bad one, and the stream typed), outputs streamed with cursors and acknowledgements, a restart that resumes, and
SIGTERM under uvicorn ending in a final checkpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from examples import asyncio_service
from reaqtive import Query
from reaqtive.engine import Engine, SchemaValidationError

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def client_on(store: Path) -> TestClient:
    return TestClient(asyncio_service.create_app(str(store), start=T0, synchronous="NORMAL"))


def read_outputs(client: TestClient, uri: str, *, after: int | None, limit: int) -> list[dict[str, Any]]:
    query = f"limit={limit}" + ("" if after is None else f"&after={after}")
    with client.stream("GET", f"/outputs/{uri}?{query}") as response:
        assert response.status_code == 200
        return [json.loads(line) for line in response.iter_lines() if line]


def reading(sensor: str, celsius: float) -> dict[str, Any]:
    return {"sensor": sensor, "celsius": celsius}


def test_events_in_outputs_out_with_cursor_and_acknowledgement(tmp_path: Path) -> None:
    with client_on(tmp_path / "svc.db") as client:
        response = client.post("/events/readings", json=[reading("k1", 21.0), reading("k2", 35.5),
                                                          reading("k1", 31.0)])
        assert response.json() == {"seqs": [0, 1, 2]}
        hot = read_outputs(client, "hot", after=None, limit=2)
        assert [(o["seq"], o["value"]["sensor"]) for o in hot] == [(0, "k2"), (1, "k1")]
        counts = read_outputs(client, "readings-seen", after=-1, limit=3)
        assert [o["value"] for o in counts] == [1, 2, 3]
        assert client.post("/acks/hot", json={"seq": 0}).json() == {"acked": 0}
        client.post("/events/readings", json=reading("k3", 40.0))
        assert [o["seq"] for o in read_outputs(client, "hot", after=None, limit=2)] == [1, 2]  # after the ack


def test_a_restart_resumes_the_cursor_and_the_numbering(tmp_path: Path) -> None:
    store = tmp_path / "svc.db"
    with client_on(store) as client:
        client.post("/events/readings", json=[reading("a", 33.0), reading("b", 34.0)])
        seen = read_outputs(client, "hot", after=-1, limit=2)
    with client_on(store) as client:  # the first stopped with a final checkpoint; this one recovers
        client.post("/events/readings", json=reading("c", 39.0))
        resumed = read_outputs(client, "hot", after=seen[-1]["seq"], limit=1)
    assert [o["seq"] for o in seen + resumed] == [0, 1, 2]
    assert resumed[0]["value"]["sensor"] == "c"


def test_bad_requests_get_clear_statuses(tmp_path: Path) -> None:
    with client_on(tmp_path / "svc.db") as client:
        assert client.post("/events/nowhere", json=reading("a", 1.0)).status_code == 404
        assert client.get("/outputs/nothing?limit=1").status_code == 404
        assert client.get("/outputs/readings?limit=1").status_code == 404  # a stream has no outputs
        assert client.post("/acks/hot", json={"seq": 99}).status_code == 422  # beyond the last output
        assert client.post("/acks/hot", json={"seq": "x"}).status_code == 422
        health = client.get("/health").json()
        assert health["healthy"] is True and health["lag"] == {"readings": 0}
        assert "reaqtive_" in client.get("/metrics").text


def test_a_bad_body_gets_422_with_fastapis_detail_and_appends_nothing(tmp_path: Path) -> None:
    with client_on(tmp_path / "svc.db") as client:
        missing = client.post("/events/readings", json=[reading("k1", 21.0), {"sensor": "k2"}])
        assert missing.status_code == 422
        assert [(d["type"], d["loc"]) for d in missing.json()["detail"]] == [("missing", ["body", 1, "celsius"])]
        wrong = client.post("/events/readings", json={"sensor": "k3", "celsius": "hot"})  # one reading, not a list
        assert wrong.status_code == 422
        assert [(d["type"], d["loc"]) for d in wrong.json()["detail"]] == [("float_parsing", ["body", 0, "celsius"])]
        assert client.post("/events/readings", json=[{"sensor": 5, "celsius": 1.0}]).status_code == 422
        assert client.post("/events/readings", json="text").status_code == 422
        assert client.post("/events/readings", json=[{"sensor": "k4", "celsius": "31.5"}]).json() == {"seqs": [0]}
        assert [o["value"] for o in read_outputs(client, "hot", after=-1, limit=1)] == [
            {"sensor": "k4", "celsius": 31.5}]  # the validated form: the text became a number
        assert client.get("/health").json()["lag"] == {"readings": 0}


def test_a_bad_acknowledgement_body_gets_422_from_its_model(tmp_path: Path) -> None:
    with client_on(tmp_path / "svc.db") as client:
        client.post("/events/readings", json=[reading("k1", 35.0)])
        missing = client.post("/acks/hot", json={})
        assert missing.status_code == 422
        assert [(d["type"], d["loc"]) for d in missing.json()["detail"]] == [("missing", ["body", "seq"])]
        wrong = client.post("/acks/hot", json={"seq": "first"})
        assert [(d["type"], d["loc"]) for d in wrong.json()["detail"]] == [("int_parsing", ["body", "seq"])]
        garbled = client.post("/acks/hot", content=b"{seq", headers={"Content-Type": "application/json"})
        assert garbled.status_code == 422 and garbled.json()["detail"][0]["type"] == "json_invalid"
        assert client.post("/acks/hot", json={"seq": 0}).json() == {"acked": 0}, "a good body still works"


def test_metrics_come_from_one_collector_registered_at_startup(tmp_path: Path) -> None:
    store = tmp_path / "svc.db"
    app = asyncio_service.create_app(str(store), start=T0, synchronous="NORMAL")
    label = f'store="{store}"'
    with TestClient(app) as client:
        client.post("/events/readings", json=[reading("k1", 35.0), reading("k2", 20.0)])
        assert [o["seq"] for o in read_outputs(client, "hot", after=-1, limit=1)] == [0]
        client.post("/acks/hot", json={"seq": 0})
        first = client.get("/metrics/")
        assert first.status_code == 200 and first.headers["content-type"].startswith("text/plain")
        assert f'reaqtive_engine_status{{status="running",{label}}} 1.0' in first.text
        assert f'reaqtive_stream_appended_events_total{{{label},stream="readings"}} 2.0' in first.text
        assert f'reaqtive_subscription_acknowledged_outputs_total{{{label},subscription="hot"}} 1.0' in first.text
        again = client.get("/metrics")  # redirected to the mounted app
        assert again.status_code == 200 and again.text.count("# TYPE reaqtive_engine_status gauge") == 1
    with TestClient(app) as client:  # the same application started again: its collector was unregistered at
        # shutdown and is registered again (no duplicate metric names), watching the new engine
        assert f'reaqtive_stream_appended_events_total{{{label},stream="readings"}} 2.0' in client.get(
            "/metrics/").text


def test_the_stream_is_typed_so_appends_from_elsewhere_are_checked_too(tmp_path: Path) -> None:
    store = tmp_path / "svc.db"
    with Engine(store, schemas=asyncio_service.SCHEMAS) as engine:  # another stream, typed, made by another program
        engine.create_stream("more-readings", schema="reading")
    with client_on(store) as client:  # its bodies reach the engine unchecked by FastAPI: the engine refuses them
        refused = client.post("/events/more-readings", json=[reading("a", 1.0), {"sensor": "b", "celsius": "x"}])
        assert refused.status_code == 422
        ((detail,),) = [refused.json()["detail"]]
        assert (detail["type"], detail["loc"]) == ("schema", ["body", 1, "celsius"])
        assert client.post("/events/more-readings", json=[reading("a", 1.0)]).json() == {"seqs": [0]}
    with Engine(store, functions=asyncio_service.make_functions(), schemas=asyncio_service.SCHEMAS) as engine:
        assert engine.streams()["readings"].schema == "reading"
        with pytest.raises(SchemaValidationError, match=r"stream 'readings' .* event #0 .* field 'celsius'"):
            engine.append("readings", {"sensor": "k1", "celsius": None}, T0)
        assert engine.streams()["readings"].appended == 0 and engine.streams()["more-readings"].appended == 1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    store, port = tmp_path / "served.db", free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "examples.asyncio_service:app", "--port", str(port), "--log-level",
         "warning"],
        cwd=ROOT, env={**os.environ, "REAQTIVE_STORE": str(store), "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # a real server: wait for its port, with a deadline
        try:
            urllib.request.urlopen(f"{url}/health", timeout=5).read()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"uvicorn did not start: {process.stderr.read().decode()[-2000:]}") from None
            time.sleep(0.05)
    yield process, url, store
    if process.poll() is None:
        process.kill()
        process.wait()


def test_sigterm_under_uvicorn_ends_with_a_final_checkpoint(served: tuple[subprocess.Popen[bytes], str, Path]) -> None:
    process, url, store = served
    body = json.dumps([reading("k", 30.5 + i) for i in range(50)]).encode()
    request = urllib.request.Request(f"{url}/events/readings", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    assert json.loads(urllib.request.urlopen(request, timeout=30).read())["seqs"] == list(range(50))
    with urllib.request.urlopen(f"{url}/outputs/hot?after=-1&limit=50", timeout=30) as response:
        lines = [json.loads(line) for line in response.read().splitlines() if line]
    assert [o["seq"] for o in lines] == list(range(50))
    process.send_signal(signal.SIGTERM)
    # uvicorn shuts the application down (its lifespan's aclose), then re-raises the signal it caught
    assert process.wait(60) in (0, -signal.SIGTERM)
    with Engine(store, functions=asyncio_service.make_functions(), schemas=asyncio_service.SCHEMAS) as engine:
        status = engine.streams()["readings"]
        assert (status.appended, status.retained) == (50, 0)  # the final checkpoint covered every event
        assert len(engine.outputs("hot")) == 50


def per_mille(reading: dict[str, Any]) -> float:
    """A query function with a bug: a reading of exactly 0 degrees divides by zero."""
    return 1000 / float(reading["celsius"])


def test_a_failed_query_shows_in_health_ends_its_output_stream_and_restarts_after_a_fix(tmp_path: Path) -> None:
    """Issue 30: a query a reading makes fail is FAILED, never silent: /health answers 503 and names it, its output
    stream ends instead of waiting forever; after a fix (here: restarting it with the element skipped) it runs."""
    store = tmp_path / "svc.db"
    functions = asyncio_service.make_functions()
    functions.register("per_mille", per_mille)
    with Engine(store, functions=functions, schemas=asyncio_service.SCHEMAS, start=T0) as engine:
        engine.create_stream("readings", schema="reading")
        engine.create_subscription("per-mille", Query.stream("readings").map(per_mille))
    app = asyncio_service.create_app(str(store), start=T0, synchronous="NORMAL", functions=functions)
    with TestClient(app) as client:
        client.post("/events/readings", json=[reading("k1", 20.0), reading("k2", 0.0), reading("k3", 40.0)])
        (first, ended) = read_outputs(client, "per-mille", after=-1, limit=5)
        assert first["value"] == 50.0
        assert "ZeroDivisionError" in ended["error"], "the stream ends, saying why, instead of waiting forever"
        health = client.get("/health")
        assert health.status_code == 503
        (stopped,) = health.json()["stopped"]
        assert stopped["subscription"] == "per-mille" and stopped["state"] == "failed"
        assert stopped["error"].startswith("ZeroDivisionError") and stopped["position"] == 2
        assert client.post("/subscriptions/hot/restart").status_code == 409, "it runs"
        assert client.post("/subscriptions/per-mille/restart?skip_failed=true").json() == {"restarted": "per-mille"}
        assert [o["value"] for o in read_outputs(client, "per-mille", after=-1, limit=2)] == [50.0, 25.0]
        assert client.get("/health").status_code == 200
        letters = client.get("/dead-letters").json()
        assert [(d["kind"], d["subscription"], d["pos"]) for d in letters] == [("element", "per-mille", 2)]
