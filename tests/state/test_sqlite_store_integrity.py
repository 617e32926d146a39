"""Integrity of the SQLite checkpoint store (issue 14): row checksums that bind a blob to its place, the migration
of a schema-1 file that keeps damage damaged, and typed errors for a damaged file."""

from __future__ import annotations

import shutil
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive.state import (
    SCHEMA_VERSION,
    DamagedRowError,
    SqliteCheckpointStore,
    StateChecksumError,
    StoreError,
    UnknownStoreVersionError,
    checksum,
)
from reaqtive.state.sqlite_store import columns_checksum, row_checksum

# The schema-1 layout, as released (copied here on purpose: the migration must keep reading exactly this).
V1_SCHEMA = (
    "CREATE TABLE reaqtive_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    "CREATE TABLE reaqtive_blobs (category TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, "
    "crc INTEGER NOT NULL, PRIMARY KEY (category, key)) WITHOUT ROWID",
)


def commit(store: SqliteCheckpointStore, rows: dict[tuple[str, str], bytes]) -> None:
    with store.begin() as tx:
        for (category, key), value in rows.items():
            tx.put(category, key, value)
        tx.commit()


def stored(path: Path) -> dict[tuple[str, str], tuple[bytes, int]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT category, key, value, crc FROM reaqtive_blobs").fetchall()
    db.close()
    return {(c, k): (bytes(v), crc) for c, k, v, crc in rows}


def execute(path: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(sql, params)
    db.close()


# -- the checksum ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 10, 300, 5000, 70_000, 100_000])
def test_the_row_checksum_is_the_crc_of_the_msgpack_row_also_for_long_values_fed_without_copying(size: int) -> None:
    value = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    expected = zlib.crc32(msgpack.packb(["state", "sub://7", value]))
    assert row_checksum("state", "sub://7", value) == expected
    assert columns_checksum(3, "s", None, value) == zlib.crc32(msgpack.packb([3, "s", None, value]))


def test_the_row_checksum_binds_the_value_to_its_category_and_key() -> None:
    value = b"state of one query"
    crcs = {row_checksum("state", "a", value), row_checksum("state", "b", value), row_checksum("other", "a", value),
            row_checksum("stat", "ea", value), row_checksum("state", "a", value + b"\x00")}
    assert len(crcs) == 5
    assert row_checksum("state", "a", value) != checksum(value), "not the value-only checksum of schema 1"


def test_text_read_back_from_invalid_utf8_still_gets_a_checksum_and_it_differs() -> None:
    damaged = b"sub://\xf3".decode("utf-8", "surrogateescape")
    assert row_checksum("state", damaged, b"v") != row_checksum("state", "sub://s", b"v")


# -- rows bound to their place ----------------------------------------------------------------------------------------


@pytest.fixture
def two_queries(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with SqliteCheckpointStore(path) as store:
        commit(store, {("state", "q://a"): b"state of a", ("state", "q://b"): b"state of b",
                       ("artifacts", "q://a"): b"{}"})
    return path


def test_two_state_rows_swapped_with_their_checksums_are_both_detected(two_queries: Path) -> None:
    rows = stored(two_queries)
    (va, ca), (vb, cb) = rows[("state", "q://a")], rows[("state", "q://b")]
    execute(two_queries, "UPDATE reaqtive_blobs SET value = ?, crc = ? WHERE key = 'q://a' AND category = 'state'",
            (vb, cb))
    execute(two_queries, "UPDATE reaqtive_blobs SET value = ?, crc = ? WHERE key = 'q://b' AND category = 'state'",
            (va, ca))
    with SqliteCheckpointStore(two_queries) as store:
        snapshot = store.read(strict=False)
        assert set(snapshot.damaged) == {("state", "q://a"), ("state", "q://b")}
        assert snapshot.get("artifacts", "q://a") == b"{}", "the rest is read"
        with pytest.raises(DamagedRowError, match=r"blob state/q://[ab] does not match its checksum") as caught:
            store.read()
    assert isinstance(caught.value, StateChecksumError) and isinstance(caught.value, StoreError)
    assert caught.value.table == "reaqtive_blobs" and caught.value.row in ("state/q://a", "state/q://b")
    assert stored(two_queries)[("state", "q://a")] == (vb, cb), "the damaged bytes stay in the file"


def test_a_row_copied_to_another_key_or_category_is_detected(two_queries: Path) -> None:
    execute(two_queries, "INSERT INTO reaqtive_blobs SELECT category, 'q://orphan', value, crc FROM reaqtive_blobs "
                         "WHERE key = 'q://a' AND category = 'state'")
    execute(two_queries, "INSERT INTO reaqtive_blobs SELECT 'templates', key, value, crc FROM reaqtive_blobs "
                         "WHERE key = 'q://b' AND category = 'state'")
    with SqliteCheckpointStore(two_queries) as store:
        snapshot = store.read(strict=False)
    assert set(snapshot.damaged) == {("state", "q://orphan"), ("templates", "q://b")}
    assert snapshot.get("state", "q://a") == b"state of a" and snapshot.get("state", "q://b") == b"state of b"


def test_a_key_damaged_into_invalid_utf8_is_a_damaged_row_not_a_failed_read(two_queries: Path) -> None:
    execute(two_queries, "UPDATE reaqtive_blobs SET key = CAST(X'713a2f2fe1' AS TEXT) WHERE key = 'q://a' "
                         "AND category = 'state'")  # "q://a" with its last byte's high bit flipped
    with SqliteCheckpointStore(two_queries) as store:
        snapshot = store.read(strict=False)
        assert snapshot.get("state", "q://b") == b"state of b"
        assert [key for _, key in snapshot.damaged] == ["q://\udce1"]
        with pytest.raises(DamagedRowError):
            store.read()


_COLUMNS = ("category", "key", "value", "crc")


@st.composite
def byte_flips(draw: st.DrawFn) -> tuple[str, int, int]:
    """A column of the row, a byte index into it (modulo its length) and a non-zero XOR mask."""
    return draw(st.sampled_from(_COLUMNS)), draw(st.integers(0, 10_000)), draw(st.integers(1, 255))


@pytest.fixture(scope="module")
def flip_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, SqliteCheckpointStore]]:
    path = tmp_path_factory.mktemp("flips") / "s.db"
    store = SqliteCheckpointStore(path, synchronous="OFF")
    commit(store, {("state", "q://target"): bytes(range(200)), ("state", "q://other"): b"other"})
    yield path, store
    store.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flip=byte_flips())
def test_any_single_byte_changed_in_any_column_of_a_blob_row_is_detected(
    flip: tuple[str, int, int], flip_store: tuple[Path, SqliteCheckpointStore]
) -> None:
    path, store = flip_store
    column, index, mask = flip
    (original,) = [row for (c, k), row in stored(path).items() if k == "q://target"]
    category, key, value, crc = "state", "q://target", original[0], original[1]
    if column == "crc":
        raw = bytearray(crc.to_bytes(8, "big", signed=True))
        raw[index % 8] ^= mask
        crc = int.from_bytes(raw, "big", signed=True)
        sql, param = "UPDATE reaqtive_blobs SET crc = ? WHERE key = 'q://target'", crc
    else:
        raw = bytearray({"category": category.encode(), "key": key.encode(), "value": value}[column])
        raw[index % len(raw)] ^= mask
        cast = "?" if column == "value" else "CAST(? AS TEXT)"  # text: the damaged bytes, valid UTF-8 or not
        sql, param = f"UPDATE reaqtive_blobs SET {column} = {cast} WHERE key = 'q://target'", bytes(raw)
    execute(path, sql, (param,))
    try:
        snapshot = store.read(strict=False)
        assert len(snapshot.damaged) == 1, f"{column}[{index}] ^= {mask} went unnoticed"
        assert snapshot.get("state", "q://other") == b"other"
        assert snapshot.get("state", "q://target") is None
    finally:
        db = sqlite3.connect(path)
        with db:
            db.execute("DELETE FROM reaqtive_blobs WHERE key != 'q://other'")
            db.execute("INSERT INTO reaqtive_blobs VALUES ('state', 'q://target', ?, ?)", (value, original[1]))
        db.close()


# -- migration from schema 1 ------------------------------------------------------------------------------------------


def build_v1(path: Path, rows: dict[tuple[str, str], bytes], damaged: dict[tuple[str, str], bytes]) -> None:
    """A schema-1 store by hand: ``rows`` with their (value-only) checksums, then ``damaged`` values written over
    some of them behind their old checksums."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    for statement in V1_SCHEMA:
        db.execute(statement)
    db.executemany("INSERT INTO reaqtive_meta VALUES (?, ?)",
                   [("format", "reaqtive-checkpoint-store"), ("schema_version", 1), ("checkpoint_id", 3)])
    db.executemany("INSERT INTO reaqtive_blobs VALUES (?, ?, ?, ?)",
                   [(c, k, v, checksum(v)) for (c, k), v in rows.items()])
    for (c, k), v in damaged.items():
        db.execute("UPDATE reaqtive_blobs SET value = ? WHERE category = ? AND key = ?", (v, c, k))
    db.close()


V1_ROWS = {("state", "q://a"): b"state of a", ("state", "q://b"): b"state of b" * 1000, ("artifacts", "q://a"): b"{}"}


def test_a_schema_1_store_is_migrated_in_place_and_its_damage_stays_damaged(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    build_v1(path, V1_ROWS, damaged={("state", "q://b"): b"STATE OF B" * 1000})
    before = stored(path)
    with SqliteCheckpointStore(path) as store:
        snapshot = store.read(strict=False)
        assert snapshot.checkpoint_id == 3
        assert snapshot.as_dict() == {"state": {"q://a": b"state of a"}, "artifacts": {"q://a": b"{}"}}
        assert set(snapshot.damaged) == {("state", "q://b")}, "never blessed by the migration"
    after = stored(path)
    with sqlite3.connect(path) as db:
        assert dict(db.execute("SELECT key, value FROM reaqtive_meta").fetchall())["schema_version"] == 2
    db.close()
    assert {k: v for k, (v, _) in after.items()} == {k: v for k, (v, _) in before.items()}, "bytes unchanged"
    damaged_crc = after[("state", "q://b")][1]
    assert damaged_crc < 0 and damaged_crc + 2**32 == before[("state", "q://b")][1], "the old crc, recoverable"
    assert after[("state", "q://a")][1] == row_checksum("state", "q://a", b"state of a")
    with SqliteCheckpointStore(path) as store:  # a second open changes nothing
        assert set(store.read(strict=False).damaged) == {("state", "q://b")}
    assert stored(path) == after


def test_a_schema_1_row_with_a_key_that_is_not_utf8_migrates_as_damaged(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    build_v1(path, V1_ROWS, damaged={})
    execute(path, "UPDATE reaqtive_blobs SET key = CAST(X'713a2f2fe1' AS TEXT) WHERE key = 'q://a' "
                  "AND category = 'state'")
    with SqliteCheckpointStore(path) as store:
        snapshot = store.read(strict=False)
    assert [key for _, key in snapshot.damaged] == ["q://\udce1"]
    assert snapshot.get("state", "q://b") == b"state of b" * 1000


def test_the_migration_is_one_transaction_with_the_hosts_tables(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    build_v1(path, V1_ROWS, damaged={("state", "q://b"): b"x"})
    before = path.read_bytes(), stored(path)

    def failing(connection: sqlite3.Connection) -> None:
        connection.execute("CREATE TABLE host_table (x)")
        raise RuntimeError("the host's migration failed")

    with pytest.raises(RuntimeError, match="the host's migration failed"):
        SqliteCheckpointStore(path, prepare=failing)
    assert stored(path) == before[1]
    with sqlite3.connect(path) as db:
        meta = dict(db.execute("SELECT key, value FROM reaqtive_meta").fetchall())
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert meta["schema_version"] == 1 and "host_table" not in tables


def test_a_store_of_a_newer_schema_is_refused_untouched_and_names_the_versions_it_reads(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    build_v1(path, V1_ROWS, damaged={})
    execute(path, "UPDATE reaqtive_meta SET value = 3 WHERE key = 'schema_version'")
    before = path.read_bytes()
    with pytest.raises(UnknownStoreVersionError, match=r"version 3 .* reads version 2 and migrates version 1"):
        SqliteCheckpointStore(path, prepare=lambda connection: None)
    assert path.read_bytes() == before
    assert SCHEMA_VERSION == 2


# -- a damaged file: typed errors only --------------------------------------------------------------------------------


def damaged_copies(source: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    data = source.read_bytes()
    page = 4096
    for fraction in (0.1, 0.3, 0.5, 0.7, 0.9):
        cut = int(len(data) * fraction)
        target = tmp_path / f"truncated-{fraction}.db"
        target.write_bytes(data[:cut])
        yield f"truncated at {cut}", target
    for start in range(0, len(data), page):
        target = tmp_path / f"overwritten-{start}.db"
        garbage = bytes((i * 131 + start) % 251 for i in range(page))
        target.write_bytes(data[:start] + garbage[: len(data) - start] + data[start + page:])
        yield f"page at {start} overwritten", target
    for start in range(100, len(data), 997):  # a few bytes inside pages
        target = tmp_path / f"scribbled-{start}.db"
        target.write_bytes(data[:start] + b"\xde\xad\xbe\xef" + data[start + 4:])
        yield f"4 bytes at {start} overwritten", target


def test_a_file_truncated_or_overwritten_midway_raises_store_errors_only(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    with SqliteCheckpointStore(source) as store:
        for i in range(6):
            commit(store, {("state", f"q://{j}"): bytes([i, j]) * 700 for j in range(8)})
    shutil.rmtree(tmp_path / "copies", ignore_errors=True)
    (tmp_path / "copies").mkdir()
    outcomes: dict[str, int] = {}
    for what, path in damaged_copies(source, tmp_path / "copies"):
        try:
            with SqliteCheckpointStore(path) as store:
                store.read(strict=False)
                commit(store, {("state", "q://new"): b"new"})
                store.read()
            outcomes["readable"] = outcomes.get("readable", 0) + 1
        except StoreError as error:  # anything else (a bare sqlite3.Error above all) fails the test
            assert str(path) in str(error), f"{what}: the message names the file"
            outcomes[type(error).__name__] = outcomes.get(type(error).__name__, 0) + 1
        except Exception as error:
            raise AssertionError(f"{what}: {type(error).__name__}: {error}") from error
    assert outcomes.get("StoreCorruptError", 0) > 0, outcomes
