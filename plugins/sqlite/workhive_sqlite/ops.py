"""The storage operations as plain functions over one ``sqlite3`` connection.

Each call is one whole operation on one connection: the event loop's own
connection (busy timeout 0: SQLITE_BUSY goes straight back to the caller, who
retries or hands the operation on) or aiosqlite's, on its thread, whose busy
timeout makes SQLite itself wait for the write lock. Either way an async
caller pays at most one thread round trip per operation, never one per statement.

Why SQLite's own busy handler, which sleeps 1, 2, 5, 10… ms between tries,
while a write holds the lock for tens of microseconds: a waiter that sleeps
leaves the CPU to the processes that are working. Polling every 50 µs and
up was measured against it on 2 cores (bench/sqlite): the same items/s with
2 and 4 processes, and with 8 and 16 processes 0.31-0.39x raw sqlite3
against 0.56-0.62x, the pollers' failed tries eating the CPU the lock holder
needed.

Every write takes SQLite's write lock before it reads anything, so a claim
never reads a snapshot and then fails to upgrade it (``SQLITE_BUSY_SNAPSHOT``),
and no two processes can pick the same row: multi-statement writes run in
``BEGIN IMMEDIATE`` … ``COMMIT``; single-statement writes (the usual claim,
complete, fail, release, extend) run as one autocommit statement, for which
SQLite takes the write lock as the statement starts. ``complete_and_claim``
runs the complete and the claim statements in one ``BEGIN IMMEDIATE``
transaction: one commit per item of a worker loop instead of two. Reads run
in autocommit, each statement its own consistent WAL snapshot.
"""

from __future__ import annotations

import functools
import json
import operator
import random
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from workhive.errors import WorkerLost, WorkerNotFound
from workhive.ids import item_number
from workhive.models import (
    Ack,
    ItemState,
    NewItem,
    PoolStats,
    ReapedWorker,
    WorkerFilter,
    WorkerRecord,
    WorkerRegistration,
    WorkerStatus,
    WorkItem,
)

__all__ = ["Operations"]

T = TypeVar("T")

_COLS = (
    "id, pool, payload, state, priority, attempts, max_attempts, token, created_at, available_at, "
    "claimed_by, lease_expires_at, lease_seconds, dedup_key, error, result, finished_at, releases"
)
# What a claim reads back: the columns it did not just set itself. A claimable
# item never has a result or finished_at (done items are never claimable; every
# way back to pending clears finished_at). Converting seven fewer columns per
# row measured about 5 µs less per claim.
_CLAIMED_COLS = (
    "id, payload, priority, attempts, max_attempts, token, created_at, available_at, dedup_key, error, releases"
)
_STATES = {s.value: s for s in ItemState}
_WORKER_COLS = "worker_id, host, pid, pools, capabilities, status, registered_at, last_heartbeat, detail"
_WORKER_STATES = {s.value: s for s in WorkerStatus}

# The common claim: no expired lease in the pool, so the candidates are the
# best ready PENDING items, read off the items_ready index in claim order and
# stopping at ?3 rows: O(limit · log n) however deep the backlog. INDEXED BY
# pins that plan: the planner has no statistics to choose it by.
_READY = """
    SELECT id FROM items INDEXED BY items_ready
    WHERE pool = ?1 AND state = 'pending' AND available_at <= ?2
    ORDER BY priority DESC, available_at, id LIMIT ?3"""

_CLAIM_SET = """
UPDATE items SET
    state = 'claimed',
    available_at = CASE WHEN state = 'claimed' THEN lease_expires_at ELSE available_at END,
    claimed_by = ?4,
    attempts = attempts + 1,
    token = token + 1,
    lease_seconds = ?5,
    lease_expires_at = ?6"""

# Only while no lease in the pool has expired (one probe of items_leases,
# evaluated once per statement): an expired lease may come first in claim
# order, and it may have to be poisoned instead (see _claim).
_NO_EXPIRED = """
    AND NOT EXISTS (SELECT 1 FROM items INDEXED BY items_leases
                    WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2)"""

# `id = (…)` for one item avoids building the IN list's temporary table.
_CLAIM_ONE = f"{_CLAIM_SET}\nWHERE id = ({_READY}){_NO_EXPIRED}\nRETURNING {_CLAIMED_COLS}"
_CLAIM_READY = f"{_CLAIM_SET}\nWHERE id IN ({_READY}){_NO_EXPIRED}\nRETURNING {_CLAIMED_COLS}"

