"""The throwaway PostgreSQL server of reaqtive.testing.postgres: it starts on a free port, serves connections,
leaves nothing behind (after a stop, a failed start or an interpreter exit), and a missing server is a failure
with one instruction, never a skip."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from reaqtive.testing import postgres
from reaqtive.testing.postgres import (
    BINDIR_ENV,
    INSTRUCTION,
    PostgresCluster,
    PostgresClusterError,
    PostgresNotFoundError,
    throwaway_cluster,
)

REPO = Path(__file__).resolve().parents[2]


def _accepts_connections(port: int) -> bool:
    try:
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", connect_timeout=5):
            return True
    except psycopg.OperationalError:
        return False


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose; only the postmaster's parent (not us) could reap it.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def _postmaster_pid(cluster: PostgresCluster) -> int:
    return int((cluster.data_dir / "postmaster.pid").read_text().splitlines()[0])


@pytest.fixture
def made_dirs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Records the temporary directories the clusters make, to check they are gone."""
    made: list[Path] = []
    real = tempfile.mkdtemp

    def recording(*args: object, **kwargs: object) -> str:
        path = real(*args, **kwargs)  # type: ignore[call-overload]
        made.append(Path(path))
        return str(path)

    monkeypatch.setattr(tempfile, "mkdtemp", recording)  # the module's tempfile is this one
    yield made


def test_cluster_serves_connections_with_fast_but_commit_safe_settings(postgres_server: PostgresCluster) -> None:
    with psycopg.connect(postgres_server.dsn()) as connection:
        row = connection.execute(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit'), inet_server_addr()::text"
        ).fetchone()
    assert row == ("off", "on", "127.0.0.1/32")


def test_stop_ends_the_server_and_removes_every_file(made_dirs: list[Path]) -> None:
    cluster = PostgresCluster().start()
    port, pid = cluster.port, _postmaster_pid(cluster)
    assert _accepts_connections(port)

    cluster.stop()

    assert not _process_alive(pid)
    assert not _accepts_connections(port)
    assert made_dirs and not made_dirs[0].exists()
    assert not cluster.running
    cluster.stop()  # idempotent


def test_context_manager_stops_the_server_when_the_block_raises(made_dirs: list[Path]) -> None:
    with pytest.raises(KeyError), throwaway_cluster() as cluster:
        pid = _postmaster_pid(cluster)
        raise KeyError("the test body failed")
    assert not _process_alive(pid)
    assert not made_dirs[0].exists()


def test_each_database_is_fresh_and_drop_ends_its_open_sessions(postgres_server: PostgresCluster) -> None:
    first = postgres_server.create_database()
    second = postgres_server.create_database()
    assert first != second
    with psycopg.connect(first, autocommit=True) as connection:
        connection.execute("CREATE TABLE leftover (x int)")
    with psycopg.connect(second) as connection:
        assert connection.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'leftover'").fetchone() == (0,)

    lingering = psycopg.connect(first)  # a killed test can leave a session like this one
    try:
        postgres_server.drop_database(first.rsplit("/", 1)[1])
    finally:
        lingering.close()
    with psycopg.connect(postgres_server.dsn()) as connection:
        names = [row[0] for row in connection.execute("SELECT datname FROM pg_database")]
    assert first.rsplit("/", 1)[1] not in names
    assert second.rsplit("/", 1)[1] in names


def test_a_database_made_from_a_template_is_a_copy_that_changes_alone(postgres_server: PostgresCluster) -> None:
    original = postgres_server.create_database()
    with psycopg.connect(original, autocommit=True) as connection:
        connection.execute("CREATE TABLE t AS SELECT 1 AS x")
    copy = postgres_server.create_database(template=original.rsplit("/", 1)[1])
    with psycopg.connect(copy, autocommit=True) as connection:
        assert connection.execute("SELECT x FROM t").fetchall() == [(1,)]
        connection.execute("UPDATE t SET x = 2")
    with psycopg.connect(original) as connection:
        assert connection.execute("SELECT x FROM t").fetchall() == [(1,)]
    for dsn in (original, copy):
        postgres_server.drop_database(dsn.rsplit("/", 1)[1])


def test_postgres_dsn_is_an_empty_database_of_its_own(postgres_dsn: str, postgres_server: PostgresCluster) -> None:
    assert postgres_dsn.startswith(postgres_server.dsn("").rstrip("/"))
    with psycopg.connect(postgres_dsn) as connection:
        count = connection.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert count == (0,)


