"""The SQL of this package, read from its ``.sql`` files.

``queries.sql`` and ``locks.sql`` hold one statement per ``-- name --``
header (the procrastinate layout: a reader sees every statement in one
place; ``workhive.sqlfiles`` reads them, fragments and all);
``migrations/NNNN_*.sql`` take a schema from version NNNN-1 to NNNN.

Statements name the hive's objects schema-qualified, never through
``search_path`` (which a PgBouncer in transaction mode cannot keep, and
refuses as a startup parameter): the files write ``@hive.items``,
``@hive.now_s($1)``, ``nextval('@hive.item_ids')``, and ``statements(schema)``
fills in the quoted schema once, when a hive is opened. Migrations still run
under ``SET LOCAL search_path`` inside their own transaction (``schema.py``),
so they write plain names.
"""

from __future__ import annotations

import functools
import re
from importlib.resources import files

from workhive.sqlfiles import read

__all__ = ["HIVE", "migrations", "queries", "statements", "with_limit"]

#: what the SQL files write before every object of the hive's schema (tables, the sequence, now_s)
HIVE = "@hive."
_MIGRATION = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_PARAM = re.compile(r"\$(\d+)")


@functools.cache
def queries(file: str = "queries.sql") -> dict[str, str]:
    """Statement text by name from ``file`` (comments dropped, no trailing semicolon), ``@hive.`` unfilled."""
    return read("workhive_postgres", file)


@functools.cache
def statements(schema: str, file: str = "queries.sql") -> dict[str, str]:
    """The statements of ``file`` for the hive in ``schema``: each ``@hive.`` becomes ``"schema".``.

    >>> statements("jobs")["now"]
    'SELECT "jobs".now_s($1)'
    """
    # parse_url admits only these names; quoting one of them is then exact.
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"not a workhive schema name: {schema!r}")
    qualified = f'"{schema}".'
    return {name: text.replace(HIVE, qualified) for name, text in queries(file).items()}


@functools.cache
def migrations() -> tuple[tuple[int, str], ...]:
    """(version, script) for every migration, in order; versions run 1, 2, 3… without gaps."""
    found = []
    for entry in (files("workhive_postgres") / "sql" / "migrations").iterdir():
        match = _MIGRATION.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    if [v for v, _ in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"workhive-postgres migrations are not numbered 1..n: {[v for v, _ in found]}")
    return tuple(found)


@functools.lru_cache(maxsize=1024)
def with_limit(statement: str, limit: int) -> str:
    """``statement`` with its ``LIMIT $n`` written as the number ``limit``; ``$n`` must be its last parameter.

    ``$n`` may limit several scans (a claim limits each priority band and the whole);
    every use of it must be a ``LIMIT``.

    Called with every parameter but the last. A generic plan cannot see a parameter and
    costs ``LIMIT $n`` as a tenth of the rows it limits, so once the items table was
    analyzed PostgreSQL judged the generic claim dearer than a fresh plan and planned
    every claim anew (420 against 242 us of server time per claimed and completed item
    on a 100,000-item backlog). With the number in the text each limit is its own
    prepared statement (the worker runtime uses 1, 2, 4 ... 128) and keeps a generic plan.

    >>> with_limit("SELECT x FROM t WHERE a = $1 LIMIT $2", 5)
    'SELECT x FROM t WHERE a = $1 LIMIT 5'
    """
    if limit.__class__ is not int or limit < 0:
        raise ValueError(f"a limit is a non-negative int, got {limit!r}")
    last = max(int(n) for n in _PARAM.findall(statement))
    as_limit = rf"LIMIT \${last}\b"
    if len(re.findall(as_limit, statement)) != statement.count(f"${last}"):
        raise ValueError(f"the statement must use its last parameter ${last} only as a LIMIT")
    return re.sub(as_limit, f"LIMIT {limit}", statement)
