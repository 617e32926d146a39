"""The PostgreSQL checkpoint store's own rules (the contract is in test_stores.py): integrity checks on rows
changed behind its back, refusing what it did not write, errors that name the database and never the password."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reaqtive.state import (
    DamagedRowError,
    InvalidDsnError,
    NotAStoreError,
    PostgresCheckpointStore,
    StoreConnectionError,
    StoreError,
    UnknownStoreVersionError,
)
from reaqtive.state.postgres_store import describe_dsn, is_postgres_dsn


@pytest.fixture
def db(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test's own to the database, behind the store's back."""
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        yield connection


def tables(db: psycopg.Connection[Any]) -> set[str]:
    rows = db.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'").fetchall()
    return {name for (name,) in rows}


def committed(dsn: str, blobs: dict[tuple[str, str], bytes]) -> None:
    with PostgresCheckpointStore(dsn) as store, store.begin() as tx:
        for (category, key), value in blobs.items():
            tx.put(category, key, value)
        tx.commit()


# -- integrity ------------------------------------------------------------------------------------------------------


def test_a_value_changed_behind_the_store_fails_its_checksum_naming_the_row(
    postgres_dsn: str, db: psycopg.Connection[Any]
) -> None:
    committed(postgres_dsn, {("state", "a"): b"one", ("state", "b"): b"two"})
    db.execute("UPDATE reaqtive_blobs SET value = 'forged'::bytea WHERE key = 'a'")
    with PostgresCheckpointStore(postgres_dsn) as store:
        with pytest.raises(DamagedRowError, match="state/a") as caught:
            store.read()
        assert caught.value.table == "reaqtive_blobs" and caught.value.row == "state/a"
        lenient = store.read(strict=False)
    assert lenient.as_dict() == {"state": {"b": b"two"}}
    assert list(lenient.damaged) == [("state", "a")]


