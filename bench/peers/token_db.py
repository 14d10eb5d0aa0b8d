"""The peers' refresh tokens in SQLite, the way the Flask tutorial's ``db.py`` does it.

One connection per request that needs it, opened on first use and closed at teardown.
The file is in WAL mode with ``synchronous = NORMAL``, the usual recommended setup, so
every gunicorn worker reads what any other one wrote.
"""

import sqlite3

import click
from flask import Flask, current_app, g

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS refresh_tokens (token TEXT PRIMARY KEY, username TEXT NOT NULL)"
)


def get_db() -> sqlite3.Connection:
    """Return this request's connection, opening it on first use."""
    if "db" not in g:
        g.db = sqlite3.connect(current_app.config["DATABASE"])
        g.db.execute("PRAGMA synchronous = NORMAL")
    return g.db


def close_db(exception: BaseException | None = None) -> None:
    db = g.pop("db", None)
    if db is not None:
        db.close()


def init_db() -> None:
    """Create the table and switch the file to WAL (a setting kept in the file)."""
    db = get_db()
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(SCHEMA)
    db.commit()


@click.command("init-db")
def init_db_command() -> None:
    """Create the refresh-token table."""
    init_db()
    click.echo("Initialized the database.")


def init_app(app: Flask) -> None:
    app.teardown_appcontext(close_db)
    app.cli.add_command(init_db_command)


def record(token: str, username: str) -> None:
    """Remember that ``token`` was issued to ``username``."""
    db = get_db()
    db.execute("INSERT INTO refresh_tokens (token, username) VALUES (?, ?)", (token, username))
    db.commit()


def owner_of(token: str) -> str | None:
    """Return the username ``token`` was issued to, or None."""
    row = (
        get_db().execute("SELECT username FROM refresh_tokens WHERE token = ?", (token,)).fetchone()
    )
    return row[0] if row else None


def forget(token: str) -> None:
    db = get_db()
    db.execute("DELETE FROM refresh_tokens WHERE token = ?", (token,))
    db.commit()
