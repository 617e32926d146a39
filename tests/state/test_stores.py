"""Checkpoint stores: atomic transactions, nothing visible before commit, faults, and SQLite's safety rules."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reaqtive.state import (
    CheckpointStore,
    InjectedFaultError,
    InMemoryCheckpointStore,
    NotAStoreError,
    PostgresCheckpointStore,
    SqliteCheckpointStore,
    StateChecksumError,
    StoreError,
    UnknownStoreVersionError,
)

StoreFactory = Callable[[], CheckpointStore]


@pytest.fixture(params=["memory", "sqlite", "sqlite shared memory", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory: for SQLite every call opens the same file (or shared in-memory database) again, for
    PostgreSQL the same database."""
    opened: list[CheckpointStore] = []
    memory = InMemoryCheckpointStore()
    uri = f"file:/reaqtive-test-{id(opened)}-{tmp_path.name}?vfs=memdb"

    def make() -> CheckpointStore:
        store: CheckpointStore
        if request.param == "memory":
            store = memory
        elif request.param == "sqlite":
            store = SqliteCheckpointStore(tmp_path / "s.db")
        elif request.param == "postgres":
            store = PostgresCheckpointStore(request.getfixturevalue("postgres_dsn"))
        else:  # the database lives while a connection to it is open: the factory keeps them all open
            store = SqliteCheckpointStore.shared_memory(uri)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def test_a_new_store_is_empty_at_checkpoint_zero(make_store: StoreFactory) -> None:
    snapshot = make_store().read()
    assert snapshot.checkpoint_id == 0 and snapshot.categories() == [] and snapshot.get("state", "x") is None


def test_commit_applies_puts_and_deletes_atomically(make_store: StoreFactory) -> None:
    store = make_store()
    with store.begin() as tx:
        tx.put("state", "a", b"1")
        tx.put("state", "b", b"2")
        tx.put("registry", "a", b"q")
        assert tx.commit() == 1
    with store.begin() as tx:
        tx.put("state", "a", b"11")
        tx.delete("state", "b")
        tx.delete("state", "never-existed")
        assert tx.commit() == 2
    snapshot = make_store().read()
    assert snapshot.checkpoint_id == 2
    assert snapshot.as_dict() == {"state": {"a": b"11"}, "registry": {"a": b"q"}}
    assert snapshot.keys("state") == ["a"] and list(snapshot.items("registry")) == [("a", b"q")]


def test_nothing_is_visible_before_commit(make_store: StoreFactory) -> None:
    store = make_store()
    tx = store.begin()
    tx.put("state", "a", b"1")
    assert store.read().get("state", "a") is None
    assert make_store().read().get("state", "a") is None
    tx.commit()
    assert store.read().get("state", "a") == b"1"


def test_rollback_and_leaving_the_block_without_commit_apply_nothing(make_store: StoreFactory) -> None:
    store = make_store()
    tx = store.begin()
    tx.put("state", "a", b"1")
    tx.rollback()
    with store.begin() as tx2:
        tx2.put("state", "b", b"2")
    assert store.read().as_dict() == {} and store.read().checkpoint_id == 0


def test_a_finished_transaction_refuses_changes_and_rollback_never_undoes_a_commit(make_store: StoreFactory) -> None:
    store = make_store()
    tx = store.begin()
    tx.put("state", "a", b"1")
    tx.commit()
    tx.rollback()
    assert store.read().get("state", "a") == b"1"
    with pytest.raises(StoreError, match="already committed or rolled back"):
        tx.put("state", "b", b"2")
    with pytest.raises(StoreError):
        tx.commit()


def test_clear_removes_a_category_but_keeps_later_puts(make_store: StoreFactory) -> None:
    store = make_store()
    with store.begin() as tx:
        for key in "abc":
            tx.put("state", key, key.encode())
        tx.put("other", "x", b"x")
        tx.commit()
    with store.begin() as tx:
        tx.put("state", "a", b"lost")
        tx.clear("state")
        tx.put("state", "d", b"d")
        tx.commit()
    assert store.read().as_dict() == {"state": {"d": b"d"}, "other": {"x": b"x"}}


def test_snapshots_do_not_change_after_later_commits(make_store: StoreFactory) -> None:
    store = make_store()
    with store.begin() as tx:
        tx.put("state", "a", b"1")
        tx.commit()
    before = store.read()
    with store.begin() as tx:
        tx.put("state", "a", b"2")
        tx.clear("other")
        tx.commit()
    assert before.get("state", "a") == b"1" and before.checkpoint_id == 1


def test_buffers_are_copied_on_put(make_store: StoreFactory) -> None:
    store = make_store()
    data = bytearray(b"abc")
    with store.begin() as tx:
        tx.put("state", "a", data)
        data[0] = ord("X")
        tx.commit()
    assert store.read().get("state", "a") == b"abc"


def test_names_are_checked(make_store: StoreFactory) -> None:
    tx = make_store().begin()
    with pytest.raises(TypeError):
        tx.put("", "a", b"")
    with pytest.raises(TypeError):
        tx.put("state", 1, b"")  # type: ignore[arg-type]


# -- in-memory fault injection --------------------------------------------------------------------------------


def committed(store: InMemoryCheckpointStore, key: str, value: bytes) -> None:
    with store.begin() as tx:
        tx.put("state", key, value)
        tx.commit()