# With expired leases about: candidates are the best ready items and the best
# expired leases (each branch bounded by ?3 on its own index), merged. An
# expired lease counts as available at its expiry time, which becomes the
# item's available_at so the order is visible afterwards.
_CLAIM_ANY = f"""{_CLAIM_SET}
WHERE id IN (
    SELECT id FROM (
        SELECT id, priority, t FROM (
            SELECT id, priority, available_at AS t FROM items INDEXED BY items_ready
            WHERE pool = ?1 AND state = 'pending' AND available_at <= ?2
            ORDER BY priority DESC, available_at, id LIMIT ?3)
        UNION ALL
        SELECT id, priority, t FROM (
            SELECT id, priority, lease_expires_at AS t FROM items
            WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2
            ORDER BY priority DESC, lease_expires_at, id LIMIT ?3)
        ORDER BY 2 DESC, 3, 1 LIMIT ?3))
RETURNING {_CLAIMED_COLS}
"""

# When the common claim took nothing: whether the pool has a ready item and
# whether it has an expired lease.
_PEEK = """
SELECT
    (SELECT 1 FROM items INDEXED BY items_ready
     WHERE pool = ?1 AND state = 'pending' AND available_at <= ?2 LIMIT 1),
    (SELECT 1 FROM items INDEXED BY items_leases
     WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2 LIMIT 1)
"""

# An expired lease on an item with no attempts left is poisoned, not claimed:
# an item that kills its worker every time must not loop forever.
_POISON_EXPIRED = """
UPDATE items SET
    state = 'poisoned',
    error = 'lease expired after attempt ' || attempts || ' of ' || max_attempts
            || ' (worker ' || coalesce(claimed_by, '?') || ' stopped heartbeating or crashed)',
    finished_at = ?2,
    lease_expires_at = NULL, lease_seconds = NULL
WHERE pool = ?1 AND state = 'claimed' AND lease_expires_at <= ?2 AND attempts >= max_attempts
"""

_COMPLETE = """
UPDATE items SET state = 'done', result = ?1, finished_at = ?2, lease_expires_at = NULL, lease_seconds = NULL
WHERE id = ?3 AND pool = ?4 AND state = 'claimed' AND token = ?5 AND lease_expires_at > ?2
"""

_FAIL = """
UPDATE items SET
    state = CASE WHEN ?1 OR attempts >= max_attempts THEN 'poisoned' ELSE 'pending' END,
    error = ?2,
    available_at = CASE WHEN ?1 OR attempts >= max_attempts THEN available_at ELSE ?3 END,
    finished_at = CASE WHEN ?1 OR attempts >= max_attempts THEN ?4 ELSE NULL END,
    claimed_by = CASE WHEN ?1 OR attempts >= max_attempts THEN claimed_by ELSE NULL END,
    lease_expires_at = NULL, lease_seconds = NULL
WHERE id = ?5 AND pool = ?6 AND state = 'claimed' AND token = ?7 AND lease_expires_at > ?4
RETURNING state
"""

_RELEASE = """
UPDATE items SET state = 'pending', available_at = ?1, attempts = attempts - 1, releases = releases + 1,
    claimed_by = NULL, lease_expires_at = NULL, lease_seconds = NULL
WHERE id = ?2 AND pool = ?3 AND state = 'claimed' AND token = ?4 AND lease_expires_at > ?5
"""

# The new lease length becomes the item's: heartbeats then keep extending by it.
_EXTEND = """
UPDATE items SET lease_expires_at = ?1, lease_seconds = ?6
WHERE id = ?2 AND pool = ?3 AND state = 'claimed' AND token = ?4 AND lease_expires_at > ?5
"""

# Inserting many rows per statement binds and steps far less than one
# statement per row (about 3x faster per item); ?1 is the pool, ?2 the time.
_NUMBERED = re.compile(r"\?(\d+)")


@functools.lru_cache(maxsize=256)
def _positional(sql: str) -> tuple[str, Callable[[Sequence[Any]], tuple[Any, ...]]]:
    """``sql`` with ``?N`` placeholders as plain ``?``, and a picker that lays the
    arguments out in that order.

    The statements are written with ``?1``, ``?2``… because they use a value in
    several places (``now``, ``pool``). Python 3.12+ deprecates binding a
    sequence to numbered placeholders (3.14 refuses it), and binding a mapping
    instead costs about 4 µs more per statement (13 µs more per pushed item in a
    600-parameter insert), so each statement is rewritten once, here.
    """
    positions = [int(n) - 1 for n in _NUMBERED.findall(sql)]
    text = _NUMBERED.sub("?", sql)
    if len(positions) == 1:
        only = positions[0]
        return text, lambda args: (args[only],)
    return text, operator.itemgetter(*positions)


