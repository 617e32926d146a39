"""A sink that POSTs each output to an HTTP endpoint as JSON, with an idempotency key, retries and backoff.

Each output becomes one request::

    POST /hook HTTP/1.1
    Content-Type: application/json
    Idempotency-Key: alerts:41
    Reaqtive-Subscription: alerts
    Reaqtive-Seq: 41

    {"subscription":"alerts","seq":41,"value":{"level":3}}

The key is ``<subscription>:<seq>`` (split it at the *last* colon: subscription URIs may hold colons). The
engine delivers each output at least once, so the receiver sees a key again after a restart or after a response
was lost; it must treat a key it has already handled as done (answer 2xx, do nothing). Per subscription the
keys arrive in ``seq`` order, so a receiver can keep only the last ``seq`` per subscription.

The sink carries the name the store keeps for it (``name=``, by default the URL's host and path). Pass it to the
engine in every process, before the store opens (recovery resolves the name), and attach it in one step::

    hook = WebhookSink("https://alerts.example.com/hook", name="alerts-hook",
                       headers={"Authorization": "Bearer ..."})
    engine = Engine("app.db", sinks=[hook])
    engine.create_subscription("hot", query, observer=hook)   # defines obs://alerts-hook the first time

**Batches.** The engine's outbox hands the sink its outputs in batches (``write_batch``). By default each output is
still one request. With ``batch=True`` a batch is one request (up to ``batch_size`` outputs of one
subscription): a JSON array of the objects above, with ``Idempotency-Key: <subscription>:<first>-<last>``,
``Reaqtive-First-Seq: <first>`` and ``Reaqtive-Seq: <last>``. A batch is all or nothing for the sink: after a
failure or a restart it may come again cut differently, so a receiver deduplicates by ``(subscription, seq)``
inside it (or keeps the last ``seq`` per subscription and skips what is at or below it).

**Retries.** A connection error, a timeout, a 5xx, 408 or 429 is retried inside the call, after an exponential
backoff with jitter (``backoff``, then doubling up to ``max_backoff``; a ``Retry-After`` header, in seconds or as
an HTTP date, is honoured), at most ``retries`` times, never waiting past ``deadline`` seconds in all. The
outbox calls the sink outside the engine's lock (on a courier thread in running mode), so a slow receiver holds
up neither appends nor processing; still, while one call runs no other output of that subscription is sent.
When the budget is spent the call raises :class:`WebhookUnavailableError` and the outbox takes over: it keeps
the batch first in line and tries again after its own backoff (``Engine(observer_retries=, observer_backoff=)``),
then stops the subscription with its outputs kept. For outages longer than a few seconds, raise the engine's
``observer_retries``/``observer_backoff``, not the sink's deadline. Any other 4xx or a redirect is permanent:
:class:`WebhookRejectedError` at once, with the status and the start of the response. A value JSON cannot
represent raises :class:`~reaqtive.connectors.errors.UnencodableOutputError` before anything is sent.

``timeout`` bounds each socket operation (connect, send, each read), and is cut to what is left of the deadline
when an attempt begins: a call takes about ``deadline`` at most (a receiver that trickles its answer byte by byte
can stretch the last attempt by a few such bounds, never without end).
"""

from __future__ import annotations

import email.utils
import http.client
import random
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

from reaqtive.connectors._json import JsonDefault, OutputJson
from reaqtive.connectors.errors import WebhookRejectedError, WebhookUnavailableError
from reaqtive.engine.egress import Output
from reaqtive.engine.named_sinks import check_sink_name

__all__ = ["IDEMPOTENCY_HEADER", "WebhookSink"]

IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
_RETRIED_STATUSES: Final = frozenset({408, 429})
_BODY_EXCERPT: Final = 200
_READ_LIMIT: Final = 1 << 16  # a longer response body is not read: the connection is closed instead


