"""The process ``test_json_lines_sink.py`` kills: an engine whose queries write to a :class:`JsonLinesSink`.

Run as ``python -m tests.connectors.sink_worker STORE FILE --events N [--torn-at K]`` from the repository root.
Each run opens the engine (recovering), resumes the producer at the stream's head, and loops: append 20 events
(one transaction), process them, print ``progress P``; the engine checkpoints every 60 events. ``done P`` at the
end. ``--torn-at K``: on the K-th output handed to the sink in this run, write the first half of its line and
exit at once, as a crash in the middle of the write would leave it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from reaqtive.connectors import JsonLinesSink
from reaqtive.engine import Output
from tests.connectors.support import STREAM, open_engine, value_of, when

CHUNK = 20


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("file", type=Path)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--torn-at", type=int, default=0)
    args = parser.parse_args(argv)
    sink = JsonLinesSink(args.file)
    calls = 0

    def observer(output: Output) -> None:
        nonlocal calls
        calls += 1
        if calls == args.torn_at:
            line = json.dumps({"subscription": output.subscription, "seq": output.seq, "value": output.value},
                              separators=(",", ":")).encode()
            fd = os.open(args.file, os.O_WRONLY | os.O_APPEND)
            os.write(fd, line[: len(line) // 2])
            os._exit(9)
        sink(output)

    engine = open_engine(args.store, "file", observer, checkpoint_every_events=60)
    appended = engine.streams()[STREAM].appended
    print("ready", appended, flush=True)
    while appended < args.events:
        count = min(CHUNK, args.events - appended)
        engine.append_many(STREAM, [(value_of(i), when(i)) for i in range(appended, appended + count)])
        appended += count
        engine.process()
        print("progress", appended, flush=True)
    engine.process()
    engine.checkpoint()
    engine.close()
    sink.close()
    print("done", appended, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
