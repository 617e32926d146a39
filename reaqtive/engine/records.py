"""The engine's own rows in the store, read defensively: artifact records, the delivery record, output counters.

Everything here is read from a file that may have been damaged or forged. Each reader checks the shape and the
types of what it parses and raises :class:`~reaqtive.engine.engine_errors.MalformedRecordError` naming the row and the
field, so that recovery can hand the failure to the recovery policy instead of failing somewhere later with a
``KeyError`` or a ``TypeError`` (or, worse, running on with a value of the wrong type).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any, Final

from reaqtive.engine.engine_errors import MalformedRecordError
from reaqtive.engine.expressions import MalformedExpressionError, expression_from_json, template_id
from reaqtive.engine.retention import retention_from_record

__all__ = [
    "ARTIFACT_KINDS",
    "Behind",
    "DeliveryRecord",
    "delivery_bytes",
    "parse_artifact",
    "parse_counter",
    "parse_delivery",
    "parse_template",
]

ARTIFACT_KINDS: Final = frozenset({"stream", "observable", "observer", "subscription"})


def _json(blob: bytes, where: str) -> dict[str, Any]:
    try:
        return _interned(expression_from_json(blob))
    except MalformedExpressionError as error:
        raise MalformedRecordError(f"{where}: {error}") from error


def _interned(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its keys and short strings interned, two levels deep (a record's fields and the mappings
    in them; never recursive: a template can be deep): 10,000 records of one query share them (memory per idle
    subscription)."""
    return {sys.intern(key): _interned_value(value) for key, value in record.items()}


def _interned_value(value: Any) -> Any:
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= _INTERN_UP_TO else value
    if isinstance(value, dict):
        return {sys.intern(key) if isinstance(key, str) else key: value[key] for key in value}
    return value


