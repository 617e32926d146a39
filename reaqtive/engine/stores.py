"""Which engine store a target names: a PostgreSQL database or an SQLite file (kept apart from both stores, which
it imports)."""

from __future__ import annotations

import os

from reaqtive.engine.database import EngineStore
from reaqtive.state import DEFAULT_CODEC, StateCodec
from reaqtive.state.postgres_store import is_postgres_dsn

__all__ = ["open_engine_store"]


def open_engine_store(
    target: str | os.PathLike[str], *, synchronous: str = "FULL", codec: StateCodec = DEFAULT_CODEC
) -> EngineStore:
    """The engine store ``target`` names: a PostgreSQL database for a ``postgresql://`` / ``postgres://`` URL or a
    libpq ``key=value`` DSN (:class:`~reaqtive.engine.postgres_database.PostgresEngineStore`, which needs
    ``reaqtive[postgres]``), else an SQLite file (or ``":memory:"``)."""
    if is_postgres_dsn(target):
        from reaqtive.engine.postgres_database import PostgresEngineStore  # only then: it needs psycopg's module

        return PostgresEngineStore(str(target), synchronous=synchronous, codec=codec)
    return EngineStore(target, synchronous=synchronous, codec=codec)
