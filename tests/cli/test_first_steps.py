"""A new user's first steps: ``interval(...).run(print)`` without building schedulers, a failing query that says
so to the caller, a function defined in ``__main__`` refused with what to do, and an editable install that type
checkers see."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from reaqtive import from_iterable, interval, timer
from reaqtive.engine import UnpersistableQueryError
from reaqtive.scheduler import VirtualTimeScheduler

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0  # seconds: a bound for a real-time scheduler that never comes, not how long the tests take


# -- run() and its default real-time scheduler ----------------------------------------------------------------------


def test_interval_runs_without_a_scheduler_built_by_hand() -> None:
    ticks: list[int] = []
    done = threading.Event()
    handle = interval(timedelta(milliseconds=1)).take(3).run(ticks.append, on_complete=done.set)
    assert done.wait(WAIT), "the default real-time scheduler ran the interval"
    assert ticks == [0, 1, 2]
    handle.dispose()


def test_disposing_stops_a_query_on_the_default_scheduler() -> None:
    ticks: list[int] = []
    third = threading.Event()

    def record(tick: int) -> None:
        ticks.append(tick)
        if tick == 2:
            third.set()

    handle = interval(timedelta(milliseconds=1)).run(record)
    assert third.wait(WAIT)
    handle.dispose()
    # A timer on the same worker thread fires after a tick that was running as dispose was called; then no
    # tick comes during a second timer's 5 ms (five periods of the interval, had it not stopped).
    for _ in range(2):
        fired = threading.Event()
        timer(timedelta(milliseconds=5)).run(lambda _, fired=fired: fired.set())
        assert fired.wait(WAIT)
        if _ == 0:
            seen = len(ticks)
    assert len(ticks) == seen


def test_run_takes_a_scheduler_for_time_based_queries() -> None:
    scheduler = VirtualTimeScheduler()
    ticks: list[int] = []
    interval(timedelta(seconds=10)).take(3).run(ticks.append, scheduler=scheduler)
    scheduler.advance_by(timedelta(seconds=25))
    assert ticks == [0, 1]
    scheduler.advance_by(timedelta(seconds=5))
    assert ticks == [0, 1, 2]


def test_a_query_over_an_iterable_still_runs_on_the_callers_thread() -> None:
    seen: list[tuple[int, threading.Thread]] = []
    from_iterable(range(3)).map(lambda x: x * 2).run(lambda x: seen.append((x, threading.current_thread())))
    assert seen == [(x, threading.current_thread()) for x in (0, 2, 4)], "all delivered before run returned"


def test_a_context_and_a_scheduler_together_are_refused() -> None:
    from reaqtive import OperatorContext

    with pytest.raises(TypeError, match="not both"):
        from_iterable([1]).run(print, context=OperatorContext("test://x"), scheduler=VirtualTimeScheduler())


# -- failures are visible to the caller ----------------------------------------------------------------------------


def test_a_failure_while_run_runs_is_raised_from_run() -> None:
    received: list[float] = []
    with pytest.raises(ZeroDivisionError):
        from_iterable([1, 0, 2]).map(lambda x: 1 / x).run(received.append)
    assert received == [1.0], "the elements before the failure were delivered, none after"


def test_on_error_receives_the_failure_and_nothing_is_raised() -> None:
    errors: list[BaseException] = []
    from_iterable([0]).map(lambda x: 1 / x).run(print, errors.append)
    assert [type(e) for e in errors] == [ZeroDivisionError]


def test_a_later_failure_on_the_default_scheduler_is_logged_with_its_traceback() -> None:
    records: list[logging.LogRecord] = []
    logged = threading.Event()

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)
            logged.set()

    logger = logging.getLogger("reaqtive.subscribers")
    handler = Keep(logging.ERROR)
    logger.addHandler(handler)
    try:
        interval(timedelta(milliseconds=1)).map(lambda x: 1 / 0).run(print)  # returns: nothing failed yet
        assert logged.wait(WAIT)
    finally:
        logger.removeHandler(handler)
    (record,) = records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
    assert "pass on_error" in record.getMessage()


def test_a_raising_on_error_does_not_stop_other_standalone_queries() -> None:
    """A task that raises on the shared standalone scheduler is logged and dropped; the scheduler goes on."""
    raised = threading.Event()

    def on_error(error: BaseException) -> None:
        raised.set()
        raise RuntimeError("the user's on_error failed too") from error

    timer(timedelta(milliseconds=1)).map(lambda x: 1 / 0).run(print, on_error)
    assert raised.wait(WAIT)
    fired = threading.Event()
    timer(timedelta(milliseconds=1)).run(lambda _: fired.set())
    assert fired.wait(WAIT), "a later standalone query still runs"


def test_a_later_failure_on_the_virtual_scheduler_goes_to_on_error() -> None:
    scheduler = VirtualTimeScheduler()
    errors: list[BaseException] = []
    interval(timedelta(seconds=1)).map(lambda x: 1 / 0).run(print, errors.append, scheduler=scheduler)
    assert errors == []
    scheduler.advance_by(timedelta(seconds=1))
    assert [type(e) for e in errors] == [ZeroDivisionError]


# -- a function defined in __main__ --------------------------------------------------------------------------------


SCRIPT = '''
import sys
from reaqtive import Query
from reaqtive.engine import Engine


def double(x):
    return x * 2


with Engine(sys.argv[1]) as engine:
    engine.create_stream("s")
    engine.create_subscription("q://doubled", Query.stream("s").map(double))
'''


def test_a_function_defined_in_main_is_refused_saying_main_is_the_problem(tmp_path: Path) -> None:
    script = tmp_path / "service.py"
    script.write_text(textwrap.dedent(SCRIPT))
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "store.db")], check=False,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("reaqtive.engine.expressions.UnpersistableQueryError: ")
    assert "<double>, defined in __main__" in message
    assert "importable module" in message and "engine.register_function" in message


def test_a_nested_function_in_main_keeps_the_message_about_nested_functions() -> None:
    from reaqtive.engine.expressions import encode_query

    def function(x: int) -> int:
        return x

    function.__module__ = "__main__"  # a nested function (no import path anywhere) of the script being run
    with pytest.raises(UnpersistableQueryError, match="no import path") as error_info:
        encode_query(from_iterable([1]).map(function))
    assert "__main__ (the script" not in str(error_info.value)


# -- the editable install -------------------------------------------------------------------------------------------


def test_the_editable_install_is_visible_to_type_checkers(tmp_path: Path) -> None:
    """``make`` installs reaqtive in editable mode; mypy (and pyright, which reads the same .pth path lines but
    never runs the import hooks of setuptools' default editable mode) must find it from outside the repository."""
    (tmp_path / "app.py").write_text("import reaqtive\nfrom reaqtive import Query\n")
    mypy = Path(sys.executable).with_name("mypy")
    result = subprocess.run(
        [str(mypy), "--follow-imports=skip", "--no-incremental", "--no-error-summary", "app.py"],
        check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert result.returncode == 0, (
        f"{result.stdout}{result.stderr}\nreinstall with `make` (the Makefile installs with "
        "--config-settings editable_mode=compat)"
    )


def test_the_makefile_installs_in_a_mode_type_checkers_see() -> None:
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line and " -e " in line]
    assert installs and all("$(EDITABLE)" in line for line in installs), installs
    assert "EDITABLE := --config-settings editable_mode=compat" in makefile
