"""The SQL of this package, read from its ``.sql`` files.

``queries.sql`` holds every statement the backend runs against the tables, one
per ``-- name --`` header (read by ``workhive.sqlfiles``, as PostgreSQL's are);
``migrations/NNNN_*.sql`` take a file from schema version NNNN-1 to NNNN,
one statement after another (``sqlite3`` runs one statement per call, and
``executescript`` would commit the migration's transaction half-way).
"""

from __future__ import annotations

import functools
import re
import sqlite3
from importlib.resources import files

from workhive.sqlfiles import read

__all__ = ["migrations", "queries", "statements"]

_MIGRATION = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


@functools.cache
def queries() -> dict[str, str]:
    """Statement text by name from ``sql/queries.sql`` (comments dropped, fragments expanded, no semicolon)."""
    return read("workhive_sqlite", "queries.sql")


def statements(script: str) -> tuple[str, ...]:
    """The statements of ``script`` in order, each without its trailing semicolon; comment-only text is dropped.

    A statement ends at the line where SQLite itself judges it complete, so a
    semicolon inside a string literal or a comment does not cut it.

    >>> statements("-- a table\\nCREATE TABLE t (x TEXT DEFAULT ';');\\nDROP TABLE t;\\n")
    ("-- a table\\nCREATE TABLE t (x TEXT DEFAULT ';')", 'DROP TABLE t')
    """
    found: list[str] = []
    pending: list[str] = []
    for line in script.splitlines():
        pending.append(line)
        text = "\n".join(pending)
        if sqlite3.complete_statement(text):
            found.append(text.strip().rstrip(";").rstrip())
            pending = []
    rest = "\n".join(line for line in pending if line.strip() and not line.strip().startswith("--"))
    if rest:
        raise RuntimeError(f"workhive-sqlite SQL ends in an unfinished statement: {rest[:200]!r}")
    return tuple(found)


@functools.cache
def migrations() -> tuple[tuple[int, tuple[str, ...]], ...]:
    """(version, statements) for every migration, in order; versions run 1, 2, 3… without gaps."""
    found = []
    for entry in (files("workhive_sqlite") / "sql" / "migrations").iterdir():
        match = _MIGRATION.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), statements(entry.read_text(encoding="utf-8"))))
    found.sort()
    if [v for v, _ in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"workhive-sqlite migrations are not numbered 1..n: {[v for v, _ in found]}")
    return tuple(found)
