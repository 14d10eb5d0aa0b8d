"""The PostgreSQL backend's schema (the store's tables and the counters' unlogged
``rate_limits``): its versions, made or upgraded on the first connection of a process,
safely while other workers and hosts start at the same moment.

The tables are in ``sql/schema_<version>.sql``, one file per version, each applied in
order to a database that has not reached it (``token_store_schema`` holds the version);
``sql/functions.sql`` is replaced whenever a version is applied. The whole upgrade is one
transaction that holds an advisory lock: one process makes or upgrades the tables, the
others wait for it (up to the store's timeout: their first calls answer 503 until then),
then find the work done. A database at a newer version than this code is left as it is.
A change to ``sql/functions.sql`` alone is a new version too (its ``schema_<version>.sql``
may hold nothing), so that every database gets it.
"""

from __future__ import annotations

import functools
from importlib.resources import files

import psycopg

from app.backends.postgres.client import Schema
from app.backends.postgres.process import Connection

#: The version this code makes; the files of every version up to it are applied in order.
SCHEMA_VERSION = 5
#: The lock that the processes making or upgrading the schema take in turn.
SCHEMA_LOCK = "hashtext('token_store_schema')"


def read_sql(name: str) -> str:
    """Return the SQL file ``name`` of the backend's ``sql`` folder."""
    return files("app.backends.postgres").joinpath("sql", name).read_text(encoding="utf-8")


@functools.cache
def backend_schema(*, username_index: bool) -> Schema:
    """Return the backend's schema; ``username_index``: with the index the per-user limit reads.

    One object for each: the pools of a process are told apart by it (``shared_pool``).
    """
    return Schema(
        ready=functools.partial(schema_ready, username_index=username_index),
        create=functools.partial(create_schema, username_index=username_index),
    )


def schema_ready(connection: Connection, *, username_index: bool) -> bool:
    """Return whether the database needs nothing done: one statement."""
    try:
        row = connection.execute(
            "SELECT version, (SELECT indisvalid FROM pg_index WHERE indexrelid"
            " = to_regclass('refresh_tokens_by_username')) FROM token_store_schema"
        ).fetchone()
    except psycopg.errors.UndefinedTable:
        return False
    if row is None:
        return False
    version, indexed = row
    return bool(version >= SCHEMA_VERSION and (indexed or not username_index))


def create_schema(connection: Connection, *, username_index: bool) -> None:
    """Make the tables and functions, or bring them up to this version; keep every row."""
    with connection.transaction():
        connection.execute(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")  # within the timeout
        connection.execute("SET LOCAL statement_timeout = 0")  # an upgrade may take its time
        version = schema_version(connection)
        for step in range(version + 1, SCHEMA_VERSION + 1):
            connection.execute(read_sql(f"schema_{step}.sql").encode())
        if version < SCHEMA_VERSION:
            connection.execute(read_sql("functions.sql").encode())
            connection.execute("DELETE FROM token_store_schema")
            connection.execute(
                "INSERT INTO token_store_schema (version) VALUES (%s)", (SCHEMA_VERSION,)
            )
    if username_index:
        _create_username_index(connection)


def schema_version(connection: Connection) -> int:
    """Return the version the database's tables are at: 0 before any."""
    row = connection.execute("SELECT to_regclass('token_store_schema') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return 0
    version = connection.execute("SELECT max(version) FROM token_store_schema").fetchone()
    return int(version[0]) if version and version[0] is not None else 0


def _create_username_index(connection: Connection) -> None:
    """Make the username index if it is missing or was left invalid by a failed build.

    Only the per-user limit needs a user's tokens on every login: the index is made when
    the limit is set (CONCURRENTLY: logins go on meanwhile), and kept after.
    """
    connection.execute(f"SELECT pg_advisory_lock({SCHEMA_LOCK})")
    try:
        connection.execute("SET statement_timeout = 0")
        row = connection.execute(
            "SELECT indisvalid FROM pg_index"
            " WHERE indexrelid = to_regclass('refresh_tokens_by_username')"
        ).fetchone()
        if row is not None and not row[0]:
            connection.execute("DROP INDEX CONCURRENTLY IF EXISTS refresh_tokens_by_username")
        if row is None or not row[0]:
            connection.execute(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS refresh_tokens_by_username"
                " ON refresh_tokens (username)"
            )
    finally:
        connection.execute("RESET statement_timeout")
        connection.execute(f"SELECT pg_advisory_unlock({SCHEMA_LOCK})")