_INTERN_UP_TO: Final = 200


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Microseconds since the epoch that a datetime can hold (years 1 to 9999).
_MICROS_MIN: Final = (datetime(1, 1, 2, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
_MICROS_MAX: Final = (datetime(9999, 12, 30, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
    microseconds=1
)


def _is_micros(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and _MICROS_MIN <= value <= _MICROS_MAX


def _is_timestamp(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def _require(record: Mapping[str, Any], name: str, where: str, check: Any, expected: str) -> Any:
    if name not in record:
        raise MalformedRecordError(f"{where}: the field {name!r} is missing")
    value = record[name]
    if not check(value):
        raise MalformedRecordError(f"{where}: the field {name!r} should be {expected}, got {value!r:.60}")
    return value


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def parse_artifact(uri: str, blob: bytes, shared: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON record of artifact ``uri``, with the fields its kind needs, of the right types. ``shared``: equal
    constants and references of the records read with the same mapping are one object (10,000 subscriptions of
    one query over a few streams hold a few lists, not 20,000: memory per idle subscription). Records are
    replaced, never changed in place, so sharing their parts is safe."""
    where = f"the record of artifact {uri!r}"
    record = _json(blob, where)
    if shared is not None and record.get("kind") == "subscription":
        for name in ("constants", "refs"):
            if name in record:
                record[name] = _shared(shared, record[name])
        record = _compact(record)
    kind = _require(record, "kind", where, lambda k: isinstance(k, str) and k in ARTIFACT_KINDS,
                    f"one of {sorted(ARTIFACT_KINDS)}")
    _require(record, "created", where, _is_timestamp, "an ISO 8601 timestamp with its offset")
    if kind == "observable":
        _require(record, "expression", where, lambda e: isinstance(e, dict), "a query node")
        _require(record, "refs", where, _is_str_list, "a list of URIs")
    elif kind == "observer":
        _require(record, "function", where, lambda f: isinstance(f, (dict, str)), "a function reference")
    elif kind == "stream" and "retain" in record:
        retention_from_record(uri, record)
    elif kind == "subscription":
        _require(record, "template", where, lambda t: isinstance(t, str), "a template id")
        _require(record, "constants", where, lambda c: isinstance(c, list), "a list of constants")
        _require(record, "observer", where, lambda o: isinstance(o, str), "an observer URI")
        _require(record, "refs", where, _is_str_list, "a list of URIs")
        if "start_pos" in record:
            _require(record, "start_pos", where, _is_position, "a log position")
        if "start" in record:  # written before log positions: sequence numbers per stream
            _require(record, "start", where, _is_watermarks, "a mapping of stream URI to position")
        if "clock" in record:
            _require(record, "clock", where, _is_micros, "microseconds since the epoch")
        if "on_error" in record:
            _require(record, "on_error", where, _is_on_error, "'stop', 'skip' or {'function': reference}")
        if "failed" in record:
            _require(record, "failed", where, _is_failure, "a failure (error_type, message, pos, at, ...)")
        if "skipping" in record:
            _require(record, "skipping", where, _is_skipping, "a list of {unit, path, pos}")
        if "backfill" in record:
            _require(record, "backfill", where, _is_backfill, "{pos, clock[, joined]}")
    return record


class _Fields:
    """Holds a subscription's record as its attributes: CPython's instance dictionaries of one class share one
    table of keys, so the record, taken as the holder's ``__dict__``, is a plain dict of about 180 bytes instead
    of 280 (memory per idle subscription; records of other shapes just get a table of their own)."""


def _compact(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as a key-sharing dict (see :class:`_Fields`), equal to it, in the same order."""
    holder = _Fields()
    for key, value in record.items():
        setattr(holder, key, value)
    return holder.__dict__


def _is_backfill(entry: object) -> bool:
    """Where a backfilled subscription started its catch-up: a log position and a clock (see
    reaqtive.engine.backfill), and whether it has joined the engine since."""
    return (isinstance(entry, dict) and set(entry) <= {"pos", "clock", "joined"} and _is_position(entry.get("pos"))
            and _is_micros(entry.get("clock")) and entry.get("joined", False) in (True, False))


def _shared(shared: dict[str, Any], value: Any) -> Any:
    """The object equal to ``value`` seen first through ``shared`` (``value`` itself the first time)."""
    try:
        key = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return value  # not plain JSON: kept as it is
    return shared.setdefault(key, value)


def _is_skipping(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(entry, dict) and set(entry) == {"unit", "path", "pos"} and isinstance(entry["unit"], str)
        and isinstance(entry["path"], str) and _is_int(entry["pos"]) and entry["pos"] >= -1 for entry in value)


def _is_on_error(value: object) -> bool:
    return value in ("stop", "skip") or (isinstance(value, dict) and set(value) == {"function"}
                                         and isinstance(value["function"], (dict, str)))


_FAILURE_TEXTS: Final = ("error_type", "message", "traceback", "unit", "operator", "path")


def _is_failure(value: object) -> bool:
    return (isinstance(value, dict) and set(value) <= {*_FAILURE_TEXTS, "pos", "at"}
            and {"error_type", "message", "pos", "at"} <= set(value)
            and all(isinstance(value[key], str) for key in _FAILURE_TEXTS if key in value and value[key] is not None)
            and _is_int(value["pos"]) and value["pos"] >= -1 and _is_timestamp(value["at"]))


def parse_template(key: str, blob: bytes) -> dict[str, Any]:
    """A stored query template: a query node, stored under its content hash (checked: a template replaced by
    another well-formed query, behind a valid row checksum, would otherwise run silently in its place)."""
    where = f"query template {key}"
    template = _json(blob, where)
    _require(template, "op", where, lambda op: isinstance(op, str), "an operator name")
    _require(template, "args", where, lambda args: isinstance(args, list), "a list of arguments")
    if template_id(template) != key:
        raise MalformedRecordError(f"{where}: its content does not match its id (the row was altered)")
    return template


def _is_watermarks(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(key, str) and _is_int(mark) and mark >= -1 for key, mark in value.items()
    )


def _is_position(value: object) -> bool:
    return _is_int(value) and value >= -1  # type: ignore[operator]


@dataclass(frozen=True)
class Behind:
    """Where a query behind the engine stood at a checkpoint (paused or catching up, or kept without running:
    see reaqtive.engine.behind): ``pos``, the log position its clock had seen the log up to, which is what
    "caught up" in its readers' saved state means; ``clock``, its clock then (microseconds; ``None``: the
    engine's); ``floor``, the log position below which the log may be truncated for it. ``legacy``: for a pin
    written before log positions, what "caught up" meant per stream, in sequence numbers."""

    pos: int
    clock: int | None
    floor: int
    legacy: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"pos": self.pos, "floor": self.floor}
        if self.clock is not None:
            record["clock"] = self.clock
        if self.legacy is not None:
            record["legacy"] = dict(self.legacy)
        return record


@dataclass(frozen=True)
class DeliveryRecord:
    """What the last checkpoint says about delivery: the log position the engine had delivered up to, per stream
    the sequence number and the log position of the last event delivered (``delivered_at`` is ``None`` in a
    record written before log positions), the clock (microseconds; ``None`` before any checkpoint), the queries
    that stood behind the engine, and the artifacts kept without running (:class:`Behind` each); ``clock_moves``:
    the moves of the clock without an event a query behind still replays (log position, microseconds; a record of
    an older release has none)."""

    pos: int = 0
    delivered: dict[str, int] = field(default_factory=dict)
    now: int | None = None
    pinned: dict[str, Behind] = field(default_factory=dict)
    delivered_at: dict[str, int] | None = None
    behind: dict[str, Behind] = field(default_factory=dict)
    clock_moves: list[tuple[int, int]] = field(default_factory=list)


def parse_delivery(blob: bytes) -> DeliveryRecord:
    """The delivery record (of this release, or of one before log positions)."""
    where = "the delivery record"
    record = _json(blob, where)
    pos = _require(record, "pos", where, lambda p: _is_int(p) and p >= 0, "a log position")
    delivered = _require(record, "delivered", where, _is_watermarks, "a mapping of stream URI to watermark")
    delivered_at = None
    if "delivered_at" in record:
        delivered_at = dict(_require(record, "delivered_at", where, _is_watermarks,
                                     "a mapping of stream URI to log position"))
    now = record.get("now")
    if now is not None and not _is_micros(now):
        raise MalformedRecordError(f"{where}: the field 'now' should be microseconds, got {now!r:.60}")
    return DeliveryRecord(pos, dict(delivered), now, _parse_behind(record, "pinned", where), delivered_at,
                          _parse_behind(record, "behind", where), _parse_clock_moves(record, pos, now, where))


def _parse_clock_moves(record: Mapping[str, Any], pos: int, now: int | None, where: str) -> list[tuple[int, int]]:
    """The clock moves without an event (absent from an older release's record): pairs of a log position and
    microseconds, both in order, none past the record's position and clock."""
    moves = record.get("clock_moves", [])
    sound = isinstance(moves, list) and all(
        isinstance(move, list) and len(move) == 2 and _is_position(move[0]) and _is_micros(move[1])
        for move in moves)
    if sound:
        pairs = [(int(move[0]), int(move[1])) for move in moves]
        sound = all(a[0] < b[0] and a[1] <= b[1] for a, b in pairwise(pairs)) and all(
            p <= pos and (now is None or clock <= now) for p, clock in pairs)
    if not sound:
        raise MalformedRecordError(f"{where}: the field 'clock_moves' should list [log position, microseconds] "
                                   f"pairs in order, none past the record's position {pos} and clock {now}, got "
                                   f"{moves!r:.80}")
    return pairs


def _parse_behind(record: Mapping[str, Any], name: str, where: str) -> dict[str, Behind]:
    entries = record.get(name, {})
    if not (isinstance(entries, dict) and all(isinstance(uri, str) and isinstance(entry, dict)
                                              for uri, entry in entries.items())):
        raise MalformedRecordError(f"{where}: the field {name!r} should map URIs to positions, got {entries!r:.60}")
    parsed: dict[str, Behind] = {}
    for uri, entry in entries.items():
        if _is_legacy_pin(entry):
            # Written before log positions: recovery finds the positions (reaqtive.engine.recovery).
            parsed[uri] = Behind(-1, None, -1, dict(entry["caught_up"]))
            continue
        clock = entry.get("clock")
        legacy = entry.get("legacy")
        if not (set(entry) <= {"pos", "clock", "floor", "legacy"} and _is_position(entry.get("pos"))
                and _is_position(entry.get("floor")) and (clock is None or _is_micros(clock))
                and (legacy is None or _is_watermarks(legacy))):
            raise MalformedRecordError(f"{where}: the entry of {uri!r} in {name!r} should hold a log position, a "
                                       f"floor and a clock, got {entry!r:.80}")
        parsed[uri] = Behind(entry["pos"], clock, entry["floor"], None if legacy is None else dict(legacy))
    return parsed


def _is_legacy_pin(value: Mapping[str, Any]) -> bool:
    return (set(value) == {"caught_up", "floor"} and _is_watermarks(value["caught_up"])
            and _is_watermarks(value["floor"]))


def delivery_bytes(record: DeliveryRecord, at: str) -> dict[str, Any]:
    """The delivery record to store (the inverse of :func:`parse_delivery`)."""
    stored: dict[str, Any] = {"pos": record.pos, "delivered": dict(record.delivered), "at": at}
    if record.delivered_at is not None:
        stored["delivered_at"] = dict(record.delivered_at)
    if record.now is not None:
        stored["now"] = record.now
    if record.pinned:
        stored["pinned"] = {uri: entry.to_json() for uri, entry in record.pinned.items()}
    if record.behind:
        stored["behind"] = {uri: entry.to_json() for uri, entry in record.behind.items()}
    if record.clock_moves:
        stored["clock_moves"] = [[pos, micros] for pos, micros in record.clock_moves]
    return stored


def parse_counter(uri: str, blob: bytes, *, what: str = "output counter", minimum: int = 0) -> int:
    """An output counter (or cursor) of subscription ``uri``, stored as ASCII digits."""
    text = blob.decode("ascii", errors="replace")
    digits = text[1:] if text.startswith("-") else text
    if not digits.isdigit() or not digits.isascii() or int(text) < minimum:
        raise MalformedRecordError(f"the {what} of {uri!r} is not a number >= {minimum}: {blob!r:.40}")
    return int(text)

