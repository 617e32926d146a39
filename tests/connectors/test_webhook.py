"""The webhook sink against a local HTTP server with scripted faults: 500s, 429 with Retry-After, responses
slower than the timeout, dropped connections (before and after the receiver handled the request), 4xx, and an
engine restart: the receiver, deduplicating by the idempotency key, sees every output once and in order."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive.connectors import (
    IDEMPOTENCY_HEADER,
    UnencodableOutputError,
    WebhookRejectedError,
    WebhookSink,
    WebhookUnavailableError,
)
from reaqtive.engine import Engine, ObserverFailedError, Output
from tests.connectors.support import STREAM, expected, open_engine, value_of, when

Script = Callable[[int, str, int], str]
"""``(request number, idempotency key, attempt for this key) -> action``: ``ok``, ``500``, ``429:<Retry-After>``,
``400``, ``404``, ``301``, ``408``, ``slow`` (answer after the client gave up), ``drop`` (close without an answer)
or ``drop-after`` (handle it, then close without an answer)."""


class Receiver:
    """A webhook endpoint on a free local port, served by threads; it handles each idempotency key once."""

    def __init__(self, script: Script = lambda n, key, attempt: "ok") -> None:
        self.script = script
        self.accepted: dict[str, list[tuple[int, Any]]] = {}
        self.duplicates = 0
        self.out_of_order: list[str] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.batches: list[int] = []  # the size of each batch request accepted
        self._attempts: Counter[str] = Counter()
        self._done: set[str] = set()
        self._lock = threading.Lock()
        self._release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the sink reuses its connection

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes: without this, Nagle's algorithm and the client's
                # delayed ACK hold each answer with a body back for 40 ms.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                key = self.headers[IDEMPOTENCY_HEADER]
                with receiver._lock:
                    number = len(receiver.requests)
                    receiver.requests.append((key, dict(self.headers.items())))
                    receiver._attempts[key] += 1
                    action = receiver.script(number, key, receiver._attempts[key])
                if action == "drop":
                    self.close_connection = True
                    return
                if action == "slow":
                    receiver._release.wait(10)
                    action = "ok"
                if action in ("ok", "drop-after"):
                    receiver.handle(key, json.loads(body), self.headers)
                    if action == "drop-after":
                        self.close_connection = True
                        return
                    self.answer(200)
                elif action.startswith("429:"):
                    self.answer(429, headers={"Retry-After": action[4:]})
                else:
                    self.answer(int(action), b"the value was refused: bad field 'x'",
                                headers={"Location": "/elsewhere"} if action == "301" else {})

            def answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up waiting (a slow answer): nobody to answer
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self._thread.start()

    def handle(self, key: str, body: Any, headers: Any) -> None:
        if isinstance(body, list):  # a batch (batch=True): one subscription's outputs, first..last
            subscription, first, last = body[0]["subscription"], body[0]["seq"], body[-1]["seq"]
            assert key == f"{subscription}:{first}-{last}" == (
                f"{headers['Reaqtive-Subscription']}:{headers['Reaqtive-First-Seq']}-{headers['Reaqtive-Seq']}")
            assert [item["seq"] for item in body] == list(range(first, last + 1))
            assert {item["subscription"] for item in body} == {subscription}
            self.batches.append(len(body))
            for item in body:
                self.take(item)
            return
        subscription, seq = body["subscription"], body["seq"]
        assert key == f"{subscription}:{seq}" == f"{headers['Reaqtive-Subscription']}:{headers['Reaqtive-Seq']}"
        self.take(body)

    def take(self, body: dict[str, Any]) -> None:
        """One output, handled once per (subscription, seq)."""
        subscription, seq = body["subscription"], body["seq"]
        key = f"{subscription}:{seq}"
        with self._lock:
            if key in self._done:
                self.duplicates += 1
                return
            self._done.add(key)
            received = self.accepted.setdefault(subscription, [])
            if seq != (received[-1][0] + 1 if received else 0):
                self.out_of_order.append(key)
            received.append((seq, body["value"]))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook?from=test"

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()


class FakeClock:
    """The sink's clock and sleep: sleeping moves the clock, nothing really waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def receiver() -> Any:
    made: list[Receiver] = []

    def make(script: Script = lambda n, key, attempt: "ok") -> Receiver:
        made.append(Receiver(script))
        return made[-1]

    yield make
    for server in made:
        server.close()


