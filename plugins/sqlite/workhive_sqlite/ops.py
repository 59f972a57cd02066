"""The storage operations as plain functions over one ``sqlite3`` connection.

Each call is one whole operation on one connection: the event loop's own
connection (busy timeout 0: SQLITE_BUSY goes straight back to the caller, who
retries or hands the operation on) or aiosqlite's, on its thread, whose busy
timeout makes SQLite itself wait for the write lock. Either way an async
caller pays at most one thread round trip per operation, never one per statement.

Why not a busy loop of our own: polling every 50 µs and up was measured
against SQLite's busy handler on 2 cores (bench/sqlite): the same items/s with
2 and 4 processes, and with 8 and 16 processes 0.31-0.39x raw sqlite3 against
0.56-0.62x, the pollers' failed tries eating the CPU the lock holder needed.
The busy handler's sleeps (1, 2, 5, 10… ms) leave the lock idle instead behind
a long write, so the backend queues writers behind those before they get here
(``workhive_sqlite.gate``). Behind a short write, or a writer that does not take
the gate (another program, a checkpoint), a write on the thread still waits in
the busy handler: there a queue's hand-overs cost more than the sleeps.

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
    StepRecord,
    WorkerFilter,
    WorkerRecord,
    WorkerRegistration,
    WorkerStatus,
    WorkItem,
)
from workhive_sqlite.sqlfiles import queries

__all__ = ["Operations"]

T = TypeVar("T")

_STATES = {s.value: s for s in ItemState}
_WORKER_STATES = {s.value: s for s in WorkerStatus}

# Every statement comes from sql/queries.sql (what each does is written there),
# read once at import: the hot path only looks a module constant up.
_Q = queries()
_CLAIM_ONE = _Q["claim_one"]
_CLAIM_READY = _Q["claim_ready"]
_CLAIM_ANY = _Q["claim_any"]
_PEEK = _Q["peek"]
_POISON_EXPIRED = _Q["poison_expired"]
_COMPLETE = _Q["complete"]
_COMPLETE_QUIET = _Q["complete_quiet"]
_COUNTS_CLAIMS = _Q["group_counts_claims"]
_FAIL = _Q["fail"]
_RELEASE = _Q["release"]
_EXTEND = _Q["extend"]
_LAST_ITEM_ID = _Q["last_item_id"]
_LIVE_DUPLICATE = _Q["live_duplicate"]
_COUNT_ROWS = _Q["count_rows"]
_NEXT_PENDING = _Q["next_pending"]
_NEXT_LEASE_EXPIRY = _Q["next_lease_expiry"]
_GET_ITEM = _Q["get_item"]
_LIST_ITEMS = _Q["list_items"]
_REQUEUE_ALL = _Q["requeue_all"]
_REQUEUE_ONE = _Q["requeue_one"]
#: release_by_worker's statements: poisoning by (one pool only), releasing by (spend the attempt, one pool only).
_POISON_LOST = {False: _Q["poison_lost_worker"], True: _Q["poison_lost_worker_in_pool"]}
_RELEASE_LOST = {
    (True, False): _Q["release_worker"],
    (True, True): _Q["release_worker_in_pool"],
    (False, False): _Q["refund_worker"],
    (False, True): _Q["refund_worker_in_pool"],
}

_GROUP_POOL = _Q["group_pool"]


def _groups() -> Any:
    """``workhive_sqlite.groups``, imported on first use (it imports this module)."""
    from workhive_sqlite import groups

    return groups


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


# Inserting many rows per statement binds and steps far less than one
# statement per row (about 3x faster per item); ?1 is the pool, ?2 the time.
_INSERT_FIELDS = 7  # id, payload, priority, max_attempts, available_at, dedup_key, group
_INSERT_ROWS = 100


def _insert_sql(rows: int) -> str:
    """``insert_items`` with its VALUES group repeated ``rows`` times, the k-th numbered on by k rows.

    Generated, not written out in the SQL file: 100 groups are 700 parameters no
    reader checks by eye. Runs at import only (two texts, one and 100 rows).
    """
    one = _Q["insert_items"]
    head, values, group = one.rpartition(" VALUES ")
    own = sorted({int(n) for n in _NUMBERED.findall(group)} - {1, 2})
    if not values or own != list(range(3, 3 + _INSERT_FIELDS)) or (group[:1], group[-1:]) != ("(", ")"):
        raise RuntimeError(f"queries.sql: insert_items must end in one VALUES group of ?1, ?2 and ?3..?9: {one!r}")

    def numbered(k: int) -> str:
        """The VALUES group of the k-th row: its own parameters moved on by k rows, ?1 and ?2 shared."""
        return _NUMBERED.sub(lambda m: m[0] if int(m[1]) <= 2 else f"?{int(m[1]) + k * _INSERT_FIELDS}", group)

    return head + values + ",".join(numbered(k) for k in range(rows))


_INSERT_MANY = _insert_sql(_INSERT_ROWS)
_INSERT_ONE = _insert_sql(1)
#: How long a checkpoint keeps trying to take the write lock to restart the WAL (seconds).
_RESTART_PATIENCE = 0.5
#: Rows deleted per write transaction by purge, so workers wait at most a few ms.
_PURGE_CHUNK = 1000


def _insert(conn: sqlite3.Connection, pool: str, now: float, values: list[Any]) -> None:
    """Insert new PENDING rows given as flattened ``_INSERT_FIELDS`` tuples."""
    chunk = _INSERT_ROWS * _INSERT_FIELDS
    full = len(values) - len(values) % chunk
    for start in range(0, full, chunk):
        conn.execute(*_bind(_INSERT_MANY, [pool, now, *values[start : start + chunk]]))
    # The tail row by row, so only two statement texts ever reach the cache.
    for start in range(full, len(values), _INSERT_FIELDS):
        conn.execute(*_bind(_INSERT_ONE, [pool, now, *values[start : start + _INSERT_FIELDS]]))


def _item(row: Sequence[Any]) -> WorkItem:
    # grp '' is a grouped pool's ungrouped items (workhive_sqlite.groups): None, as NULL.
    r = row
    return WorkItem(
        f"i{r[0]:016x}", r[1], r[2], _STATES[r[3]], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
        r[14], r[15], r[16], r[17], r[18] or None,
    )  # fmt: skip


def claim_order(row: Sequence[Any]) -> tuple[int, float, int]:
    """The sort key of a claimed row (``claimed_columns``) in claim order: priority, available_at, id.

    RETURNING hands rows back in storage order; claims hand them out in this one.
    """
    return -row[2], row[7], row[0]


def _claimed(row: Sequence[Any], pool: str, worker_id: str, expiry: float, lease: float) -> WorkItem:
    """A just-claimed item from its row (``claimed_columns`` in queries.sql) and what the claim set."""
    r = row
    return WorkItem(
        f"i{r[0]:016x}", pool, r[1], ItemState.CLAIMED, r[2], r[3], r[4], r[5], r[6], r[7],
        worker_id, expiry, lease, r[8], r[9], None, None, r[10], r[11] or None,
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

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], float], *, optimistic: bool = False) -> None:
        self.conn = conn
        self.clock = clock
        #: Whether a claim by turns may choose its turns before it takes the write lock
        #: (``optimistic_write``): only on a connection that never waits for the lock
        #: (busy timeout 0, the event loop's), whose caller runs a busy operation again elsewhere.
        self.optimistic = optimistic
        #: Claims by turns chosen again on this connection after another connection's commit made
        #: their snapshot stale (``workhive_sqlite.groups.claim_by_turns``): one retry each at most.
        self.stale_retries = 0
        #: Pools known to use groups (workhive_sqlite.groups). A pool never stops using
        #: them, so what another process did is found once (peek) and then remembered.
        self.grouped: set[str] = set()

    def begin(self) -> None:
        """``BEGIN IMMEDIATE``: take the write lock, waiting as the connection's busy timeout says."""
        self.conn.execute("BEGIN IMMEDIATE")

    def _transaction(self, body: Callable[..., T], *args: Any) -> T:
        return self._in_transaction("BEGIN IMMEDIATE", body, *args)

    def _in_transaction(self, begin: str, body: Callable[..., T], *args: Any) -> T:
        """Run ``body`` in a transaction opened by ``begin``, committed if it returns, else rolled back."""
        conn = self.conn
        if conn.in_transaction:
            # Part of a larger operation that already holds the write lock
            # (complete_and_claim): its transaction makes this all-or-nothing.
            return body(*args)
        conn.execute(begin)
        try:
            result = body(*args)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    def optimistic_write(self, body: Callable[..., T], *args: Any) -> T:
        """Run ``body`` in a deferred transaction: its reads need no lock, its first write takes it.

        In WAL mode that first write fails with SQLITE_BUSY (``BUSY_SNAPSHOT``) if any
        other connection committed since this one's reads began, or holds the lock now;
        the transaction is then rolled back, nothing changed, and the error goes to the
        caller. So when it succeeds, nothing moved between the reads and the writes, as
        under ``BEGIN IMMEDIATE``, while the lock was held only for the writes.
        """
        return self._in_transaction("BEGIN", body, *args)

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

    def read(self, body: Callable[..., T], *args: Any) -> T:
        """``_read`` for callers outside this class (the group report)."""
        return self._read(body, *args)

    # -- items --------------------------------------------------------------
    def push(self, pool: str, items: Sequence[NewItem]) -> list[str]:
        return self._write(self._push, pool, items)

    def _push(self, pool: str, items: Sequence[NewItem]) -> list[str]:
        conn = self.conn
        now = self.clock()
        row = conn.execute(_LAST_ITEM_ID).fetchone()
        # Ids are assigned here, under the write lock, so a batch is inserted with
        # multi-row statements and every id is still reported in order.
        next_id = (row[0] if row else 0) + 1
        ids: list[str] = []
        values: list[Any] = []  # _INSERT_FIELDS per new row, flattened
        batch_keys: dict[str, str] = {}
        grouped = self._push_groups(pool, items)
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
            group = None if grouped is None else (item.group or grouped)
            values += (next_id, item.payload, item.priority, item.max_attempts, now + item.delay, key, group)
            ids.append(f"i{next_id:016x}")  # workhive.ids shape, inlined on the push path
            next_id += 1
        if values:
            _insert(conn, pool, now, values)
            conn.execute(*_bind(_COUNT_ROWS, (pool, len(values) // _INSERT_FIELDS)))
        return ids

    def _push_groups(self, pool: str, items: Sequence[NewItem]) -> str | None:
        """None if ``pool`` does not use groups (its items keep grp NULL), else the group of ungrouped items ('').

        A grouped item makes the pool use groups. One probe per push otherwise,
        as another process may have made it use them.
        """
        if pool not in self.grouped:
            if any(item.group is not None for item in items):
                _groups().use_groups(self, pool)
            elif self.conn.execute(_GROUP_POOL, (pool,)).fetchone() is None:
                return None
            else:
                self.grouped.add(pool)
        return ""

    def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        return self._claim(pool, worker_id, limit, lease)

    def _claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        if pool in self.grouped:
            return _groups().claim_by_turns(self, pool, worker_id, limit, lease)
        now = self.clock()
        conn = self.conn
        args = (pool, now, limit, worker_id, float(lease), now + lease)
        # The usual case is one autocommit statement: the claim is atomic on its
        # own, and saving BEGIN/COMMIT (and a look first) halves the statements.
        rows = conn.execute(*_bind(_CLAIM_ONE if limit == 1 else _CLAIM_READY, args)).fetchall()
        if not rows:
            # Nothing ready, or an expired lease in the pool: look which.
            ready, expired, grouped = conn.execute(*_bind(_PEEK, (pool, now))).fetchone()
            if grouped:  # the pool uses groups (maybe since another process's call): claim by turns
                self.grouped.add(pool)
                return _groups().claim_by_turns(self, pool, worker_id, limit, lease)
            if expired:
                rows = self._transaction(self._claim_with_expired, args)
                if not rows and conn.execute(_GROUP_POOL, (pool,)).fetchone() is not None:
                    # Grouped by another process since the peek: claim_any refused it.
                    self.grouped.add(pool)
                    return _groups().claim_by_turns(self, pool, worker_id, limit, lease)
            elif ready:  # pushed by another process since the claim above
                rows = conn.execute(*_bind(_CLAIM_ONE if limit == 1 else _CLAIM_READY, args)).fetchall()
            if not rows:
                return []
        if len(rows) > 1:
            # RETURNING comes back in storage order; hand items out in claim order.
            rows.sort(key=claim_order)
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
        # The groups' trigger has work in a completion only where the pool counts its claims in
        # flight, and starting it cost about a quarter of a completion (migration 0012). Inside a transaction
        # the pool's flag, read once, holds for every ack (set_group_limit writes it under the
        # same lock; a deferred transaction's first write fails if anything moved since its
        # read): complete_quiet then leaves the trigger out. One autocommit statement has no
        # read before it to lean on, and goes through the trigger.
        statement = _COMPLETE
        if self.conn.in_transaction:
            counted = execute(_COUNTS_CLAIMS, (pool,)).fetchone()
            if counted is None or not counted[0]:
                statement = _COMPLETE_QUIET
        done = []
        for ack in acks:
            key = item_number(ack.item_id)
            done.append(
                key is not None and execute(*_bind(statement, (ack.result, now, key, pool, ack.token))).rowcount == 1
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
        row = self.conn.execute(_GET_ITEM, (key, pool)).fetchone()
        return None if row is None else _item(row)

    def list_items(self, pool: str, state: ItemState, limit: int, offset: int) -> list[WorkItem]:
        rows = self.conn.execute(_LIST_ITEMS, (pool, state.value, limit, offset)).fetchall()
        return [_item(r) for r in rows]

    def requeue(self, pool: str, item_ids: Sequence[str] | None) -> int:
        return self._write(self._requeue, pool, item_ids)

    def _requeue(self, pool: str, item_ids: Sequence[str] | None) -> int:
        now = self.clock()
        if item_ids is None:
            return self.conn.execute(*_bind(_REQUEUE_ALL, (now, pool))).rowcount
        # One primary-key update per id (dict.fromkeys: a repeated id counts once).
        keys = [k for k in (item_number(i) for i in dict.fromkeys(item_ids)) if k is not None]
        execute = self.conn.execute
        return sum(
            execute(*_bind(_REQUEUE_ONE, (now, pool, key))).rowcount
            or execute(*_bind(_Q["requeue_cancelled_one"], (now, pool, key))).rowcount
            for key in keys
        )

    def cancel(self, pool: str, item_ids: Sequence[str]) -> list[ItemState | None]:
        return self._write(self._cancel, pool, item_ids)

    def _cancel(self, pool: str, item_ids: Sequence[str]) -> list[ItemState | None]:
        # Rules Z1-Z3: the state before, then the cancel, per id in one write transaction.
        now = self.clock()
        execute = self.conn.execute
        out: list[ItemState | None] = []
        for item_id in item_ids:
            key = item_number(item_id)
            row = None if key is None else execute(_Q["cancel_state"], (key, pool)).fetchone()
            if row is None:
                out.append(None)
                continue
            out.append(_STATES[row[0]])
            execute(*_bind(_Q["cancel_one"], (now, key, pool)))
        return out

    def release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> int:
        return sum(self._write(self._release_by_worker, pool, worker_id, spend_attempt))

    def _release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> tuple[int, int]:
        """Returns (released to pending, poisoned)."""
        now = self.clock()
        conn = self.conn
        in_pool = pool is not None
        args = (worker_id, now, pool) if in_pool else (worker_id, now)
        poisoned = 0
        if spend_attempt:
            poisoned = conn.execute(*_bind(_POISON_LOST[in_pool], args)).rowcount
        released = conn.execute(*_bind(_RELEASE_LOST[spend_attempt, in_pool], args)).rowcount
        return released, poisoned

    def purge(self, pool: str, older_than: float) -> int:
        """Delete finished items; done items have no index, so this reads the whole table.

        The scan runs as a read (WAL readers never block writers), and the rows
        it found are deleted by key, re-checked, in short write transactions,
        so workers are held up for the deletes only, never for the scan.
        """
        cutoff = self.clock() - older_than
        found = [row[0] for row in self.conn.execute(_Q["purge_candidates"], (pool, cutoff))]
        deleted = 0
        for start in range(0, len(found), _PURGE_CHUNK):
            deleted += self._write(self._purge_rows, pool, cutoff, found[start : start + _PURGE_CHUNK])
        return deleted

    def _purge_rows(self, pool: str, cutoff: float, keys: list[int]) -> int:
        execute = self.conn.execute
        sql = _Q["purge_item"]
        deleted = sum(execute(sql, (key, pool, cutoff)).rowcount for key in keys)
        execute(*_bind(_COUNT_ROWS, (pool, -deleted)))
        return deleted

    # -- durable steps (KeepsSteps, rules ST1-ST5) --------------------------
    def step_put(self, pool: str, item_id: str, token: int, key: str, payload: str, failed: bool) -> bool:
        number = item_number(item_id)
        if number is None:
            return False
        return self._write(self._step_put, pool, number, token, key, payload, failed)

    def _step_put(self, pool: str, number: int, token: int, key: str, payload: str, failed: bool) -> bool:
        # Check and insert under one write lock: no claim can move between the two.
        now = self.clock()
        execute = self.conn.execute
        if execute(*_bind(_Q["step_claim_is_current"], (number, pool, token, now))).fetchone() is None:
            return False
        execute(*_bind(_Q["step_insert"], (number, key, payload, int(failed), token, now)))
        return True

    def step_list(self, pool: str, item_id: str) -> list[StepRecord]:
        number = item_number(item_id)
        if number is None:
            return []
        rows = self.conn.execute(_Q["step_list"], (number, pool)).fetchall()
        return [StepRecord(key, payload, bool(failed), token, at) for key, payload, failed, token, at in rows]

    def step_clear(self, pool: str, item_ids: Sequence[str]) -> int:
        numbers = [n for n in (item_number(i) for i in dict.fromkeys(item_ids)) if n is not None]
        return self._write(self._step_clear, pool, numbers) if numbers else 0

    def _step_clear(self, pool: str, numbers: list[int]) -> int:
        execute = self.conn.execute
        sql = _Q["step_clear"]
        return sum(execute(*_bind(sql, (number, pool))).rowcount for number in numbers)

    def stats(self, pool: str) -> PoolStats:
        # One read transaction, so the counts and the pool total agree.
        return self._read(self._stats, pool)

    def _stats(self, pool: str) -> PoolStats:
        now = self.clock()
        conn = self.conn
        # Counted per partial index (each item is in exactly one), never by a table scan.
        pending, ready = conn.execute(*_bind(_Q["count_pending"], (pool, now))).fetchone()
        oldest = conn.execute(*_bind(_Q["oldest_ready"], (pool, now))).fetchone()[0]
        # Expired leases not yet settled count as what they already are: ready
        # again since their expiry, or poisoned when their attempts are spent.
        expired_ready, expired_spent, expired_oldest = conn.execute(_Q["count_expired"], (pool, now)).fetchone()
        if expired_oldest is not None:
            oldest = expired_oldest if oldest is None else min(oldest, expired_oldest)
        claimed = conn.execute(_Q["count_claimed"], (pool,)).fetchone()[0]
        poisoned = conn.execute(_Q["count_poisoned"], (pool,)).fetchone()[0]
        cancelled = conn.execute(_Q["count_cancelled"], (pool,)).fetchone()[0]
        # Done items have no index (completing must stay cheap): they are the rest.
        row = conn.execute(_Q["pool_rows"], (pool,)).fetchone()
        total = 0 if row is None else row[0]
        return PoolStats(
            pool=pool,
            pending=ready + expired_ready,
            delayed=pending - ready,
            claimed=claimed - expired_ready - expired_spent,
            done=total - pending - claimed - poisoned - cancelled,
            poisoned=poisoned + expired_spent,
            oldest_pending_at=oldest,
            cancelled=cancelled,
        )

    def pools(self) -> list[str]:
        return [row[0] for row in self.conn.execute(_Q["pools"])]

    def next_due(self, pools: Sequence[str]) -> dict[str, float | None]:
        """For each pool, when its next item becomes claimable (maybe already past), or None if never."""
        conn = self.conn
        due: dict[str, float | None] = {}
        for pool in pools:
            if pool in self.grouped or conn.execute(_GROUP_POOL, (pool,)).fetchone() is not None:
                self.grouped.add(pool)
                due[pool] = _groups().next_due(self, pool)  # limits and pauses hold ready items back
                continue
            pending = conn.execute(*_bind(_NEXT_PENDING, (pool,))).fetchone()[0]
            lease = conn.execute(_NEXT_LEASE_EXPIRY, (pool,)).fetchone()[0]
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
            _Q["register_worker"],
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
        row = conn.execute(_Q["worker_status"], (worker_id,)).fetchone()
        if row is None:
            raise WorkerNotFound(f"no worker {worker_id!r} is registered; register it first", worker_id=worker_id)
        if row[0] == WorkerStatus.LOST.value:
            raise WorkerLost(
                f"worker {worker_id!r} was declared lost (no heartbeat in time) and its items were released; "
                "stop it and register again",
                worker_id=worker_id,
            )
        record = conn.execute(_Q["heard_from"], (now, worker_id)).fetchone()
        conn.execute(*_bind(_Q["extend_worker_leases"], (now, worker_id)))
        return _worker(record)

    def set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None:
        self._write(self._set_worker_status, worker_id, status, detail)

    def _set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None:
        changed = self.conn.execute(_Q["set_worker_status"], (status.value, detail, worker_id)).rowcount
        if not changed:
            raise WorkerNotFound(f"no worker {worker_id!r} is registered; register it first", worker_id=worker_id)

    def get_worker(self, worker_id: str) -> WorkerRecord | None:
        row = self.conn.execute(_Q["get_worker"], (worker_id,)).fetchone()
        return None if row is None else _worker(row)

    def list_workers(self, filter: WorkerFilter) -> list[WorkerRecord]:
        now = self.clock()
        if filter.host is None:
            rows = self.conn.execute(_Q["list_workers"])
        else:
            rows = self.conn.execute(_Q["list_workers_on_host"], (filter.host,))
        records = [_worker(r) for r in rows]
        return [r for r in records if filter.matches(r, now)]

    def reap(self, threshold: float) -> list[ReapedWorker]:
        return self._write(self._reap, threshold)

    def _reap(self, threshold: float) -> list[ReapedWorker]:
        now = self.clock()
        conn = self.conn
        silent = conn.execute(_Q["silent_workers"], (now - threshold,)).fetchall()
        reaped = []
        for worker_id, last_heartbeat in silent:
            conn.execute(
                _Q["worker_lost"],
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
        conn.execute(_Q["state_expire"], (namespace, now))
        conn.execute(_Q["state_put"], (namespace, key, value, None if ttl is None else now + ttl))

    def state_get(self, namespace: str, key: str) -> str | None:
        row = self.conn.execute(_Q["state_get"], (namespace, key, self.clock())).fetchone()
        return None if row is None else str(row[0])

    def state_scan(self, namespace: str) -> dict[str, str]:
        rows = self.conn.execute(_Q["state_scan"], (namespace, self.clock()))
        return {k: v for k, v in rows}

    def state_delete(self, namespace: str, key: str) -> bool:
        return self._write(self._state_delete, namespace, key)

    def _state_delete(self, namespace: str, key: str) -> bool:
        now = self.clock()
        row = self.conn.execute(_Q["state_delete"], (namespace, key)).fetchone()
        return row is not None and (row[0] is None or row[0] > now)