class WebhookSink:
    """POSTs each output to ``url`` (see the module). ``headers``: added to every request (they may not replace
    the idempotency headers). ``timeout``: seconds per socket operation. ``retries``: further attempts after the
    first. ``backoff``/``max_backoff``: seconds before the first retry / at most between two. ``deadline``: seconds
    a call may take in all. ``json_default``: converts values JSON cannot represent. ``ssl_context``: for
    ``https`` URLs. ``batch``: POST the outbox's batches as JSON arrays of up to ``batch_size`` outputs (the
    receiver must accept them; see the module). ``name``: the name the engine's store keeps for the sink (its
    observer is ``obs://<name>``; default: the URL's host and path, ``alerts.example.com/hook``): pass one that
    stays when the URL changes between deployments. ``sleep``, ``clock`` and ``jitter`` (a number in [0, 1)) are
    injectable for tests."""

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        retries: int = 4,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        deadline: float = 10.0,
        json_default: JsonDefault | None = None,
        ssl_context: ssl.SSLContext | None = None,
        batch: bool = False,
        batch_size: int = 10_000,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"WebhookSink: {url!r} is not an http:// or https:// URL")
        for setting, value in (("timeout", timeout), ("backoff", backoff), ("max_backoff", max_backoff),
                               ("deadline", deadline)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                raise ValueError(f"WebhookSink: {setting} must be a number of seconds >= 0, got {value!r}")
        if timeout == 0 or deadline == 0:
            raise ValueError("WebhookSink: timeout and deadline must be > 0")
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"WebhookSink: batch_size must be a whole number >= 1, got {batch_size!r}")
        if type(retries) is not int or retries < 0:
            raise ValueError(f"WebhookSink: retries must be a whole number >= 0, got {retries!r}")
        extra = dict(headers or {})
        reserved = {IDEMPOTENCY_HEADER.lower(), "reaqtive-subscription", "reaqtive-seq", "reaqtive-first-seq",
                    "content-length"}
        clashing = sorted(header for header in extra if header.lower() in reserved)
        if clashing:
            raise ValueError(f"WebhookSink: headers {clashing} are set by the sink")
        self.url = url
        self.name = check_sink_name(parts.hostname + parts.path.rstrip("/") if name is None else name,
                                    f"WebhookSink({url!r})")
        """The name the engine's store keeps for this sink (see :mod:`reaqtive.engine.named_sinks`)."""
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        self._headers = {"Content-Type": "application/json", **extra}
        self._timeout = float(timeout)
        self._retries = retries
        self._backoff = float(backoff)
        self._max_backoff = float(max_backoff)
        self._deadline = float(deadline)
        self._json = OutputJson(json_default)
        self._ssl = ssl_context
        self._batch = batch
        self._batch_size = batch_size
        self._sleep = sleep
        self._clock = clock
        self._jitter = jitter
        self._lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None
        self._sent: dict[str, int] = {}  # per subscription, the last seq the receiver accepted (this process)
        self.attempts = 0
        """Requests made so far (for tests and metrics)."""

    def __call__(self, output: Output) -> None:
        """POST ``output``; returns once the receiver answered 2xx. Raises :class:`WebhookRejectedError`,
        :class:`WebhookUnavailableError` or :class:`~reaqtive.connectors.errors.UnencodableOutputError`."""
        with self._lock:
            if output.seq <= self._sent.get(output.subscription, -1):
                return  # accepted already (the outbox repeats after a restart of the engine in this process)
            self._send(output.subscription, output.seq, output.seq, self._json.one(output),
                       {IDEMPOTENCY_HEADER: f"{output.subscription}:{output.seq}", "Reaqtive-Seq": str(output.seq)})

    def write_batch(self, outputs: Sequence[Output]) -> None:
        """POST ``outputs`` (the outbox hands over batches this way): with ``batch=True``, as JSON arrays of up to
        ``batch_size`` outputs of one subscription per request (see the module); otherwise one request each."""
        if not self._batch:
            for output in outputs:
                self(output)
            return
        with self._lock:
            for subscription, group in _by_subscription(outputs):
                fresh = [output for output in group if output.seq > self._sent.get(subscription, -1)]
                for start in range(0, len(fresh), self._batch_size):
                    chunk = fresh[start:start + self._batch_size]
                    first, last = chunk[0].seq, chunk[-1].seq
                    body = self._json.array(chunk)
                    self._send(subscription, first, last, body,
                               {IDEMPOTENCY_HEADER: f"{subscription}:{first}-{last}",
                                "Reaqtive-Seq": str(last), "Reaqtive-First-Seq": str(first)})

    def _send(self, subscription: str, first: int, last: int, body: bytes, keys: dict[str, str]) -> None:
        """POST ``body`` (outputs ``first``..``last`` of ``subscription``) with retries; under the sink's lock."""
        headers = {**self._headers, **keys, "Reaqtive-Subscription": subscription}
        started = self._clock()
        attempts = 0
        while True:
            attempts += 1
            left = self._deadline - (self._clock() - started)
            retry_after: float | None = None
            cause: BaseException | None = None
            try:
                status, reason, retry_after, excerpt = self._post(body, headers, max(min(self._timeout, left),
                                                                                     0.001))
            except (OSError, http.client.HTTPException) as error:  # timeouts are OSErrors
                self._disconnect()
                message, cause = f"{type(error).__name__}: {error}", error
            else:
                if 200 <= status < 300:
                    self._sent[subscription] = last
                    return
                if status not in _RETRIED_STATUSES and status < 500:
                    raise WebhookRejectedError(self.url, subscription, first, status=status, reason=reason,
                                               body=excerpt)
                message = f"{status} {reason}" + (f" (Retry-After {retry_after:g} s)" if retry_after is not None
                                                  else "")
            delay = self._delay(attempts, retry_after)
            if attempts > self._retries or self._clock() - started + delay >= self._deadline:
                raise WebhookUnavailableError(self.url, subscription, first, attempts, message) from cause
            self._sleep(delay)

    def close(self) -> None:
        """Close the kept-alive connection (a later call opens a new one)."""
        with self._lock:
            self._disconnect()

    def __repr__(self) -> str:
        return f"WebhookSink({self.url!r})"

    def _delay(self, attempts: int, retry_after: float | None) -> float:
        """Exponential backoff with "equal jitter" (half fixed, half random, so that many sinks retrying after
        one outage spread out), or the receiver's ``Retry-After`` if longer."""
        base = min(self._max_backoff, self._backoff * 2.0 ** min(attempts - 1, 60))
        delay = base / 2 + self._jitter() * base / 2
        return delay if retry_after is None else max(delay, retry_after)

    def _post(self, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, str, float | None, str]:
        """One request: ``(status, reason, Retry-After seconds or None, start of the body)``."""
        self.attempts += 1
        connection = self._connection
        if connection is None:
            if self._https:
                connection = http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                                         context=self._ssl)
            else:
                connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
            self._connection = connection
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        connection.request("POST", self._target, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read(_READ_LIMIT)
        if not response.isclosed():  # a longer body than we read: do not reuse this connection
            self._disconnect()
        excerpt = data[:_BODY_EXCERPT].decode("utf-8", "replace").strip()
        return response.status, response.reason, _retry_after(response.getheader("Retry-After")), excerpt

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _by_subscription(outputs: Sequence[Output]) -> list[tuple[str, list[Output]]]:
    """The outputs grouped by subscription, each group in the order given (the outbox gives one subscription's)."""
    groups: dict[str, list[Output]] = {}
    for output in outputs:
        groups.setdefault(output.subscription, []).append(output)
    return list(groups.items())


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delay-seconds or an HTTP date); ``None`` if absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
