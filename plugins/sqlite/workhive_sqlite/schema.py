"""The database schema, its version, and the steps that migrate older files.

The version lives in ``PRAGMA user_version`` (a header field, readable
without a table) and the file is tagged with ``PRAGMA application_id`` so a
SQLite file written by some other program is refused rather than altered.

To change the schema, append a step to ``MIGRATIONS``: the step at index
``i`` takes a file from version ``i`` to ``i + 1``. Steps run in one
``BEGIN IMMEDIATE`` transaction with the version bump, so a crash mid-way
leaves the file at the old version, untouched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from workhive.errors import SchemaVersionError, StorageUnavailable

__all__ = ["APPLICATION_ID", "MIGRATIONS", "SCHEMA_VERSION", "migrate"]

#: "WkHv" as a big-endian 32-bit integer: marks a file as a workhive store.
APPLICATION_ID = 0x576B4876

_V1: Sequence[str] = (
    # Item ids are the integer key (AUTOINCREMENT: never reused after a purge, so
    # an old id can never name a new item); the API shows them as strings.
    """
    CREATE TABLE items (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        pool TEXT NOT NULL,
        payload TEXT NOT NULL,
        state TEXT NOT NULL,
        priority INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        token INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        available_at REAL NOT NULL,
        claimed_by TEXT,
        lease_expires_at REAL,
        lease_seconds REAL,
        dedup_key TEXT,
        error TEXT,
        result TEXT,
        finished_at REAL,
        releases INTEGER NOT NULL DEFAULT 0
    )
    """,
    # Every index below is partial and covers one stage of an item's life, so a
    # claim or a completion touches few pages: each commit appends every page it
    # dirtied to the WAL, and pages written, not rows, bound the claim rate.
    #
    # Ready items in claim order: the next claimable item is the first entry
    # with available_at <= now, O(log n) however deep the backlog.
    "CREATE INDEX items_ready ON items (pool, priority DESC, available_at, id) WHERE state = 'pending'",
    # Held items: expired leases (claimable again), heartbeats and reaping scan
    # only what is in flight.
    "CREATE INDEX items_leases ON items (pool, lease_expires_at) WHERE state = 'claimed'",
    # Finished items: listing done/dead items and purging (dropped in version 2).
    "CREATE INDEX items_finished ON items (pool, state, id) WHERE state IN ('done', 'poisoned')",
    # Live dedup keys only, so a key reused by a recurring job stays one probe.
    # Not UNIQUE: requeue may legitimately revive a poisoned twin of a live key;
    # push checks for a live duplicate under the write lock instead.
    "CREATE INDEX items_dedup ON items (pool, dedup_key) "
    "WHERE dedup_key IS NOT NULL AND state IN ('pending', 'claimed')",
    """
    CREATE TABLE workers (
        worker_id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        pools TEXT NOT NULL,
        capabilities TEXT NOT NULL,
        status TEXT NOT NULL,
        registered_at REAL NOT NULL,
        last_heartbeat REAL NOT NULL,
        detail TEXT
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE shared_state (
        namespace TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        expires_at REAL,
        PRIMARY KEY (namespace, key)
    ) WITHOUT ROWID
    """,
)

_V2: Sequence[str] = (
    # Completing an item was three page writes: the row, its entry leaving
    # items_leases, and a new entry in items_finished. Finished items now have no
    # index on the hot path: done items none at all, poisoned ones (rare, and
    # listed and requeued by pool) a small one of their own. Each commit appends
    # every page it dirtied to the WAL, so this is a sixth of a claim+complete.
    "DROP INDEX items_finished",
    "CREATE INDEX items_poisoned ON items (pool, id) WHERE state = 'poisoned'",
    # Rows per pool, kept by push and purge (nothing else adds or deletes rows),
    # so stats() counts done items as total minus the indexed live and poisoned
    # ones, in O(live) rather than a table scan, and pools() is one small read.
    """
    CREATE TABLE pools (
        pool TEXT PRIMARY KEY,
        items INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    "INSERT INTO pools (pool, items) SELECT pool, count(*) FROM items GROUP BY pool",
)

_V3: Sequence[str] = (
    # Hive time's anchor for the current boot (see workhive_sqlite.clock): one row.
    """
    CREATE TABLE clock (
        id INTEGER PRIMARY KEY CHECK (id = 0),
        boot_id TEXT NOT NULL,
        offset REAL NOT NULL,
        seen REAL NOT NULL
    )
    """,
)

_V4: Sequence[str] = (
    # Fleet rate budgets (workhive.budgets): the theoretical arrival time of each
    # credential's budget dimension, on hive time.
    """
    CREATE TABLE budgets (
        key TEXT PRIMARY KEY,
        tat REAL NOT NULL
    ) WITHOUT ROWID
    """,
)

#: MIGRATIONS[i] takes a file from schema version i to i + 1.
MIGRATIONS: tuple[Sequence[str], ...] = (_V1, _V2, _V3, _V4)
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: str, begin: Callable[[], None] | None = None) -> int:
    """Bring the file at ``conn`` to ``SCHEMA_VERSION``; returns the version found before.

    ``begin`` takes the write lock (default: a plain ``BEGIN IMMEDIATE``).
    Raises ``SchemaVersionError`` for a file from a newer workhive and
    ``StorageUnavailable`` for a SQLite file that is not a workhive store.
    """
    if begin is None:
        conn.execute("BEGIN IMMEDIATE")
    else:
        begin()
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{path} has workhive schema version {version}, but this workhive-sqlite knows only up to "
                f"{SCHEMA_VERSION}: upgrade workhive-sqlite (pip install -U workhive-sqlite) or use another file",
                path=path,
                found=version,
                supported=SCHEMA_VERSION,
            )
        if app_id not in (0, APPLICATION_ID) or (version == 0 and _has_foreign_tables(conn)):
            raise StorageUnavailable(
                f"{path} is a SQLite database written by another program, not a workhive store; "
                "point the storage URL at a new file (e.g. sqlite:///.workhive/hive.db)",
                path=path,
            )
        for step in MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(version)


def _has_foreign_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchone()
    return bool(row[0])