def sink_for(receiver: Receiver, clock: FakeClock, **options: Any) -> WebhookSink:
    options = {"timeout": 0.25, "retries": 3, "sleep": clock.sleep, "clock": clock.time, "jitter": lambda: 1.0,
               **options}
    return WebhookSink(receiver.url, **options)


def drain(engine: Engine, server: Receiver, rounds: int = 200) -> None:
    """Process until the receiver has every output the oracle has (each process() hands the outbox another
    try after a failure)."""
    for _ in range(rounds):
        engine.process()
        want = expected(engine)
        with server._lock:
            if all(server.accepted.get(uri, [])[-1:] == outputs[-1:] for uri, outputs in want.items()):
                return
    raise AssertionError(f"outputs still waiting after {rounds} rounds")


# -- through the engine -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [False, True], ids=["per-output", "batches"])
def test_every_output_reaches_the_receiver_once_in_order_through_faults_and_restarts(
        tmp_path: Path, receiver: Any, batch: bool) -> None:
    rng = random.Random(5)
    slow = [3]  # responses slower than the timeout cost real time: a few

    def faults(number: int, key: str, attempt: int) -> str:
        action = rng.choices(["ok", "500", "503", "429:0", "429:2", "drop", "drop-after", "408", "slow"],
                             [50, 8, 4, 5, 3, 8, 8, 3, 2])[0]
        if action == "slow":
            if not slow[0]:
                return "ok"
            slow[0] -= 1
        return action

    server = receiver(faults)
    clock = FakeClock()
    store = tmp_path / "store.db"
    for run in range(3):  # each run: events, a checkpoint midway, more events, then a crash (no checkpoint)
        engine = open_engine(store, "hook", sink_for(server, clock, batch=batch, batch_size=7))
        drain(engine, server)  # after a restart: the outbox's stored outputs and the replay's
        start = run * 40
        engine.append_many(STREAM, [(value_of(i), when(i)) for i in range(start, start + 20)])
        drain(engine, server)
        engine.checkpoint()
        engine.append_many(STREAM, [(value_of(i), when(i)) for i in range(start + 20, start + 40)])
        drain(engine, server)
        engine.close()
    with open_engine(store, "hook", sink_for(server, clock, batch=batch, batch_size=7)) as engine:
        drain(engine, server)
        assert not engine.faults
        want = expected(engine)
    assert server.accepted == want
    assert server.out_of_order == []
    assert server.duplicates > 0  # replays and lost answers did repeat keys: the receiver dropped them
    assert max(clock.slept) >= 2  # a Retry-After was honoured
    assert (max(server.batches, default=0) > 1) == batch  # batches were posted as arrays, up to batch_size outputs each
    assert not batch or max(server.batches) <= 7


def test_a_rejected_output_stops_its_subscription_with_outputs_kept_until_a_reopen_delivers_them(
        tmp_path: Path, receiver: Any) -> None:
    refusing = [True]
    server = receiver(lambda n, key, attempt: "400" if key == "q://double:3" and refusing[0] else "ok")
    store = tmp_path / "store.db"
    clock = FakeClock()
    engine = open_engine(store, "hook", sink_for(server, clock), observer_retries=3)
    engine.append_many(STREAM, [(value_of(i), when(i)) for i in range(10)])
    for _ in range(3):
        engine.process()
    [fault] = engine.faults
    assert isinstance(fault.error, ObserverFailedError) and fault.uri == "q://double"
    assert isinstance(fault.error.__cause__, WebhookRejectedError)
    assert "rejected with 400 Bad Request: the value was refused" in str(fault.error)
    assert [seq for seq, _ in server.accepted["q://double"]] == [0, 1, 2]
    assert [seq for seq, _ in server.accepted["q://running-sum"]] == list(range(10))  # the others went on
    engine.checkpoint()
    engine.close()
    refusing[0] = False  # the receiver was fixed
    with open_engine(store, "hook", sink_for(server, clock)) as engine:
        drain(engine, server)
        assert server.accepted == expected(engine)
    assert server.out_of_order == []