def test_rows_swapped_between_keys_both_fail_their_checksums(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    committed(postgres_dsn, {("state", "a"): b"one", ("state", "b"): b"two"})
    for change in ("key = 'swap' WHERE key = 'a'", "key = 'a' WHERE key = 'b'", "key = 'b' WHERE key = 'swap'"):
        db.execute(f"UPDATE reaqtive_blobs SET {change}")
    with PostgresCheckpointStore(postgres_dsn) as store:
        snapshot = store.read(strict=False)
    assert snapshot.as_dict() == {} and set(snapshot.damaged) == {("state", "a"), ("state", "b")}


def test_a_damaged_checkpoint_id_is_reported_as_corruption(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    committed(postgres_dsn, {("state", "a"): b"one"})
    db.execute("UPDATE reaqtive_meta SET value = '\"seven\"'::jsonb WHERE key = 'checkpoint_id'")
    with PostgresCheckpointStore(postgres_dsn) as store, pytest.raises(StoreError, match="checkpoint id"):
        store.read()


# -- what it did not write ------------------------------------------------------------------------------------------


def test_a_foreign_reaqtive_meta_table_is_refused_and_left_untouched(
    postgres_dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute("CREATE TABLE reaqtive_meta (key text PRIMARY KEY, value jsonb NOT NULL)")
    db.execute("INSERT INTO reaqtive_meta VALUES ('format', '\"something else\"')")
    with pytest.raises(NotAStoreError, match="left untouched"):
        PostgresCheckpointStore(postgres_dsn)
    assert tables(db) == {"reaqtive_meta"}


def test_a_store_of_an_unknown_version_is_refused_and_left_untouched(
    postgres_dsn: str, db: psycopg.Connection[Any]
) -> None:
    committed(postgres_dsn, {("state", "a"): b"one"})
    db.execute("UPDATE reaqtive_meta SET value = '99' WHERE key = 'schema_version'")
    before = db.execute("SELECT key, value FROM reaqtive_meta ORDER BY key").fetchall()
    with pytest.raises(UnknownStoreVersionError, match="99"):
        PostgresCheckpointStore(postgres_dsn)
    assert db.execute("SELECT key, value FROM reaqtive_meta ORDER BY key").fetchall() == before


def test_other_tables_of_the_database_are_no_obstacle(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute("CREATE TABLE orders (id int)")
    committed(postgres_dsn, {("state", "a"): b"one"})
    assert tables(db) == {"orders", "reaqtive_meta", "reaqtive_blobs"}


def test_a_failing_prepare_hook_leaves_the_database_empty(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    def prepare(connection: Any) -> None:
        connection.execute("CREATE TABLE reaqtive_extra (x int)")
        raise RuntimeError("the host's tables failed")

    with pytest.raises(RuntimeError, match="host's tables"):
        PostgresCheckpointStore(postgres_dsn, prepare=prepare)
    assert tables(db) == set()


def test_the_schema_named_in_the_url_holds_the_tables(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute("CREATE SCHEMA engine_a")
    committed(postgres_dsn + "?options=-csearch_path%3Dengine_a", {("state", "a"): b"one"})
    assert tables(db) == set()
    rows = db.execute("SELECT value FROM engine_a.reaqtive_blobs").fetchall()
    assert rows == [(b"one",)]


def test_a_missing_schema_is_a_clear_error(postgres_dsn: str) -> None:
    with pytest.raises(StoreError, match="no current schema"):
        PostgresCheckpointStore(postgres_dsn + "?options=-csearch_path%3Dnowhere")


# -- failures -------------------------------------------------------------------------------------------------------


def test_a_commit_whose_connection_is_killed_fails_and_keeps_the_previous_checkpoint(
    postgres_dsn: str, db: psycopg.Connection[Any]
) -> None:
    committed(postgres_dsn, {("state", "a"): b"one"})
    store = PostgresCheckpointStore(postgres_dsn)
    try:
        db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   "WHERE application_name LIKE 'reaqtive checkpoints%%' AND pid <> pg_backend_pid()")
        with store.begin() as tx:
            tx.put("state", "a", b"two")
            with pytest.raises(StoreConnectionError, match="checkpoint commit failed") as caught:
                tx.commit()
        assert describe_dsn(postgres_dsn) in str(caught.value)
    finally:
        store.close()
    with PostgresCheckpointStore(postgres_dsn) as again:
        snapshot = again.read()
    assert snapshot.checkpoint_id == 1 and snapshot.get("state", "a") == b"one"


def test_an_unreachable_server_is_a_connection_error_that_hides_the_password() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dsn = f"postgresql://app:s3cret@127.0.0.1:{port}/events?connect_timeout=5"
    with pytest.raises(StoreConnectionError, match="cannot connect to the PostgreSQL server") as caught:
        PostgresCheckpointStore(dsn)
    assert f"postgresql://app@127.0.0.1:{port}/events" in str(caught.value)
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize("dsn", ["postgresql://app@host/db?nosuchoption=1", "host=db port='unterminated"])
def test_a_malformed_dsn_is_refused_before_any_connection(dsn: str) -> None:
    with pytest.raises(InvalidDsnError, match="not a valid PostgreSQL connection string"):
        PostgresCheckpointStore(dsn)


def test_without_psycopg_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # an import of it now raises ImportError
    with pytest.raises(StoreError, match=r"pip install 'reaqtive\[postgres\]'"):
        PostgresCheckpointStore("postgresql://app@localhost/db")


def test_synchronous_must_be_a_known_setting() -> None:
    with pytest.raises(ValueError, match="synchronous"):
        PostgresCheckpointStore("postgresql://app@localhost/db", synchronous="SOMETIMES")


# -- naming ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("postgresql://app@db:5432/events", True),
        ("postgres://db/events", True),
        ("POSTGRESQL://db/events", True),
        ("host=db dbname=events user=app", True),
        ("dbname='my events'", True),
        ("state.db", False),
        ("dir/a=b.db", False),
        ("sslmode=require", False),  # nothing says where the database is
        (":memory:", False),
        (Path("postgresql://x"), False),  # a Path is always a file
        ("=".join(["a"] * 5000) + " !", False),  # decided in linear time (no backtracking)
    ],
)
def test_which_targets_name_a_postgres_database(target: object, expected: bool) -> None:
    assert is_postgres_dsn(target) is expected


def test_a_described_dsn_keeps_user_host_port_and_database_but_not_the_password() -> None:
    assert describe_dsn("postgresql://app:pw@db:6543/events?sslmode=require") == "postgresql://app@db:6543/events"
    assert describe_dsn("host=/run/pg dbname=ev password=pw") == "postgresql://%2Frun%2Fpg/ev"