def _bind(sql: str, args: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
    """``conn.execute(*_bind(sql, args))`` for statements written with ``?N``."""
    text, pick = _positional(sql)
    return text, pick(args)


_INSERT_FIELDS = 6  # id, payload, priority, max_attempts, available_at, dedup_key
_INSERT_ROWS = 100


def _insert_sql(rows: int) -> str:
    tuples = []
    for k in range(rows):
        b = 3 + k * _INSERT_FIELDS
        tuples.append(f"(?{b},?1,?{b + 1},'pending',?{b + 2},?{b + 3},?2,?{b + 4},?{b + 5})")
    return (
        "INSERT INTO items (id, pool, payload, state, priority, max_attempts, created_at, available_at, dedup_key) "
        "VALUES " + ",".join(tuples)
    )


_INSERT_MANY = _insert_sql(_INSERT_ROWS)
#: How long a checkpoint keeps trying to take the write lock to restart the WAL (seconds).
_RESTART_PATIENCE = 0.5
#: Rows deleted per write transaction by purge, so workers wait at most a few ms.
_PURGE_CHUNK = 1000
_INSERT_ONE = _insert_sql(1)


def _insert(conn: sqlite3.Connection, pool: str, now: float, values: list[Any]) -> None:
    """Insert new PENDING rows given as flattened ``_INSERT_FIELDS`` tuples."""
    chunk = _INSERT_ROWS * _INSERT_FIELDS
    full = len(values) - len(values) % chunk
    for start in range(0, full, chunk):
        conn.execute(*_bind(_INSERT_MANY, [pool, now, *values[start : start + chunk]]))
    # The tail row by row, so only two statement texts ever reach the cache.
    for start in range(full, len(values), _INSERT_FIELDS):
        conn.execute(*_bind(_INSERT_ONE, [pool, now, *values[start : start + _INSERT_FIELDS]]))


# Rows per pool (see schema version 2): push adds, purge subtracts.
_COUNT_ROWS = """
INSERT INTO pools (pool, items) VALUES (?1, ?2) ON CONFLICT (pool) DO UPDATE SET items = items + excluded.items
"""

_LIVE_DUPLICATE = """
SELECT id FROM items INDEXED BY items_dedup
WHERE pool = ? AND dedup_key = ? AND state IN ('pending', 'claimed') ORDER BY id LIMIT 1
"""

# When the pool's next PENDING item comes due: the earliest available_at of
# each distinct priority (a loose scan of items_ready), so O(priorities · log n).
_NEXT_PENDING = """
WITH RECURSIVE levels(p) AS (
    SELECT max(priority) FROM items INDEXED BY items_ready WHERE pool = ?1 AND state = 'pending'
    UNION ALL
    SELECT (SELECT max(priority) FROM items INDEXED BY items_ready
            WHERE pool = ?1 AND state = 'pending' AND priority < levels.p)
    FROM levels WHERE levels.p IS NOT NULL)
SELECT min((SELECT min(available_at) FROM items INDEXED BY items_ready
            WHERE pool = ?1 AND state = 'pending' AND priority = levels.p))
FROM levels WHERE levels.p IS NOT NULL
"""


def _item(row: Sequence[Any]) -> WorkItem:
    return WorkItem(f"i{row[0]:016x}", row[1], row[2], _STATES[row[3]], *row[4:])


def _claimed(row: Sequence[Any], pool: str, worker_id: str, expiry: float, lease: float) -> WorkItem:
    """A just-claimed item from its ``_CLAIMED_COLS`` row and what the claim set."""
    r = row
    return WorkItem(
        f"i{r[0]:016x}", pool, r[1], ItemState.CLAIMED, r[2], r[3], r[4], r[5], r[6], r[7],
        worker_id, expiry, lease, r[8], r[9], None, None, r[10],
    )  # fmt: skip


def _worker(row: Sequence[Any]) -> WorkerRecord:
    return WorkerRecord(
        row[0],
        row[1],
        row[2],
        tuple(json.loads(row[3])),
        tuple(json.loads(row[4])),
        _WORKER_STATES[row[5]],
        row[6],
        row[7],
        row[8],
    )


class Operations:
    """The storage operations, bound to one raw connection and a clock.

    Call them only on the connection's thread. A write waits for the write
    lock as long as the connection's busy timeout says; with timeout 0 (the
    event loop's connection) SQLITE_BUSY is raised at once, with nothing changed.
    """

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], float]) -> None:
        self.conn = conn
        self.clock = clock

    def begin(self) -> None:
        """``BEGIN IMMEDIATE``: take the write lock, waiting as the connection's busy timeout says."""
        self.conn.execute("BEGIN IMMEDIATE")

    def _transaction(self, body: Callable[..., T], *args: Any) -> T:
        conn = self.conn
        if conn.in_transaction:
            # Part of a larger operation that already holds the write lock
            # (complete_and_claim): its transaction makes this all-or-nothing.
            return body(*args)
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body(*args)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    def _read(self, body: Callable[..., T], *args: Any) -> T:
        """Run ``body``'s reads on one snapshot (a deferred transaction never takes the write lock)."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            return body(*args)
        finally:
            conn.execute("COMMIT")

    def _write(self, body: Callable[..., T], *args: Any) -> T:
        """Run ``body`` in one immediate transaction (several statements, all or nothing)."""
        return self._transaction(body, *args)

    def write(self, body: Callable[..., T], *args: Any) -> T:
        """``_write`` for callers outside this class (the clock's anchor)."""
        return self._write(body, *args)

    # -- items --------------------------------------------------------------
    def push(self, pool: str, items: Sequence[NewItem]) -> list[str]:
        return self._write(self._push, pool, items)

    def _push(self, pool: str, items: Sequence[NewItem]) -> list[str]:
        conn = self.conn
        now = self.clock()
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'items'").fetchone()
        # Ids are assigned here, under the write lock, so a batch is inserted with
        # multi-row statements and every id is still reported in order.
        next_id = (row[0] if row else 0) + 1
        ids: list[str] = []
        values: list[Any] = []  # _INSERT_FIELDS per new row, flattened
        batch_keys: dict[str, str] = {}
        for item in items:
            key = item.dedup_key
            if key is not None:
                existing = batch_keys.get(key)
                if existing is None:
                    found = conn.execute(_LIVE_DUPLICATE, (pool, key)).fetchone()
                    existing = None if found is None else f"i{found[0]:016x}"
                if existing is not None:
                    ids.append(existing)
                    continue
                batch_keys[key] = f"i{next_id:016x}"
            values += (next_id, item.payload, item.priority, item.max_attempts, now + item.delay, key)
            ids.append(f"i{next_id:016x}")  # workhive.ids shape, inlined on the push path
            next_id += 1
        if values:
            _insert(conn, pool, now, values)
            conn.execute(*_bind(_COUNT_ROWS, (pool, len(values) // _INSERT_FIELDS)))
        return ids

    def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        return self._claim(pool, worker_id, limit, lease)

    def _claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        now = self.clock()
        conn = self.conn
        args = (pool, now, limit, worker_id, float(lease), now + lease)
        # The usual case is one autocommit statement: the claim is atomic on its
        # own, and saving BEGIN/COMMIT (and a look first) halves the statements.
        rows = conn.execute(*_bind(_CLAIM_ONE if limit == 1 else _CLAIM_READY, args)).fetchall()
        if not rows:
            # Nothing ready, or an expired lease in the pool: look which.
            ready, expired = conn.execute(*_bind(_PEEK, (pool, now))).fetchone()
            if expired:
                rows = self._transaction(self._claim_with_expired, args)
            elif ready:  # pushed by another process since the claim above
                rows = conn.execute(*_bind(_CLAIM_ONE if limit == 1 else _CLAIM_READY, args)).fetchall()
            if not rows:
                return []
        if len(rows) > 1:
            # RETURNING comes back in storage order; hand items out in claim order.
            rows.sort(key=lambda r: (-r[2], r[7], r[0]))
        lease = float(lease)
        expiry = now + lease
        return [_claimed(r, pool, worker_id, expiry, lease) for r in rows]

    def _claim_with_expired(self, args: tuple[Any, ...]) -> list[Any]:
        conn = self.conn
        conn.execute(*_bind(_POISON_EXPIRED, args))
        return conn.execute(*_bind(_CLAIM_ANY, args)).fetchall()

    def complete(self, pool: str, acks: Sequence[Ack]) -> list[bool]:
        if len(acks) == 1:  # one statement needs no transaction around it
            return self._complete(pool, acks)
        return self._write(self._complete, pool, acks)

    def _complete(self, pool: str, acks: Sequence[Ack]) -> list[bool]:
        now = self.clock()
        execute = self.conn.execute
        done = []
        for ack in acks:
            key = item_number(ack.item_id)
            done.append(
                key is not None and execute(*_bind(_COMPLETE, (ack.result, now, key, pool, ack.token))).rowcount == 1
            )
        return done

    def complete_and_claim(
        self, pool: str, ack: Ack, worker_id: str, limit: int, lease: float
    ) -> tuple[bool, list[WorkItem]]:
        """``complete`` one ack and, only if it was accepted, ``claim``: one transaction, one commit.

        A worker's loop otherwise pays two commits per item; the commit (the
        WAL append and the lock hand-over) is most of what a per-item write costs.
        """
        return self._write(self._complete_and_claim, pool, ack, worker_id, limit, lease)

    def _complete_and_claim(
        self, pool: str, ack: Ack, worker_id: str, limit: int, lease: float
    ) -> tuple[bool, list[WorkItem]]:
        if not self._complete(pool, (ack,))[0]:
            return False, []  # the transaction changed nothing; its commit writes nothing
        return True, self._claim(pool, worker_id, limit, lease)

    def fail(self, pool: str, item_id: str, token: int, error: str, retry_in: float, poison: bool) -> ItemState | None:
        key = item_number(item_id)
        if key is None:
            return None
        return self._fail(pool, key, token, error, retry_in, poison)

    def _fail(self, pool: str, key: int, token: int, error: str, retry_in: float, poison: bool) -> ItemState | None:
        now = self.clock()
        row = self.conn.execute(*_bind(_FAIL, (poison, error, now + retry_in, now, key, pool, token))).fetchone()
        return None if row is None else _STATES[row[0]]

    def release(self, pool: str, item_id: str, token: int, delay: float) -> bool:
        key = item_number(item_id)
        if key is None:
            return False
        return self._release(pool, key, token, delay)

    def _release(self, pool: str, key: int, token: int, delay: float) -> bool:
        now = self.clock()
        return self.conn.execute(*_bind(_RELEASE, (now + delay, key, pool, token, now))).rowcount == 1

    def extend(self, pool: str, item_id: str, token: int, lease: float) -> float | None:
        key = item_number(item_id)
        if key is None:
            return None
        return self._extend(pool, key, token, lease)

    def _extend(self, pool: str, key: int, token: int, lease: float) -> float | None:
        now = self.clock()
        expiry = now + lease
        return (
            expiry
            if self.conn.execute(*_bind(_EXTEND, (expiry, key, pool, token, now, float(lease)))).rowcount == 1
            else None
        )

    def get(self, pool: str, item_id: str) -> WorkItem | None:
        key = item_number(item_id)
        if key is None:
            return None
        row = self.conn.execute(f"SELECT {_COLS} FROM items WHERE id = ? AND pool = ?", (key, pool)).fetchone()
        return None if row is None else _item(row)

    def list_items(self, pool: str, state: ItemState, limit: int, offset: int) -> list[WorkItem]:
        rows = self.conn.execute(
            f"SELECT {_COLS} FROM items WHERE pool = ? AND state = ? ORDER BY id LIMIT ? OFFSET ?",
            (pool, state.value, limit, offset),
        ).fetchall()
        return [_item(r) for r in rows]

    def requeue(self, pool: str, item_ids: Sequence[str] | None) -> int:
        return self._write(self._requeue, pool, item_ids)

    def _requeue(self, pool: str, item_ids: Sequence[str] | None) -> int:
        now = self.clock()
        sql = """
            UPDATE items SET state = 'pending', available_at = ?1, attempts = 0, finished_at = NULL,
                claimed_by = NULL, lease_expires_at = NULL, lease_seconds = NULL
            WHERE pool = ?2 AND state = 'poisoned'"""
        if item_ids is None:
            return self.conn.execute(*_bind(sql, (now, pool))).rowcount
        # One primary-key update per id (dict.fromkeys: a repeated id counts once).
        keys = [k for k in (item_number(i) for i in dict.fromkeys(item_ids)) if k is not None]
        sql += " AND id = ?3"
        execute = self.conn.execute
        return sum(execute(*_bind(sql, (now, pool, key))).rowcount for key in keys)

    def release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> int:
        return sum(self._write(self._release_by_worker, pool, worker_id, spend_attempt))

    def _release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> tuple[int, int]:
        """Returns (released to pending, poisoned)."""
        now = self.clock()
        conn = self.conn
        where = "claimed_by = ?1 AND state = 'claimed'" + ("" if pool is None else " AND pool = ?3")
        args = (worker_id, now) if pool is None else (worker_id, now, pool)
        poisoned = 0
        if spend_attempt:
            sql = f"""UPDATE items INDEXED BY items_leases
                SET state = 'poisoned', finished_at = ?2, lease_expires_at = NULL, lease_seconds = NULL,
                    error = 'worker ' || ?1 || ' was lost holding attempt ' || attempts || ' of ' || max_attempts
                WHERE {where} AND attempts >= max_attempts"""
            poisoned = conn.execute(*_bind(sql, args)).rowcount
            refund = ""
        else:
            refund = ", attempts = max(attempts - 1, 0), releases = releases + 1"
        sql = f"""UPDATE items INDEXED BY items_leases SET state = 'pending', available_at = ?2, claimed_by = NULL,
                lease_expires_at = NULL, lease_seconds = NULL{refund}
            WHERE {where}"""
        released = conn.execute(*_bind(sql, args)).rowcount
        return released, poisoned

    def purge(self, pool: str, older_than: float) -> int:
        """Delete finished items; done items have no index, so this reads the whole table.

        The scan runs as a read (WAL readers never block writers), and the rows
        it found are deleted by key, re-checked, in short write transactions,
        so workers are held up for the deletes only, never for the scan.
        """
        cutoff = self.clock() - older_than
        found = [
            row[0]
            for row in self.conn.execute(
                "SELECT id FROM items WHERE pool = ? AND state IN ('done', 'poisoned') AND finished_at < ?",
                (pool, cutoff),
            )
        ]
        deleted = 0
        for start in range(0, len(found), _PURGE_CHUNK):
            deleted += self._write(self._purge_rows, pool, cutoff, found[start : start + _PURGE_CHUNK])
        return deleted

    def _purge_rows(self, pool: str, cutoff: float, keys: list[int]) -> int:
        execute = self.conn.execute
        sql = "DELETE FROM items WHERE id = ? AND pool = ? AND state IN ('done', 'poisoned') AND finished_at < ?"
        deleted = sum(execute(sql, (key, pool, cutoff)).rowcount for key in keys)
        execute(*_bind(_COUNT_ROWS, (pool, -deleted)))
        return deleted

    def stats(self, pool: str) -> PoolStats:
        # One read transaction, so the counts and the pool total agree.
        return self._read(self._stats, pool)

    def _stats(self, pool: str) -> PoolStats:
        now = self.clock()
        conn = self.conn
        # Counted per partial index (each item is in exactly one), never by a table scan.
        sql = (
            "SELECT count(*), count(CASE WHEN available_at <= ?2 THEN 1 END) FROM items INDEXED BY items_ready "
            "WHERE pool = ?1 AND state = 'pending'"
        )
        pending, ready = conn.execute(*_bind(sql, (pool, now))).fetchone()
        oldest = conn.execute(
            "SELECT min(available_at) FROM items WHERE pool = ? AND state = 'pending' AND available_at <= ?",
            (pool, now),
        ).fetchone()[0]
        # Expired leases not yet settled count as what they already are: ready
        # again since their expiry, or poisoned when their attempts are spent.
        expired_ready, expired_spent, expired_oldest = conn.execute(
            "SELECT count(CASE WHEN attempts < max_attempts THEN 1 END), "
            "count(CASE WHEN attempts >= max_attempts THEN 1 END), "
            "min(CASE WHEN attempts < max_attempts THEN lease_expires_at END) "
            "FROM items WHERE pool = ? AND state = 'claimed' AND lease_expires_at <= ?",
            (pool, now),
        ).fetchone()
        if expired_oldest is not None:
            oldest = expired_oldest if oldest is None else min(oldest, expired_oldest)
        claimed = conn.execute(
            "SELECT count(*) FROM items INDEXED BY items_leases WHERE pool = ? AND state = 'claimed'", (pool,)
        ).fetchone()[0]
        poisoned = conn.execute(
            "SELECT count(*) FROM items INDEXED BY items_poisoned WHERE pool = ? AND state = 'poisoned'", (pool,)
        ).fetchone()[0]
        # Done items have no index (completing must stay cheap): they are the rest.
        row = conn.execute("SELECT items FROM pools WHERE pool = ?", (pool,)).fetchone()
        total = 0 if row is None else row[0]
        return PoolStats(
            pool=pool,
            pending=ready + expired_ready,
            delayed=pending - ready,
            claimed=claimed - expired_ready - expired_spent,
            done=total - pending - claimed - poisoned,
            poisoned=poisoned + expired_spent,
            oldest_pending_at=oldest,
        )

    def pools(self) -> list[str]:
        return [row[0] for row in self.conn.execute("SELECT pool FROM pools WHERE items > 0 ORDER BY pool")]

    def next_due(self, pools: Sequence[str]) -> dict[str, float | None]:
        """For each pool, when its next item becomes claimable (maybe already past), or None if never."""
        conn = self.conn
        due: dict[str, float | None] = {}
        for pool in pools:
            pending = conn.execute(*_bind(_NEXT_PENDING, (pool,))).fetchone()[0]
            lease = conn.execute(
                "SELECT min(lease_expires_at) FROM items WHERE pool = ? AND state = 'claimed'", (pool,)
            ).fetchone()[0]
            times = [t for t in (pending, lease) if t is not None]
            due[pool] = min(times) if times else None
        return due

    def checkpoint(self, restart_above: int) -> tuple[int, int]:
        """Checkpoint the WAL without blocking writers; restart it if it is longer than ``restart_above`` frames.

        Returns (frames in the log, frames copied back) as SQLite reports them.
        A passive checkpoint copies what it can while writers keep appending,
        so under steady writes the log is never fully copied at one instant and
        SQLite never rewinds it. A RESTART takes the write lock (trying for up
        to ``_RESTART_PATIENCE`` seconds), copies the rest and makes the next
        writer start the log from the top.
        """
        conn = self.conn
        _, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if log > restart_above:
            # Writers take the lock for ~50 µs at a time, back to back: SQLite's own
            # busy handler (sleeping 1, 2, 5… ms) would mostly find it taken, so the
            # handler is off here and the RESTART is retried at a pace matched to the
            # lock. Each attempt that meets a writer still copies what it can, like a
            # passive one.
            waits = conn.execute("PRAGMA busy_timeout").fetchone()[0]
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                deadline = time.monotonic() + _RESTART_PATIENCE
                pause = 50e-6
                while True:
                    busy, log, done = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                    if not busy or time.monotonic() >= deadline:
                        break
                    time.sleep(pause * (0.5 + random.random()))
                    pause = min(pause * 2, 0.002)
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(waits)}")
        return int(log), int(done)

    def data_version(self) -> int:
        """Changes whenever another connection (any process) commits to the file."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def poll(self, last_version: int, pools: Sequence[str]) -> tuple[int, dict[str, float | None] | None]:
        """The data version, and each pool's next due time if someone else wrote since ``last_version``."""
        version = self.data_version()
        return version, (self.next_due(pools) if version != last_version else None)

    # -- workers ------------------------------------------------------------
    def register_worker(self, reg: WorkerRegistration) -> WorkerRecord:
        return self._write(self._register_worker, reg)

    def _register_worker(self, reg: WorkerRegistration) -> WorkerRecord:
        now = self.clock()
        row = self.conn.execute(
            f"""INSERT OR REPLACE INTO workers ({_WORKER_COLS}) VALUES (?, ?, ?, ?, ?, 'starting', ?, ?, NULL)
            RETURNING {_WORKER_COLS}""",
            (
                reg.worker_id,
                reg.host,
                reg.pid,
                json.dumps(list(reg.pools)),
                json.dumps(list(reg.capabilities)),
                now,
                now,
            ),
        ).fetchone()
        return _worker(row)

    def heartbeat(self, worker_id: str) -> WorkerRecord:
        return self._write(self._heartbeat, worker_id)

    def _heartbeat(self, worker_id: str) -> WorkerRecord:
        now = self.clock()
        conn = self.conn
        row = conn.execute("SELECT status FROM workers WHERE worker_id = ?", (worker_id,)).fetchone()
        if row is None:
            raise WorkerNotFound(f"no worker {worker_id!r} is registered; register it first", worker_id=worker_id)
        if row[0] == WorkerStatus.LOST.value:
            raise WorkerLost(
                f"worker {worker_id!r} was declared lost (no heartbeat in time) and its items were released; "
                "stop it and register again",
                worker_id=worker_id,
            )
        record = conn.execute(
            f"UPDATE workers SET last_heartbeat = ? WHERE worker_id = ? RETURNING {_WORKER_COLS}", (now, worker_id)
        ).fetchone()
        sql = """UPDATE items INDEXED BY items_leases SET lease_expires_at = ?1 + lease_seconds
            WHERE claimed_by = ?2 AND state = 'claimed' AND lease_expires_at > ?1"""
        conn.execute(*_bind(sql, (now, worker_id)))
        return _worker(record)

    def set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None:
        self._write(self._set_worker_status, worker_id, status, detail)

    def _set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None:
        changed = self.conn.execute(
            "UPDATE workers SET status = ?, detail = ? WHERE worker_id = ?", (status.value, detail, worker_id)
        ).rowcount
        if not changed:
            raise WorkerNotFound(f"no worker {worker_id!r} is registered; register it first", worker_id=worker_id)

    def get_worker(self, worker_id: str) -> WorkerRecord | None:
        row = self.conn.execute(f"SELECT {_WORKER_COLS} FROM workers WHERE worker_id = ?", (worker_id,)).fetchone()
        return None if row is None else _worker(row)

    def list_workers(self, filter: WorkerFilter) -> list[WorkerRecord]:
        now = self.clock()
        sql = f"SELECT {_WORKER_COLS} FROM workers"
        args: list[Any] = []
        if filter.host is not None:
            sql += " WHERE host = ?"
            args.append(filter.host)
        records = [_worker(r) for r in self.conn.execute(sql + " ORDER BY registered_at, worker_id", args)]
        return [r for r in records if filter.matches(r, now)]

    def reap(self, threshold: float) -> list[ReapedWorker]:
        return self._write(self._reap, threshold)

    def _reap(self, threshold: float) -> list[ReapedWorker]:
        now = self.clock()
        conn = self.conn
        silent = conn.execute(
            """SELECT worker_id, last_heartbeat FROM workers
            WHERE status NOT IN ('lost', 'stopped') AND last_heartbeat < ? ORDER BY last_heartbeat, worker_id""",
            (now - threshold,),
        ).fetchall()
        reaped = []
        for worker_id, last_heartbeat in silent:
            conn.execute(
                "UPDATE workers SET status = 'lost', detail = ? WHERE worker_id = ?",
                (f"no heartbeat for {now - last_heartbeat:.1f}s (threshold {threshold:g}s)", worker_id),
            )
            released, poisoned = self._release_by_worker(None, worker_id, True)
            reaped.append(ReapedWorker(worker_id, last_heartbeat, released, poisoned))
        return reaped

    # -- shared state -------------------------------------------------------
    def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        self._write(self._state_put, namespace, key, value, ttl)

    def _state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        now = self.clock()
        conn = self.conn
        # Expired keys of the namespace go now: the area stays small without a sweeper.
        conn.execute("DELETE FROM shared_state WHERE namespace = ? AND expires_at <= ?", (namespace, now))
        conn.execute(
            "INSERT OR REPLACE INTO shared_state (namespace, key, value, expires_at) VALUES (?, ?, ?, ?)",
            (namespace, key, value, None if ttl is None else now + ttl),
        )

    def state_get(self, namespace: str, key: str) -> str | None:
        row = self.conn.execute(
            "SELECT value FROM shared_state WHERE namespace = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)",
            (namespace, key, self.clock()),
        ).fetchone()
        return None if row is None else str(row[0])

    def state_scan(self, namespace: str) -> dict[str, str]:
        rows = self.conn.execute(
            "SELECT key, value FROM shared_state WHERE namespace = ? AND (expires_at IS NULL OR expires_at > ?) "
            "ORDER BY key",
            (namespace, self.clock()),
        )
        return {k: v for k, v in rows}

    def state_delete(self, namespace: str, key: str) -> bool:
        return self._write(self._state_delete, namespace, key)

    def _state_delete(self, namespace: str, key: str) -> bool:
        now = self.clock()
        row = self.conn.execute(
            "DELETE FROM shared_state WHERE namespace = ? AND key = ? RETURNING expires_at", (namespace, key)
        ).fetchone()
        return row is not None and (row[0] is None or row[0] > now)
