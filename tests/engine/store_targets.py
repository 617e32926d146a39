"""The two stores an engine runs on, for tests that run on both: an SQLite file and a PostgreSQL database (a fresh
one of the throwaway server, from the ``postgres_dsn`` fixture), with raw SQL access to their tables — the access
damage, a bug or an attacker with write access would have. Both stores have the same tables and columns
(``reaqtive_blobs``, ``reaqtive_ingress``, ``reaqtive_egress``...), so a test's SQL serves both: it is written
with ``?`` parameters, which become ``%s`` on PostgreSQL."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

STORES = ("sqlite", "postgresql")


class StoreSql:
    """The engine target (a file path or a DSN) and raw SQL on its tables, each call its own committed
    transaction. Use it while no engine has the store open (as a forger of the file would)."""

    def __init__(self, target: Path | str) -> None:
        self.target = target

    @property
    def kind(self) -> str:
        return "sqlite" if isinstance(self.target, Path) else "postgresql"

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        if isinstance(self.target, Path):
            with closing(sqlite3.connect(self.target)) as db:
                return [tuple(row) for row in db.execute(sql, params).fetchall()]
        cursor = _postgres(self.target).execute(sql.replace("?", "%s"), params)
        return [tuple(row) for row in cursor.fetchall()] if cursor.description else []

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        if isinstance(self.target, Path):
            with closing(sqlite3.connect(self.target)) as db, db:
                db.execute(sql, params)
            return
        _postgres(self.target).execute(sql.replace("?", "%s"), params)

    def __repr__(self) -> str:
        return f"StoreSql({self.kind})"


_CONNECTIONS: dict[str, Any] = {}


def _postgres(dsn: str) -> Any:
    """One autocommit connection per database, kept for the next statement (hypothesis runs hundreds); the
    database's drop at the end of its test ends it."""
    import psycopg

    connection = _CONNECTIONS.get(dsn)
    if connection is None or connection.closed or connection.broken:
        connection = _CONNECTIONS[dsn] = psycopg.connect(dsn, autocommit=True)
    return connection


def store_sql(kind: str, tmp_path: Path, request: pytest.FixtureRequest, name: str = "s.db") -> StoreSql:
    """A new, empty store of ``kind`` for this test: a file in ``tmp_path`` or a fresh PostgreSQL database."""
    if kind == "sqlite":
        return StoreSql(tmp_path / name)
    return StoreSql(str(request.getfixturevalue("postgres_dsn")))