# -- the sink alone -----------------------------------------------------------------------------------------------


def test_the_request_carries_the_output_the_key_and_the_headers(receiver: Any) -> None:
    server = receiver()
    sink = WebhookSink(server.url, headers={"Authorization": "Bearer t"})
    sink(Output("q://a:b", 7, {"x": [1, "é"]}))
    [(key, headers)] = server.requests
    assert key == "q://a:b:7"  # split at the last colon
    assert headers["Authorization"] == "Bearer t" and headers["Content-Type"] == "application/json"
    assert server.accepted == {"q://a:b": [(7, {"x": [1, "é"]})]}
    sink.close()


def test_an_output_already_accepted_in_this_process_is_not_sent_again(receiver: Any) -> None:
    server = receiver()
    sink = WebhookSink(server.url)
    for _ in range(3):
        sink(Output("q://a", 0, 1))
    assert len(server.requests) == 1


def test_retry_after_in_seconds_is_honoured(receiver: Any) -> None:
    server = receiver(lambda n, key, attempt: "429:3" if attempt == 1 else "ok")
    clock = FakeClock()
    sink_for(server, clock)(Output("q://a", 0, 1))
    assert clock.slept == [3.0]
    assert len(server.requests) == 2


def test_retry_after_as_an_http_date_is_honoured(receiver: Any) -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=5), usegmt=True)
    server = receiver(lambda n, key, attempt: f"429:{later}" if attempt == 1 else "ok")
    clock = FakeClock()
    sink_for(server, clock)(Output("q://a", 0, 1))
    [slept] = clock.slept
    assert 3 <= slept <= 5


def test_a_retry_after_beyond_the_deadline_gives_up_at_once(receiver: Any) -> None:
    server = receiver(lambda n, key, attempt: "429:100")
    clock = FakeClock()
    with pytest.raises(WebhookUnavailableError, match=r"after 1 attempt\(s\); last: 429 Too Many Requests "
                                                      r"\(Retry-After 100 s\)"):
        sink_for(server, clock, deadline=10)(Output("q://a", 0, 1))
    assert clock.slept == []


@pytest.mark.parametrize("status", ["400", "404", "422", "301"])
def test_a_client_error_or_redirect_is_permanent_and_not_retried(receiver: Any, status: str) -> None:
    server = receiver(lambda n, key, attempt: status)
    clock = FakeClock()
    with pytest.raises(WebhookRejectedError, match=f"q://a#4 rejected with {status} ") as caught:
        sink_for(server, clock)(Output("q://a", 4, 1))
    assert caught.value.status == int(status) and "bad field" in caught.value.body
    assert len(server.requests) == 1 and clock.slept == []


@pytest.mark.parametrize("status", ["500", "502", "503", "408", "429:0"])
def test_server_errors_back_off_exponentially_then_give_up(receiver: Any, status: str) -> None:
    server = receiver(lambda n, key, attempt: status)
    clock = FakeClock()
    with pytest.raises(WebhookUnavailableError, match=r"not accepted after 4 attempt\(s\); last: ") as caught:
        sink_for(server, clock, backoff=0.1)(Output("q://a", 0, 1))
    assert caught.value.attempts == 4 and len(server.requests) == 4
    assert clock.slept == pytest.approx([0.1, 0.2, 0.4])  # jitter 1.0: the whole doubling step


def test_jitter_spreads_the_backoff_between_half_and_the_whole_step(receiver: Any) -> None:
    server = receiver(lambda n, key, attempt: "500" if attempt < 4 else "ok")
    clock = FakeClock()
    sink_for(server, clock, jitter=lambda: 0.0, backoff=0.1)(Output("q://a", 0, 1))
    assert clock.slept == pytest.approx([0.05, 0.1, 0.2])


