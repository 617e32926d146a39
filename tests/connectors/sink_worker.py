"""The process ``test_json_lines_sink.py`` kills: an engine whose queries write to a :class:`JsonLinesSink`.

Run as ``python -m tests.connectors.sink_worker STORE FILE --events N [--torn-at K]`` from the repository root.
Each run opens the engine (recovering), resumes the producer at the stream's head, and loops: append 20 events
(one transaction), process them, print ``progress P``; the engine checkpoints every 60 events. ``done P`` at the
end. ``--torn-at K``: on the K-th output handed to the sink in this run, write the first half of its line and
exit at once, as a crash in the middle of the write would leave it. ``--kill-after P --kill-delay S``: once P events
are appended, a timer SIGKILLs the process S seconds later, wherever it is then (it goes on appending, then waits
for the kill): the random moment is the worker's own, so a loaded machine that is slow to schedule the test
process cannot let the worker run on to its end first.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
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
    parser.add_argument("--kill-after", type=int, default=0)
    parser.add_argument("--kill-delay", type=float, default=0.0)
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
    armed = False

    def arm() -> None:
        killer = threading.Timer(args.kill_delay, os.kill, (os.getpid(), signal.SIGKILL))
        killer.daemon = True
        killer.start()

    while appended < args.events:
        count = min(CHUNK, args.events - appended)
        engine.append_many(STREAM, [(value_of(i), when(i)) for i in range(appended, appended + count)])
        appended += count
        engine.process()
        print("progress", appended, flush=True)
        if args.kill_after and appended >= args.kill_after and not armed:
            arm()
            armed = True
    if args.kill_after and not armed:  # an earlier run appended everything (its kill came late): the kill still comes,
        arm()                          # while this run processes what is left
        armed = True
        engine.process()
    if armed:  # the kill comes: never end on our own before it
        while True:
            time.sleep(1)
    engine.process()
    engine.checkpoint()
    engine.close()
    sink.close()
    print("done", appended, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