def test_an_injected_commit_failure_applies_nothing() -> None:
    store = InMemoryCheckpointStore()
    committed(store, "a", b"1")
    store.fail_commits()
    tx = store.begin()
    tx.put("state", "a", b"2")
    with pytest.raises(InjectedFaultError, match="nothing was applied"):
        tx.commit()
    assert store.read().get("state", "a") == b"1" and store.read().checkpoint_id == 1
    committed(store, "a", b"3")  # only the next commit failed
    assert store.read().get("state", "a") == b"3" and store.commits == 2


def test_an_injected_failure_after_apply_is_ambiguous_like_a_lost_acknowledgement() -> None:
    store = InMemoryCheckpointStore()
    store.fail_commits(after_apply=True)
    tx = store.begin()
    tx.put("state", "a", b"1")
    with pytest.raises(InjectedFaultError, match="after the changes were applied"):
        tx.commit()
    assert store.read().get("state", "a") == b"1"


def test_injected_put_failures_match_category_and_key() -> None:
    store = InMemoryCheckpointStore()
    store.fail_puts(category="state", key="b", count=1)
    tx = store.begin()
    tx.put("state", "a", b"1")
    tx.put("other", "b", b"1")
    with pytest.raises(InjectedFaultError, match="state/b"):
        tx.put("state", "b", b"1")
    tx.put("state", "b", b"1")  # the fault was used up
    tx.commit()


def test_last_changes_tell_what_a_commit_wrote() -> None:
    store = InMemoryCheckpointStore()
    committed(store, "a", b"12345")
    assert store.last_changes is not None and store.last_changes.bytes_written == 5


# -- SQLite ---------------------------------------------------------------------------------------------------


def test_sqlite_store_uses_wal_and_a_schema_version(tmp_path: Path) -> None:
    with SqliteCheckpointStore(tmp_path / "s.db"):
        pass
    connection = sqlite3.connect(tmp_path / "s.db")
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert dict(connection.execute("SELECT key, value FROM reaqtive_meta").fetchall())["schema_version"] == 2
    connection.close()


def test_a_store_of_an_unknown_schema_version_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SqliteCheckpointStore(path) as store, store.begin() as tx:
        tx.put("state", "a", b"1")
        tx.commit()
    connection = sqlite3.connect(path)
    connection.execute("UPDATE reaqtive_meta SET value = 99 WHERE key = 'schema_version'")
    connection.commit()
    connection.close()
    before = path.read_bytes()
    with pytest.raises(UnknownStoreVersionError, match=r"schema version 99 is not supported .* reads version 2"):
        SqliteCheckpointStore(path)
    assert path.read_bytes() == before


def test_a_file_that_is_not_sqlite_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"precious notes, not a database" * 10)
    with pytest.raises(NotAStoreError, match="not an SQLite database"):
        SqliteCheckpointStore(path)
    assert path.read_bytes() == b"precious notes, not a database" * 10
    assert not (tmp_path / "notes.txt-wal").exists()


def test_a_foreign_sqlite_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE users (name TEXT)")
    connection.execute("INSERT INTO users VALUES ('ada')")
    connection.commit()
    connection.close()
    before = path.read_bytes()
    with pytest.raises(NotAStoreError, match="not a reaqtive checkpoint store"):
        SqliteCheckpointStore(path)
    assert path.read_bytes() == before


def test_an_empty_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with SqliteCheckpointStore(path) as store:
        assert store.read().checkpoint_id == 0


def test_a_damaged_row_fails_its_checksum_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SqliteCheckpointStore(path) as store, store.begin() as tx:
        tx.put("state", "sub://1", b"good bytes")
        tx.commit()
    connection = sqlite3.connect(path)
    connection.execute("UPDATE reaqtive_blobs SET value = X'00'")
    connection.commit()
    connection.close()
    with SqliteCheckpointStore(path) as store, pytest.raises(StateChecksumError, match="state/sub://1"):
        store.read()


def test_a_failing_sqlite_commit_rolls_back_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteCheckpointStore(path)
    with store.begin() as tx:
        tx.put("state", "a", b"1")
        tx.commit()
    connection = sqlite3.connect(path)
    connection.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON reaqtive_blobs WHEN NEW.key = 'poison' "
        "BEGIN SELECT RAISE(ABORT, 'poisoned'); END"
    )
    connection.commit()
    connection.close()
    tx = store.begin()
    tx.put("state", "a", b"2")
    tx.put("state", "poison", b"x")
    with pytest.raises(StoreError, match="rolled back: poisoned"):
        tx.commit()
    snapshot = store.read()
    assert snapshot.checkpoint_id == 1 and snapshot.as_dict() == {"state": {"a": b"1"}}
    store.close()


def test_two_connections_see_each_others_commits(tmp_path: Path) -> None:
    with SqliteCheckpointStore(tmp_path / "s.db") as writer, SqliteCheckpointStore(tmp_path / "s.db") as reader:
        with writer.begin() as tx:
            tx.put("state", "a", b"1")
            tx.commit()
        assert reader.read().get("state", "a") == b"1"


def test_synchronous_setting_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteCheckpointStore(tmp_path / "s.db", synchronous="sometimes")
