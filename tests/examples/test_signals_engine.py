"""The operators of another package survive an engine restart (issue 16): ``examples/reaqtive-signals``, installed
in the environment, under a standing query of an :class:`~reaqtive.Engine`.

* a query of ``clamp`` and ``ewma`` runs, is checkpointed, the engine closes; a **new process**, which never
  imports ``reaqtive_signals`` itself (the entry point group ``reaqtive.operators`` must load it), reopens the
  store, appends the rest, and the durable sink equals that of a run that never stopped;
* the same after a SIGKILL between a checkpoint and the next (the events after the checkpoint are replayed);
* a store whose query names an operator of a package that is not installed (``nosuchpkg:op``) refuses to open
  with an error naming the namespace, changes nothing, and opens as before once the operator is registered.

Each process runs this module as ``python -m tests.examples.test_signals_engine COMMAND ...`` from the repository
root (the worker commands at the bottom); this module imports ``reaqtive_signals`` only inside the functions that
write a query with it, so that the recovering worker does not.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Engine, OperatorCall, Query

ROOT = Path(__file__).resolve().parents[2]
STREAM = "signals://readings"
QUERY = "q://smoothed"
EVENTS = 100
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (the crash test kills a worker process)"
)


def reading(i: int) -> int:
    """Event ``i``'s value: from -6 to 16, so that ``clamp(0, 10)`` cuts both ends."""
    return (i * 37) % 23 - 6


def smoothed() -> Query[float]:
    """The standing query (imports the operator package: only the processes that write the query call this)."""
    from reaqtive_signals import clamp, ewma

    return Query.stream(STREAM).pipe(clamp(0, 10), ewma(0.5, warmup=2))


def append(engine: Engine, start: int, stop: int) -> None:
    """Append events ``start`` to ``stop`` (excluded) and process them."""
    engine.append_many(STREAM, [(reading(i), T0 + timedelta(seconds=i)) for i in range(start, stop)])
    engine.process()


def outputs(engine: Engine) -> list[list[Any]]:
    """The durable sink of the query: ``[seq, value]`` pairs."""
    return [[output.seq, output.value] for output in engine.outputs(QUERY)]


def create(store: Path) -> Engine:
    engine = Engine(store)
    engine.create_stream(STREAM)
    engine.create_subscription(QUERY, smoothed())
    return engine


def uncrashed(store: Path) -> list[list[Any]]:
    """The oracle: one engine, every event, never stopped."""
    with create(store) as engine:
        append(engine, 0, EVENTS)
        return outputs(engine)