def test_dropped_connections_and_slow_answers_are_retried(receiver: Any) -> None:
    actions = iter(["drop", "slow", "drop-after", "ok"])
    server = receiver(lambda n, key, attempt: next(actions))
    clock = FakeClock()
    sink_for(server, clock, timeout=0.2)(Output("q://a", 0, 1))
    assert len(server.requests) == 4
    assert server.accepted == {"q://a": [(0, 1)]} and server.duplicates == 1  # handled before the drop


def test_a_refused_connection_is_retried_then_unavailable() -> None:
    with socket.socket() as probe:  # a free port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    clock = FakeClock()
    sink = WebhookSink(f"http://127.0.0.1:{port}/", retries=2, sleep=clock.sleep, clock=clock.time)
    with pytest.raises(WebhookUnavailableError, match="after 3 attempt") as caught:
        sink(Output("q://a", 0, 1))
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)


@pytest.mark.parametrize("value", [{1}, float("nan"), datetime(2026, 1, 1, tzinfo=UTC)])
def test_a_value_that_is_not_json_is_not_sent(receiver: Any, value: Any) -> None:
    server = receiver()
    with pytest.raises(UnencodableOutputError, match="q://a#0"):
        WebhookSink(server.url)(Output("q://a", 0, value))
    assert server.requests == []


@pytest.mark.parametrize(("url", "options", "message"), [
    ("ftp://x/", {}, "not an http"),
    ("http:///nohost", {}, "not an http"),
    ("http://x/", {"timeout": 0}, "must be > 0"),
    ("http://x/", {"retries": -1}, "retries must be"),
    ("http://x/", {"backoff": float("nan")}, "backoff must be"),
    ("http://x/", {"headers": {"idempotency-key": "mine"}}, "set by the sink"),
])
def test_bad_settings_are_refused(url: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WebhookSink(url, **options)


Outcome = st.one_of(st.sampled_from([200, 204, 400, 404, 408, 429, 500, 503]), st.just("error"),
                    st.tuples(st.just(429), st.floats(0, 20)))


@settings(max_examples=200, deadline=None)
@given(outcomes=st.lists(Outcome, min_size=1, max_size=12), retries=st.integers(0, 6),
       deadline=st.floats(0.5, 15), backoff=st.floats(0, 3), jitter=st.floats(0, 0.999))
def test_a_call_ends_within_its_deadline_and_retries_whatever_the_receiver_does(
        outcomes: list[Any], retries: int, deadline: float, backoff: float, jitter: float) -> None:
    clock = FakeClock()
    sink = WebhookSink("http://unused.invalid/", retries=retries, deadline=deadline, backoff=backoff,
                       sleep=clock.sleep, clock=clock.time, jitter=lambda: jitter)
    answers = iter(outcomes)

    def post(body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, str, float | None, str]:
        sink.attempts += 1
        answer = next(answers, 503)
        if answer == "error":
            raise ConnectionResetError("reset")
        if isinstance(answer, tuple):
            return answer[0], "Too Many Requests", answer[1], ""
        return answer, "status", None, ""

    sink._post = post  # type: ignore[method-assign]
    try:
        sink(Output("q://a", 0, 1))
        succeeded = True
    except WebhookRejectedError:
        succeeded = False
    except WebhookUnavailableError as error:
        assert error.attempts == sink.attempts
        succeeded = False
    assert sink.attempts <= retries + 1
    assert clock.now < deadline
    first_final = next((i for i, a in enumerate([*outcomes, *[503] * 20])
                        if isinstance(a, int) and (200 <= a < 300 or a in (400, 404))), None)
    if succeeded:
        assert first_final is not None and 200 <= [*outcomes, 503][first_final] < 300
        assert sink.attempts == first_final + 1


def test_a_receiver_that_never_answers_holds_a_call_no_longer_than_its_deadline(receiver: Any) -> None:
    server = receiver(lambda n, key, attempt: "slow")
    sink = WebhookSink(server.url, timeout=0.1, deadline=0.3, retries=100, backoff=0.01)  # the real clock
    started = time.monotonic()
    with pytest.raises(WebhookUnavailableError, match="TimeoutError"):
        sink(Output("q://a", 0, 1))
    assert time.monotonic() - started < 0.3 + 0.2  # the deadline, plus at most the last attempt's socket bound
    assert 2 <= len(server.requests) <= 4