def test_start_retries_on_another_port_when_the_free_port_is_taken_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        real = postgres._free_port
        ports = iter([taken])
        monkeypatch.setattr(postgres, "_free_port", lambda: next(ports, None) or real())
        with throwaway_cluster() as cluster:
            assert cluster.port != taken
            assert _accepts_connections(cluster.port)


def test_two_clusters_run_side_by_side_on_different_ports() -> None:
    with throwaway_cluster() as one, throwaway_cluster() as two:
        assert one.port != two.port
        assert _accepts_connections(one.port) and _accepts_connections(two.port)


def test_a_server_that_cannot_start_leaves_nothing_and_reports_its_log(made_dirs: list[Path]) -> None:
    cluster = PostgresCluster(settings={"shared_buffers": "'not a size'"})
    with pytest.raises(PostgresClusterError, match=r"pg_ctl start failed[\s\S]*shared_buffers"):
        cluster.start()
    assert made_dirs and not any(path.exists() for path in made_dirs)
    assert not cluster.running


def test_a_failing_initdb_leaves_nothing_and_names_the_step(made_dirs: list[Path]) -> None:
    # Not under tmp_path: as root the tools run as the server's user, who cannot enter pytest's private dirs.
    bindir = Path(f"/tmp/reaqtive-fake-bin-{uuid.uuid4().hex}")
    bindir.mkdir(mode=0o755)
    try:
        for tool in ("initdb", "pg_ctl"):
            (bindir / tool).write_text("#!/bin/sh\necho 'disk full' >&2\nexit 1\n")
            (bindir / tool).chmod(0o755)
        with pytest.raises(PostgresClusterError, match=r"initdb failed \(exit 1\): disk full"):
            PostgresCluster(bindir).start()
    finally:
        shutil.rmtree(bindir)
    assert made_dirs and not made_dirs[0].exists()


def test_an_interpreter_exit_stops_a_cluster_left_running(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        from reaqtive.testing.postgres import PostgresCluster
        cluster = PostgresCluster().start()
        pid = (cluster.data_dir / "postmaster.pid").read_text().splitlines()[0]
        print(cluster.base_dir, cluster.port, pid)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    base, port, pid = done.stdout.split()
    assert not Path(base).exists()
    assert not _process_alive(int(pid))
    assert not _accepts_connections(int(port))


def _check(env_bindir: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, BINDIR_ENV: env_bindir}
    return subprocess.run(
        [sys.executable, "-m", "reaqtive.testing.postgres", "--check"],
        capture_output=True, text=True, cwd=REPO, env=env, check=False,
    )  # fmt: skip


def test_check_without_binaries_prints_one_instruction_and_exits_2(tmp_path: Path) -> None:
    done = _check(str(tmp_path))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == INSTRUCTION
    assert "apt-get install postgresql" in done.stderr and BINDIR_ENV in done.stderr


def test_check_with_binaries_exits_0() -> None:
    bindir = postgres.find_bindir()
    assert bindir is not None
    done = _check(str(bindir))
    assert (done.returncode, done.stderr) == (0, "")


def test_an_explicit_bindir_without_a_server_never_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BINDIR_ENV, str(tmp_path))
    assert postgres.find_bindir() is None
    with pytest.raises(PostgresNotFoundError, match="apt-get install postgresql"):
        PostgresCluster().start()


def test_the_fixture_fails_with_the_instruction_rather_than_skipping(tmp_path: Path) -> None:
    test_file = tmp_path / "test_needs_postgres.py"
    test_file.write_text("def test_uses_it(postgres_dsn):\n    pass\n")
    (tmp_path / "conftest.py").write_text("from tests.conftest import postgres_dsn, postgres_server\n")
    env = {**os.environ, BINDIR_ENV: str(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(test_file)],
        capture_output=True, text=True, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    assert "1 error" in done.stdout and "skipped" not in done.stdout
    assert "PostgreSQL server binaries not found" in done.stdout


def test_the_module_imports_without_psycopg() -> None:
    script = "import sys; sys.modules['psycopg'] = None; import reaqtive.testing.postgres as m; print(m.INSTRUCTION)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr


def test_as_root_without_the_server_user_the_check_says_what_to_create(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_user(name: str) -> object:
        raise KeyError(name)

    monkeypatch.setattr(postgres, "_running_as_root", lambda: True)
    monkeypatch.setattr(pwd, "getpwnam", no_such_user)
    with pytest.raises(PostgresNotFoundError, match="create the `postgres` OS user"):
        postgres.check()
    assert postgres.main(["--check"]) == 2
