"""The reaqtive command as a user meets it: ``--version``, errors as one line with exit code 2 (never a
traceback), a reader that closes the pipe early, ``checkpoint --functions`` with a registry factory, and a demo
whose stores are kept for ``reaqtive inspect``."""

from __future__ import annotations

import operator
import os
import re
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import reaqtive
from reaqtive import Query
from reaqtive.cli import main
from reaqtive.engine import Engine
from reaqtive.engine.inspection import read_store

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def exit_of(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[object, str, str]:
    """What argparse's own exits (--version, usage errors) leave: the exit code and the output."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def make_store(path: Path, outputs: int = 50) -> None:
    with Engine(path, start=T0) as engine:
        engine.create_stream("s")
        engine.create_subscription("q://sum", Query.stream("s").scan(0, operator.add))
        engine.append_many("s", [(i, T0 + timedelta(seconds=i)) for i in range(outputs)])
        engine.process()
        engine.checkpoint()


# -- --version ----------------------------------------------------------------------------------------------------


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = exit_of(capsys, "--version")
    assert code == 0 and err == ""
    assert out.strip() == f"reaqtive {reaqtive.__version__}"


# -- errors: one line, exit code 2 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    [],                                   # no command
    ["fly"],                              # an unknown command
    ["inspect"],                          # a missing argument
    ["inspect", "x.db", "--no-such-option"],
    ["demo", "--events", "many"],         # a bad value
])
def test_bad_arguments_are_one_line_with_exit_code_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = exit_of(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("reaqtive") and "--help" in err and "Traceback" not in err


def test_a_missing_store_is_one_line_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", "--outputs", "q://sum", str(tmp_path / "missing.db"))
    assert (code, out) == (2, "")
    assert err.strip() == f"reaqtive inspect: {tmp_path / 'missing.db'}: no such file"


def test_a_corrupt_store_is_one_line_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "store.db"
    make_store(path)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the header survives, the schema page does not
    path.write_bytes(bytes(data))
    for argv in (["inspect", str(path)], ["inspect", str(path), "--state", "q://sum"], ["checkpoint", str(path)]):
        code, _, err = run(capsys, *argv)
        assert code == 2, argv
        assert len(err.strip().splitlines()) == 1 and str(path) in err, err


def test_an_unexpected_error_is_one_line_and_traceback_shows_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store.db"
    make_store(path)

    def broken(_: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr("reaqtive.engine.inspection.format_summary", broken)
    code, out, err = run(capsys, "inspect", str(path))
    assert (code, out) == (2, "")
    assert err.strip() == ("reaqtive inspect: KeyError: 'a bug' (an unexpected error: run with --traceback to "
                           "report it)")
    with pytest.raises(KeyError, match="a bug"):
        main(["--traceback", "inspect", str(path)])


# -- a reader that goes away -------------------------------------------------------------------------------------


def test_a_reader_closing_the_pipe_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """``reaqtive inspect ... | head -1``: the reader takes one line and closes; no traceback, no message."""
    path = tmp_path / "store.db"
    make_store(path, outputs=5_000)  # far more than a pipe buffer holds, so the writer meets the closed pipe
    command = [sys.executable, "-c", "import sys; from reaqtive.cli import main; sys.exit(main())",
               "inspect", str(path), "--outputs", "q://sum"]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert writer.stdout is not None and writer.stderr is not None
    first = writer.stdout.readline()
    writer.stdout.close()  # the reader leaves
    err = writer.stderr.read()
    code = writer.wait(timeout=60)
    assert first.startswith(b"outputs of q://sum")
    assert err == b"", err.decode()
    assert code == 128 + 13, "ended as a process killed by SIGPIPE reports itself (head's writers do the same)"


# -- checkpoint --functions -----------------------------------------------------------------------------------------


FUNCTIONS_MODULE = '''
from reaqtive.engine import FunctionRegistry


def make_functions():
    registry = FunctionRegistry()
    registry.register("double", lambda x: x * 2)
    return registry


def not_a_registry():
    return 42


def failing():
    raise RuntimeError("no configuration")
'''


@pytest.fixture
def registered_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store whose query uses a function known only by its registered name, and a module
    ``cli_functions_<id>`` (importable from the current directory) with a factory of that registry."""
    (tmp_path / "svc").mkdir()
    module = f"cli_functions_{os.getpid()}_{id(tmp_path)}"
    (tmp_path / "svc" / f"{module}.py").write_text(textwrap.dedent(FUNCTIONS_MODULE))
    monkeypatch.chdir(tmp_path / "svc")  # the command imports --functions modules from the current directory
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("CLI_FUNCTIONS_MODULE", module)
    path = tmp_path / "store.db"
    with Engine(path, start=T0) as engine:
        engine.register_function("double", lambda x: x * 2)
        engine.create_stream("s")
        engine.create_subscription("q://doubled", Query.stream("s").map(engine.functions.resolve("double")))
    return path


def test_checkpoint_functions_accepts_a_registry_factory(
    registered_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = os.environ["CLI_FUNCTIONS_MODULE"]
    commits = read_store(registered_store).commits
    code, out, err = run(capsys, "checkpoint", "--functions", f"{module}:make_functions", str(registered_store))
    assert code == 0, err
    assert "recovered 1 streams, 0 definitions, 1 subscriptions" in out
    assert read_store(registered_store).commits == commits + 1


@pytest.mark.parametrize(("attribute", "words"), [
    ("not_a_registry", "returned a int, not a FunctionRegistry"),
    ("failing", "calling it raised RuntimeError: no configuration"),
])
def test_checkpoint_functions_factory_that_fails_is_one_line(
    attribute: str, words: str, registered_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = os.environ["CLI_FUNCTIONS_MODULE"]
    before = registered_store.read_bytes()
    code, _, err = run(capsys, "checkpoint", "--functions", f"{module}:{attribute}", str(registered_store))
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1
    assert registered_store.read_bytes() == before


# -- demo -----------------------------------------------------------------------------------------------------------


def inspect_commands(out: str) -> list[list[str]]:
    return [line.split()[1:] for line in out.splitlines() if line.strip().startswith("reaqtive inspect ")]


def test_demo_keeps_its_stores_and_prints_inspect_commands_that_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir = tmp_path / "demo"
    code, out, _ = run(capsys, "demo", "--events", "4000", "--every", "1000", "--store", str(store_dir))
    assert code == 0
    assert (store_dir / "crashed.db").is_file() and (store_dir / "reference.db").is_file()
    commands = inspect_commands(out)
    assert commands[0] == ["inspect", str(store_dir / "crashed.db")]
    assert {c[2] for c in commands[1:]} == {"--outputs", "--state", "--graph"}
    for command in commands:
        code, printed, err = run(capsys, *command)
        assert code == 0 and printed and err == "", command


def test_demo_without_store_keeps_a_new_directory_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # where mkdtemp makes the demo's directory
    code, out, _ = run(capsys, "demo", "--events", "4000", "--every", "1000")
    assert code == 0
    (kept,) = [p for p in tmp_path.iterdir() if p.name.startswith("reaqtive-demo-")]
    assert (kept / "crashed.db").is_file()
    assert f"the stores are kept in {kept}" in out
    assert inspect_commands(out)[0] == ["inspect", str(kept / "crashed.db")]


def test_make_demo_runs_reaqtive_demo() -> None:
    """The README's ``make demo`` is the command tested above."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert recipe is not None
    assert recipe.group(1).split() == ["$(BIN)/reaqtive", "demo"]
