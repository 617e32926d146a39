"""The process ``test_file_source.py`` kills: an engine fed by a :class:`FileSource` tailing a file.

Run as ``python -m tests.connectors.source_worker STORE FILE --format F --total N`` from the repository root.
Each run opens the engine (recovering), creates the stream and the subscription ``q://all`` (every event, into
the durable sink) when missing, opens the source (which resumes from the checkpoint's position), then loops:
poll, process, print ``progress A`` (A: the events the stream holds); the engine checkpoints every 40 events.
It prints ``ready A S`` once open (S: the records the source skipped, appended after its stored position) and
``done A`` when the stream holds N events. The test appends to the file meanwhile, in pieces that cut lines
anywhere.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from reaqtive import Query
from reaqtive.connectors import FileSource
from reaqtive.engine import Engine
from tests.connectors.support import T0

STREAM = "in://file"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("file", type=Path)
    parser.add_argument("--format", choices=("jsonl", "csv"), required=True)
    parser.add_argument("--total", type=int, required=True)
    parser.add_argument("--time-field", default=None)
    args = parser.parse_args(argv)
    engine = Engine(args.store, start=T0, checkpoint_every_events=40, synchronous="NORMAL")
    if STREAM not in engine.streams():
        engine.create_stream(STREAM)
        engine.create_subscription("q://all", Query.stream(STREAM))
    source = FileSource(engine, STREAM, args.file, format=args.format, batch=7, read_size=97,
                        time_field=args.time_field)
    appended = engine.streams()[STREAM].appended
    print("ready", appended, source.resumed_skipping, flush=True)
    while appended < args.total:
        if source.poll():
            engine.process()
            appended = engine.streams()[STREAM].appended
            print("progress", appended, flush=True)
        else:
            time.sleep(0.002)  # the test is still writing the file
    engine.process()
    engine.checkpoint()
    source.close()
    engine.close()
    print("done", appended, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
