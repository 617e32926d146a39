"""Reading a Spark query's reaqtive state back, for inspection (``reaqtive inspect`` can show it).

Spark keeps each bucket's blob in its state store under the checkpoint location; its state data source reads the
committed version (``spark.read.format("statestore")``). :func:`inspect_state` decodes the blobs into plain data
(JSON-ready: numbers, strings, lists, dicts), :func:`format_state` renders that as text::

    from reaqtive.spark import format_state, inspect_state

    print(format_state(inspect_state("ckpt/", keys=True)))
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from reaqtive.spark.host import FORM_TABLE, BucketState, BucketStateError, KeyRecord
from reaqtive.spark.processor import STATE_VARIABLE
from reaqtive.state import DEFAULT_CODEC, StateError, read_blob

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["describe_record", "format_state", "inspect_state"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def inspect_state(
    checkpoint: str | os.PathLike[str],
    spark: SparkSession | None = None,
    *,
    keys: bool = False,
    batch_id: int | None = None,
) -> dict[str, Any]:
    """The reaqtive state in the Spark checkpoint at ``checkpoint``, as plain data: per bucket its keys, size and
    timer; with ``keys``, per key its clock, next timer, counts, end, and the operators its state holds.

    ``spark``: the session to read with (default: the active one, else a local session started and stopped
    here). ``batch_id``: the state as of that committed batch (default: the last one).
    """
    path = os.fspath(checkpoint)
    if not os.path.isdir(os.path.join(path, "state")):
        raise FileNotFoundError(f"{path!r} is not a Spark checkpoint with state (no 'state' directory)")
    owned = None
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            from reaqtive.spark.session import local_session

            spark = owned = local_session("reaqtive-inspect", cores=1)
    try:
        reader = spark.read.format("statestore").option("stateVarName", STATE_VARIABLE)
        if batch_id is not None:
            reader = reader.option("batchId", batch_id)
        rows = reader.load(path).select("key.bucket", "value.blob", "partition_id").collect()
    finally:
        if owned is not None:
            owned.stop()
    summary: dict[str, Any] = {"checkpoint": path, "state_variable": STATE_VARIABLE, "buckets": None,
                               "fingerprint": None, "keys": 0, "bytes": 0, "bucket_states": []}
    key_rows: list[dict[str, Any]] = []
    for row in sorted(rows, key=lambda r: int(r[0])):
        bucket, blob, partition = int(row[0]), bytes(row[1]), int(row[2])
        state = BucketState.decode(blob, f"bucket {bucket} in {path}")
        summary["buckets"] = state.buckets
        summary["fingerprint"] = state.fingerprint
        summary["keys"] += len(state.keys)
        summary["bytes"] += len(blob)
        summary["bucket_states"].append({
            "bucket": bucket,
            "partition": partition,
            "keys": len(state.keys),
            "bytes": len(blob),
            "timer": None if state.timer is None else _iso(state.timer * 1000),
            "form": state.form,
        })
        if keys:
            for key in sorted(state.keys, key=lambda k: (k is None, k)):
                where = f"bucket {bucket}, key {key!r}"
                if state.form == FORM_TABLE:
                    described = describe_table_record(state.keys[key], state.chain, where)
                else:
                    described = describe_record(KeyRecord.unpack(state.keys[key], where))
                key_rows.append({"key": key, "bucket": bucket, **described})
    if keys:
        summary["key_states"] = key_rows
    return summary


def describe_table_record(data: bytes, chain: list[str], where: str) -> dict[str, Any]:
    """One key's record in the table form (``reaqtive.spark.table``) as plain data, like :func:`describe_record`."""
    try:
        fields: list[Any] = DEFAULT_CODEC.decode_value(data, where)  # type: ignore[assignment]
        clock, due, events, outputs, ended = fields[1:6]
    except (StateError, ValueError, TypeError) as error:
        raise BucketStateError(f"{where}: not a table record ({error})") from error
    return {
        "clock": _iso(clock),
        "next_due": None if due is None else _iso(due),
        "events": events,
        "outputs": outputs,
        "ended": ended,
        "instance": None,
        "state_bytes": len(data),
        "inner_subscriptions": 0,
        "operators": [f"{name} (table)" for name in chain],
    }


def describe_record(record: KeyRecord) -> dict[str, Any]:
    """One key's record as plain data."""
    operators: list[str] = []
    if record.subscription is not None:
        try:
            operators = [f"{node.name} v{'.'.join(map(str, node.version))}"
                         for node in read_blob(record.subscription, where="key state")]
        except StateError as error:
            operators = [f"<unreadable: {error}>"]
    return {
        "clock": _iso(record.clock),
        "next_due": None if record.due is None else _iso(record.due),
        "events": record.events,
        "outputs": record.outputs,
        "ended": record.ended,
        "instance": record.instance,
        "state_bytes": len(record.subscription or b"") + sum(len(blob) for blob in record.inner.values()),
        "inner_subscriptions": len(record.inner),
        "operators": operators,
    }


def format_state(summary: dict[str, Any]) -> str:
    """:func:`inspect_state`'s result as text: a header, a table of buckets, and (if present) one of keys."""
    lines = [
        f"Spark checkpoint {summary['checkpoint']}: state variable {summary['state_variable']!r}",
        f"  {len(summary['bucket_states'])} buckets stored (of {summary['buckets']}), query fingerprint "
        f"{summary['fingerprint']}, {summary['keys']} keys, {summary['bytes']} bytes",
        "",
        f"  {'bucket':>6}  {'partition':>9}  {'keys':>7}  {'bytes':>10}  timer",
    ]
    for bucket in summary["bucket_states"]:
        lines.append(f"  {bucket['bucket']:>6}  {bucket['partition']:>9}  {bucket['keys']:>7}  {bucket['bytes']:>10}  "
                     f"{bucket['timer'] or '-'}")
    if "key_states" in summary:
        lines += ["", f"  {'key':<20} {'bucket':>6} {'events':>7} {'outputs':>7} {'bytes':>8}  clock / next timer"]
        for key in summary["key_states"]:
            ended = f"  [{key['ended']}]" if key["ended"] else ""
            lines.append(
                f"  {key['key']!s:<20} {key['bucket']:>6} {key['events']:>7} {key['outputs']:>7} "
                f"{key['state_bytes']:>8}  {key['clock']} / {key['next_due'] or '-'}{ended}"
            )
    return "\n".join(lines)


def _iso(micros: int) -> str:
    return (_EPOCH + timedelta(microseconds=micros)).isoformat()
