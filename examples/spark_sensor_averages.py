"""Per sensor, the average of its readings in each one-minute window, on Spark: the README's example, as a script.

Run it from a folder holding ``in/``: Parquet files with the columns ``sensor`` (text), ``at`` (a timestamp),
``seq`` (an integer) and ``reading`` (a float), for instance written by pandas with its defaults::

    frame.to_parquet("in/part-0.parquet")

(``read_events`` reads timestamps in milli-, micro- or nanoseconds: pandas writes nanoseconds, which Spark's own
Parquet reader refuses.) Then::

    python examples/spark_sensor_averages.py

It processes what ``in/`` holds (``trigger(availableNow=True)``), writes its rows to ``out/`` (Parquet: ``key, seq,
time, value, error``; ``key`` is the sensor, each value ``[null, window start, window end, average]`` as JSON) and
exits; ``ckpt/`` keeps its progress and the windows still open, so running it again after adding files processes
only the new ones. For a job that runs until stopped, leave out the trigger: ``awaitTermination()`` then waits for ever.

``aggregate_by_key`` emits a row only for a window that had readings (a quiet minute produces nothing, so the
average never divides by zero), and its windows are calendar minutes, the same for every sensor, as Spark's own
``window()`` makes them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reaqtive import Query, Tumbling
from reaqtive.spark import local_session, read_events, run_stream


def no_key(event: Any) -> None:
    return None  # the query runs once per sensor already (its events carry no sensor column): one key inside it


def reading(event: Any) -> Any:
    return event["reading"]


# Per sensor (each key runs its own instance of the query): one row per one-minute window with readings.
per_sensor = Query.stream("sensors").aggregate_by_key(no_key, Tumbling(timedelta(minutes=1)), "average", reading)


def main() -> None:
    spark = local_session()  # local[2], RocksDB state store; on a cluster: use_rocksdb(spark)
    events = read_events(spark, "in/", "sensor string, at timestamp, seq long, reading double")  # a stream
    outputs = run_stream(events, per_sensor, key="sensor", time="at", sequence="seq", buckets=16,
                         functions={"no_key": no_key, "reading": reading})
    query = (outputs.writeStream.format("parquet").option("path", "out/").option("checkpointLocation", "ckpt/")
             .trigger(availableNow=True).start())
    query.awaitTermination()  # returns once what in/ held is processed (availableNow)
    spark.stop()


if __name__ == "__main__":
    main()