def worker(*args: str, check: bool = True) -> dict[str, Any]:
    """Run a worker command in a new process; its last stdout line is a JSON report."""
    done = subprocess.run([sys.executable, "-m", "tests.examples.test_signals_engine", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"worker {args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_the_example_package_is_installed() -> None:
    assert importlib.util.find_spec("reaqtive_signals") is not None, (
        "the example operator package is not installed: pip install -e examples/reaqtive-signals (make test does)"
    )


def test_a_query_of_another_package_s_operators_survives_a_restart_in_a_new_process(tmp_path: Path) -> None:
    expected = uncrashed(tmp_path / "oracle.db")
    store = tmp_path / "service.db"
    with create(store) as engine:
        append(engine, 0, 40)
        engine.checkpoint()
        append(engine, 40, 55)  # processed, not checkpointed: replayed after the restart
    report = worker("recover", str(store), "55", str(EVENTS))
    assert report["imported_before_open"] is False, "the recovering worker must not import the package itself"
    assert report["imported_after_open"] is True, "the entry point loaded the operator package"
    assert report["outputs"] == expected
    assert len(expected) == EVENTS - 1  # the warm-up swallows the first reading


def test_a_query_of_another_package_s_operators_survives_a_sigkill(tmp_path: Path) -> None:
    expected = uncrashed(tmp_path / "oracle.db")
    store = tmp_path / "service.db"
    process = subprocess.Popen([sys.executable, "-m", "tests.examples.test_signals_engine", "crash", str(store)],
                               cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "pause 60", f"the worker did not reach its pause: {line!r}"
        os.kill(process.pid, signal.SIGKILL)  # between two checkpoints: events 40 to 59 are not in one
        assert process.wait(timeout=60) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()
    report = worker("recover", str(store), "60", str(EVENTS))
    assert report["imported_after_open"] is True
    assert report["outputs"] == expected, "nothing missing, nothing twice"


def test_a_store_naming_a_package_that_is_not_installed_fails_clearly_and_stays_intact(tmp_path: Path) -> None:
    store = tmp_path / "service.db"
    written = worker("nosuchpkg", str(store), "write")
    assert written["outputs"] == [[i, i + 1] for i in range(10)]
    before = fingerprint(store)

    refused = worker("nosuchpkg", str(store), "open")
    assert refused["error"] == "RecoveryError"
    assert refused["cause"] == "UnknownOperatorError"
    assert "unknown operator 'nosuchpkg:op'" in refused["message"]
    assert "no installed package registers namespace 'nosuchpkg'" in refused["message"]
    assert fingerprint(store) == before, "a refused open changes nothing in the store"

    reopened = worker("nosuchpkg", str(store), "open", "--register")
    assert reopened["outputs"] == [[i, i + 1] for i in range(20)], "its state and outputs were kept"


def fingerprint(store: Path) -> dict[str, str]:
    """The SHA-256 of the store's database files (not its lock file, which names the last process to open it)."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(store.parent.glob(store.name + "*")) if path.suffix != ".lock"}


# -- the worker processes ---------------------------------------------------------------------------------------

def _recover(store: Path, start: int, stop: int) -> dict[str, Any]:
    """Reopen ``store`` without importing the operator package, append ``start`` to ``stop``, process."""
    imported_before = "reaqtive_signals" in sys.modules
    with Engine(store) as engine:
        imported_after = "reaqtive_signals" in sys.modules
        append(engine, start, stop)
        engine.checkpoint()
        return {"imported_before_open": imported_before, "imported_after_open": imported_after,
                "outputs": outputs(engine)}


def _crash(store: Path) -> None:
    """Checkpoint after 40 events, process 20 more, then wait to be killed."""
    engine = create(store)
    append(engine, 0, 40)
    engine.checkpoint()
    append(engine, 40, 60)
    print("pause 60", flush=True)
    sys.stdin.readline()  # blocks until the test kills this process
    raise SystemExit("the crash worker was not killed")


def _register_nosuchpkg() -> None:
    """Register ``nosuchpkg:op`` (a running count of the elements) in this process only, as its package would."""
    from reaqtive import register_operator
    from reaqtive.core.arguments import arguments
    from reaqtive.core.operator import StateReader, StateWriter, Version
    from reaqtive.core.streams import Subscriber
    from reaqtive.core.subscriptions import SubscriptionHandle
    from reaqtive.state import StatefulUnaryOperatorBase

    @register_operator("nosuchpkg:op")
    class RunningCount(StatefulUnaryOperatorBase[Any, int]):
        name = "nosuchpkg:op"
        version: Version = (1,)

        def __init__(self, query: Any, downstream: Subscriber[int]) -> None:
            super().__init__(downstream)
            self._source = arguments(query, "source").source(0)
            self._count = 0

        def save_state_core(self, writer: StateWriter) -> None:
            writer.write(self._count)

        def load_state_core(self, reader: StateReader) -> None:
            self._count = reader.read_int("count")

        def subscribe_input(self) -> SubscriptionHandle:
            return self._source.subscribe(self)

        def on_next(self, value: Any) -> None:
            self._count += 1
            self.state_changed = True
            self._downstream.on_next(self._count)


def _nosuchpkg(store: Path, action: str, register: bool) -> dict[str, Any]:
    if action == "write":
        _register_nosuchpkg()
        with Engine(store) as engine:
            engine.create_stream(STREAM)
            engine.create_subscription(QUERY, Query.stream(STREAM).pipe(OperatorCall[int]("nosuchpkg:op")))
            append(engine, 0, 10)
            engine.checkpoint()
            return {"outputs": outputs(engine)}
    if register:
        _register_nosuchpkg()
    try:
        engine = Engine(store)
    except Exception as error:
        cause = getattr(error, "error", None) or error.__cause__
        return {"error": type(error).__name__, "cause": type(cause).__name__, "message": str(error)}
    with engine:
        append(engine, 10, 20)
        engine.checkpoint()
        return {"outputs": outputs(engine)}


def main(argv: list[str]) -> None:
    command, store = argv[0], Path(argv[1])
    if command == "recover":
        report = _recover(store, int(argv[2]), int(argv[3]))
    elif command == "crash":
        _crash(store)
        return
    elif command == "nosuchpkg":
        report = _nosuchpkg(store, argv[2], "--register" in argv[3:])
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
