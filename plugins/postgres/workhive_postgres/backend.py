"""``PostgresStorage``: the workhive storage contract on PostgreSQL (asyncpg).

Model
-----
* One pool of asyncpg connections per storage object (``connections``); every
  statement is one of the named statements in ``sql/queries.sql``, naming the
  hive's schema itself (no ``search_path``, no other session state, so a
  PgBouncer in transaction mode may run each on any server connection). Most
  operations are one statement in autocommit: one round trip, one commit.
* Time is the server's: ``now_s($1)`` in SQL (``statement_timestamp()`` plus
  the ``clock_offset`` tests move forward), never this machine's clock.
* Claims lock their candidates ``FOR UPDATE SKIP LOCKED`` on the partial index
  of claimable items in claim order, so claimers never wait for each other; every
  completion, failure, release and extension carries the fencing token in its
  ``WHERE`` clause. Each priority band of a pool is read from its mark (migration
  0005), so a vacuum horizon held back by a long transaction does not make claims
  walk the dead entries it keeps; claimers move the marks twice a second.
* Wake-ups: pushes ``pg_notify`` the hive's channel in the same statement; one
  listening connection per storage object (one per process in a fleet) wakes
  the waiters of the pool named in the payload, and is opened again after a drop.
  Behind a PgBouncer in transaction mode it listens at ``?direct_host=``; without
  one there is no listener: the backend does not declare ``notify`` and waiting
  for work polls (the worker runtime's idle polling).
* Connection loss: a call that never reached the server is retried with
  backoff for up to ``?retry_for=`` seconds. A call that was in flight is run
  again when running it twice is harmless, or the item is read back to learn
  whether it was applied (complete, fail, release); when that cannot be known
  (a push without dedup keys, a claim, a fused complete-and-claim that went
  through) the caller gets ``OutcomeUnknown``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from workhive.backoff import FullJitter
from workhive.budgets import BudgetTake
from workhive.errors import (
    OutcomeUnknown,
    StorageUnavailable,
    WorkerLost,
    WorkerNotFound,
    WorkhiveError,
)
from workhive.ids import item_number
from workhive.models import (
    Ack,
    GroupReport,
    GroupStats,
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
from workhive.schedules import Schedule
from workhive_postgres import schedules
from workhive_postgres.budget import take_budget
from workhive_postgres.connections import ConnectionPool
from workhive_postgres.failures import (
    ended_by_server,
    is_connection_loss,
    is_retryable_conflict,
    open_failure,
    statement_failure,
)
from workhive_postgres.schema import ensure_schema
from workhive_postgres.sqlfiles import statements, with_limit
from workhive_postgres.url import PostgresConfig, parse_url

__all__ = ["PostgresStorage", "channel_for"]

logger = logging.getLogger("workhive.postgres")
T = TypeVar("T")

_STATES = {s.value: s for s in ItemState}
_WORKER_STATES = {s.value: s for s in WorkerStatus}
#: Pushes of at least this many items (without dedup keys) go by COPY: about twice the
#: rows per second of one INSERT … SELECT FROM unnest(…) for large batches.
COPY_FROM = 1000
_COPY_COLUMNS = ("id", "pool", "payload", "state", "priority", "max_attempts", "created_at", "available_at", "grp")
#: How often a conflicting transaction (deadlock, serialization failure) is run again before giving up.
CONFLICT_RETRIES = 20
#: Claim marks (migration 0005): seconds between moves of a band's mark (the hive's clock;
#: each process also waits this long between its own tries per pool), how far a new mark
#: stays behind the hive's clock, and seconds between walks from the bottom (sweeps).
#: A claim under a held horizon walks the dead entries of about MARKS_EVERY + MARKS_LAG
#: seconds: at 1 s + 1 s, 80-90 buffers per claim at 100 items/s (bench/pg_horizon.py).
MARKS_EVERY = 0.5
MARKS_LAG = 0.25
SWEEP_EVERY = 60.0
#: (group, band) marks of a pool with groups moved by one advance at most (those marked longest
#: ago first): a pool of many tenants costs a move a bounded walk, and a group waits for its
#: turn among them (until then its claims read from its older mark, never past a live entry).
GROUP_MARKS_PER_MOVE = 64


class _Rerun(Exception):
    """Raised by a recovery check: the in-flight call was not applied and may simply run again."""


class _LostWhileOpening(Exception):
    """The server ended a session the hive was opening on; ``cause`` is the driver's error."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _id(number: int) -> str:
    return f"i{number:016x}"  # the workhive.ids shape, inlined on the hot path


def _item(row: Sequence[Any]) -> WorkItem:
    return WorkItem(_id(row[0]), row[1], row[2], _STATES[row[3]], *row[4:])


def _claimed(row: Sequence[Any], pool: str, worker_id: str, lease: float) -> WorkItem:
    r = row  # the id is _id's, inlined: one call less per claimed item
    # claim_grouped's rows carry the group after `taken`; the claim of a pool without groups takes ungrouped items only.
    return WorkItem(
        f"i{r[0]:016x}", pool, r[1], ItemState.CLAIMED, r[2], r[3], r[4], r[5], r[6], r[7],
        worker_id, r[8], lease, r[9], r[10], None, None, r[11], (r[13] or None) if len(r) > 13 else None,
    )  # fmt: skip


def _worker(row: Sequence[Any]) -> WorkerRecord:
    return WorkerRecord(
        row[0], row[1], row[2], tuple(row[3]), tuple(row[4]), _WORKER_STATES[row[5]], row[6], row[7], row[8]
    )


def _claim_order(rows: list[Any]) -> list[Any]:
    # RETURNING comes back in the order rows were updated; hand items out in claim order.
    if len(rows) > 1:
        rows.sort(key=lambda r: (-r[2], r[7], r[0]))
    return rows


def channel_for(schema: str) -> str:
    """The NOTIFY channel of a hive's schema (under PostgreSQL's 63-byte limit)."""
    name = f"workhive:{schema}"
    return name if len(name) <= 63 else "workhive:" + hashlib.sha256(schema.encode()).hexdigest()[:40]


class PostgresStorage:
    """Storage in a PostgreSQL schema; what ``workhive.open("postgresql://…")`` builds.

    ``create=False`` opens an existing hive only (``HiveNotFound`` otherwise,
    creating nothing). ``clock_offset`` returns seconds added to the server's
    clock (tests move time with it). ``backoff`` paces retries after a lost
    connection (default: full jitter from 50 ms up to 2 s).

    >>> async def main():  # doctest: +SKIP
    ...     async with workhive.open("postgresql://app@db/jobs?schema=hive") as hive:
    ...         await hive.pool("emails").push({"to": "a@example.com"})
    """

    #: a claim costs a round trip and a few statements however many items it takes: fleets of
    #: instant handlers claim up to 512 at once (workhive/storage.py; the runtime's default is 256)
    instant_claim_max = 512

    def __init__(
        self,
        url: str,
        *,
        create: bool = True,
        clock_offset: Callable[[], float] | None = None,
        backoff: Any = None,
    ) -> None:
        self.config: PostgresConfig = parse_url(url)
        #: the URL without its password: safe to show
        self.url = self.config.redacted
        self.create = create
        self._offset = clock_offset
        self._backoff = backoff if backoff is not None else FullJitter(base=0.05, cap=2.0)
        self._pool: Any = None
        self._q = statements(self.config.schema)
        #: "notify" unless nothing can LISTEN: behind PgBouncer's transaction pooling without ?direct_host=
        self.capabilities = frozenset(
            {"multiprocess", "notify"} if self.config.sessions_reach_server else {"multiprocess"}
        )
        self._channel = channel_for(self.config.schema)
        self._events: dict[str, asyncio.Event] = {}
        self._listener: Any = None
        self._listener_lock = asyncio.Lock()
        #: transactions run again after a deadlock or serialization failure (observable by tests)
        self.conflicts_retried = 0
        #: calls retried after a lost connection
        self.reconnects = 0
        #: claim marks: the module's MARKS_EVERY, MARKS_LAG, SWEEP_EVERY (tests move marks on every claim)
        self.marks_every = MARKS_EVERY
        self.marks_lag = MARKS_LAG
        self.sweep_every = SWEEP_EVERY
        self._marks_next: dict[str, float] = {}
        #: pools this process has seen to have groups (a pool never stops having them): their
        #: claims go straight to claim_grouped instead of first trying the ungrouped claim
        self._grouped: set[str] = set()

    def __repr__(self) -> str:
        return f"<PostgresStorage {self.url} {'open' if self._pool is not None else 'closed'}>"

    # -- lifecycle ----------------------------------------------------------
    async def open(self) -> None:
        if self._pool is not None:
            return
        import asyncpg

        cfg = self.config
        # A session the server ends while the hive opens (a restart, pg_terminate_backend, a
        # dropped network) is opened again, within retry_for. A server that cannot be reached
        # at all, or refuses the login, is reported at once: that is the URL or the server.
        deadline = time.monotonic() + cfg.retry_for
        attempt = 0
        while True:
            try:
                self._pool = await self._open_pool(asyncpg)
                return
            except _LostWhileOpening as lost:
                attempt += 1
                pause = self._backoff.delay(attempt)
                if time.monotonic() + pause > deadline:
                    raise open_failure(cfg, lost.cause) from None
                logger.warning(
                    "connection to PostgreSQL at %s lost while opening (%s); retrying (attempt %d)",
                    cfg.where,
                    type(lost.cause).__name__,
                    attempt,
                )
                await asyncio.sleep(pause)

    async def _open_pool(self, asyncpg: Any) -> Any:
        cfg = self.config
        # application_name only: PgBouncer refuses other startup parameters (search_path, unless told to
        # ignore it, and then it is silently lost), and every statement names the schema itself.
        settings = {"application_name": cfg.application_name}
        # command_timeout: a statement the network stalled (or left half-open) fails as a lost
        # connection instead of hanging while this process's heartbeats keep its items claimed.
        pool = ConnectionPool(
            lambda: asyncpg.connect(
                **cfg.connect_kwargs(), command_timeout=cfg.command_timeout, server_settings=settings
            ),
            cfg.pool_size,
        )
        try:
            conn = await pool.acquire()
        except WorkhiveError:
            raise
        except Exception as exc:
            if ended_by_server(exc):
                raise _LostWhileOpening(exc) from None
            raise open_failure(cfg, exc) from None
        try:
            await ensure_schema(conn, cfg, create=self.create)
        except WorkhiveError:
            pool.release(conn)
            await pool.close()
            raise
        except Exception as exc:
            conn.terminate()
            pool.release(conn)
            pool.terminate()
            if ended_by_server(exc):
                raise _LostWhileOpening(exc) from None
            if is_connection_loss(exc):
                raise open_failure(cfg, exc) from None
            raise statement_failure(cfg, exc, "opening the hive") from None
        pool.release(conn)
        return pool

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        for pool in list(self._events):
            self._wake(pool)
        if listener is not None:
            with contextlib.suppress(Exception):
                await listener.close(timeout=5)
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 10)
            except Exception:
                pool.terminate()

    def _off(self) -> float:
        return 0.0 if self._offset is None else float(self._offset())

    async def now(self) -> float:
        return float(await self._run("reading the clock", self._fetchval, "now", self._off()))

    # -- running statements -------------------------------------------------
    async def _fetch(self, conn: Any, name: str, *args: Any) -> list[Any]:
        return await conn.fetch(self._q[name], *args)  # type: ignore[no-any-return]

    async def _fetchval(self, conn: Any, name: str, *args: Any) -> Any:
        return await conn.fetchval(self._q[name], *args)

    async def _execute(self, conn: Any, name: str, *args: Any) -> str:
        return await conn.execute(self._q[name], *args)  # type: ignore[no-any-return]

    async def _run(
        self,
        what: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        rerun: bool = True,
        recover: Callable[[Any], Awaitable[T]] | None = None,
    ) -> T:
        """Run ``fn(conn, *args)`` on a pooled connection, riding out lost connections and conflicts.

        If the connection drops while ``fn`` is in flight: with ``recover``,
        a fresh connection asks it what happened (it returns the result, or
        raises ``_Rerun``); else with ``rerun`` the call runs again (it is
        harmless twice); else ``OutcomeUnknown``.
        """
        pool = self._pool
        if pool is None:
            raise StorageUnavailable(
                f"PostgreSQL storage {self.config.where} is not open; use `async with hive:` (or await hive.open())",
                where=self.config.where,
            )
        attempt = 0
        conflicts = 0
        deadline: float | None = None
        while True:
            in_flight = False
            try:
                conn = pool.take_idle()
                if conn is None:
                    conn = await pool.acquire()
                try:
                    in_flight = True
                    return await fn(conn, *args)
                except BaseException as exc:
                    if not isinstance(exc, Exception) or is_connection_loss(exc):
                        conn.terminate()  # never hand a broken (or cancelled mid-statement) connection out again
                    raise
                finally:
                    pool.release(conn)
            except (WorkhiveError, _Rerun):
                raise
            except Exception as exc:
                if is_retryable_conflict(exc) and conflicts < CONFLICT_RETRIES:
                    conflicts += 1
                    self.conflicts_retried += 1
                    # A short jittered pause lets the other side of the cycle finish first.
                    await asyncio.sleep(random.uniform(0, 0.005 * conflicts))
                    continue
                if not is_connection_loss(exc) or self._pool is None:
                    if self._pool is None:
                        raise StorageUnavailable(
                            f"PostgreSQL storage {self.config.where} was closed during {what}",
                            where=self.config.where,
                        ) from None
                    raise statement_failure(self.config, exc, what) from None
                pool.connection_lost()  # its other connections may be dead too: none is handed out again
                attempt += 1
                self.reconnects += 1
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + self.config.retry_for
                if now >= deadline:
                    raise StorageUnavailable(
                        f"lost the connection to PostgreSQL at {self.config.where} during {what} and could not "
                        f"reconnect for {self.config.retry_for:g}s ({type(exc).__name__}); check the server, "
                        "or raise ?retry_for= in the storage URL",
                        where=self.config.where,
                    ) from None
                logger.warning(
                    "connection to PostgreSQL at %s lost during %s (%s); retrying (attempt %d)",
                    self.config.where,
                    what,
                    type(exc).__name__,
                    attempt,
                )
                await asyncio.sleep(min(self._backoff.delay(attempt), max(0.0, deadline - now)))
                if in_flight and recover is not None:
                    try:
                        return await self._run(what, recover, rerun=True)
                    except _Rerun:
                        continue
                if in_flight and not rerun:
                    raise OutcomeUnknown(
                        f"the connection to PostgreSQL at {self.config.where} dropped while {what} was in flight: "
                        "it was applied once or not at all; check before doing it again",
                        where=self.config.where,
                    ) from None

    # -- wake-ups -----------------------------------------------------------
    def _wake(self, pool: str) -> None:
        event = self._events.pop(pool, None)
        if event is not None:
            event.set()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self._wake(payload)

    def _on_listener_lost(self, conn: Any) -> None:
        if self._listener is conn:
            self._listener = None
        # Wake everyone: they look again, and the next wait listens on a new connection.
        for pool in list(self._events):
            self._wake(pool)

    async def _listen(self) -> bool:
        """Make sure the one listening connection is up; False if the server cannot be reached now."""
        if self._listener is not None and not self._listener.is_closed():
            return True
        if "notify" not in self.capabilities:
            return False  # transaction pooling and no direct_host: a LISTEN would be lost with its transaction
        async with self._listener_lock:
            if self._listener is not None and not self._listener.is_closed():
                return True
            import asyncpg

            try:
                conn = await asyncpg.connect(
                    **self.config.direct().connect_kwargs(),
                    server_settings={"application_name": self.config.application_name},
                )
                await conn.add_listener(self._channel, self._on_notify)
            except Exception as exc:
                logger.warning("cannot listen for wake-ups at %s (%s)", self.config.direct().where, type(exc).__name__)
                return False
            conn.add_termination_listener(self._on_listener_lost)
            self._listener = conn
            return True

    async def _notify(self, pool: str) -> None:
        await self._run("waking waiters", self._execute, "notify", self._channel, pool)

    async def wait_for_work(self, pool: str, timeout: float) -> None:
        # Take the event before looking, so a push landing between the look and
        # the wait still wakes us.
        event = self._events.get(pool)
        if event is None:
            event = self._events[pool] = asyncio.Event()
        listening = await self._listen()
        grouped = pool in self._grouped or await self._run("looking for work", self._has_groups, pool)
        due = await self._run(
            "looking for work", self._fetchval, "next_due_grouped" if grouped else "next_due", self._off(), pool
        )
        if timeout <= 0 or (due is not None and due <= 0):
            return
        wait = timeout if due is None else min(timeout, float(due))
        if not listening or grouped:
            # No wake-ups until the listener is back; or a completion may free a group's slot, and
            # completions notify no one (that would cost every pool's hot path): look again soon.
            wait = min(wait, 1.0)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), wait)

    # -- items --------------------------------------------------------------
    async def push(self, pool: str, items: Sequence[NewItem]) -> list[str]:
        if not items:
            return []
        keyed = any(item.dedup_key is not None for item in items)
        # Twice would push twice, unless every item carries a dedup key.
        all_keyed = all(item.dedup_key is not None for item in items)
        return await self._run("push", self._push_keyed if keyed else self._push, pool, items, rerun=all_keyed)

    async def _push(self, conn: Any, pool: str, items: Sequence[NewItem]) -> list[str]:
        # Not through PgBouncer's transaction pooling: asyncpg prepares COPY's column query as a
        # named statement even with its statement cache off, which outlives the transaction.
        if len(items) >= COPY_FROM and not self.config.transaction_pooled and all(i.dedup_key is None for i in items):
            return await self._push_copy(conn, pool, items)
        rows = await conn.fetch(
            self._q["push"],
            self._off(),
            pool,
            [i.payload for i in items],
            [i.priority for i in items],
            [i.max_attempts for i in items],
            [float(i.delay) for i in items],
            [i.dedup_key for i in items],
            self._channel,
            [i.group for i in items],
        )
        return [_id(r[0]) for r in rows]

    async def _push_copy(self, conn: Any, pool: str, items: Sequence[NewItem]) -> list[str]:
        """A large push: item numbers taken in one statement, the rows sent with COPY, one transaction."""
        q = self._q
        ids: list[str] = []
        async with conn.transaction():
            numbers = [r[0] for r in await conn.fetch(q["allocate_ids"], len(items))]
            now = float(await conn.fetchval(q["now"], self._off()))

            def records() -> Iterator[tuple[Any, ...]]:
                # Built while asyncpg streams them, so this process's share of the work
                # (rows and id strings) overlaps the server's (parsing rows, index entries).
                append = ids.append
                for n, i in zip(numbers, items):
                    append(_id(n))
                    yield (n, pool, i.payload, "pending", i.priority, i.max_attempts, now, now + i.delay, i.group or "")

            await conn.copy_records_to_table(
                "items", records=records(), columns=_COPY_COLUMNS, schema_name=self.config.schema
            )
            await conn.execute(q["record_pool"], pool)
            await conn.execute(q["record_bands"], pool, list({i.priority for i in items}))
            groups = sorted({i.group for i in items if i.group is not None})
            if groups:
                await conn.execute(q["record_groups"], pool, groups)
            await conn.execute(q["notify"], self._channel, pool)
        return ids

    async def _push_keyed(self, conn: Any, pool: str, items: Sequence[NewItem]) -> list[str]:
        async with conn.transaction():
            await conn.execute(self._q["dedup_lock"], self.config.schema, pool)
            keys = list({i.dedup_key for i in items if i.dedup_key is not None})
            live = {r[0]: _id(r[1]) for r in await conn.fetch(self._q["live_duplicates"], pool, keys)}
            fresh: list[NewItem] = []
            seen: set[str] = set()
            for item in items:
                key = item.dedup_key
                if key is not None and (key in live or key in seen):
                    continue
                if key is not None:
                    seen.add(key)
                fresh.append(item)
            new_ids = await self._push(conn, pool, fresh) if fresh else []
        ids: list[str] = []
        new = iter(new_ids)
        batch: dict[str, str] = {}
        for item in items:
            key = item.dedup_key
            if key is not None and key in live:
                ids.append(live[key])
            elif key is not None and key in batch:
                ids.append(batch[key])
            else:
                ids.append(next(new))
                if key is not None:
                    batch[key] = ids[-1]
        return ids

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        # Never run again after a connection lost mid-statement: items a lost claim took are held
        # by ``worker_id``, and that worker's heartbeats would extend them forever while it runs
        # others. ``OutcomeUnknown`` tells the caller, who knows what it holds, to give them back.
        if time.monotonic() >= self._marks_next.get(pool, 0.0):  # tested here: one coroutine less per claim
            await self._advance_marks(pool)
        return await self._run("claim", self._claim, pool, worker_id, limit, float(lease), rerun=False)

    async def _advance_marks(self, pool: str) -> None:
        """Move ``pool``'s claim marks if this process has not tried for ``marks_every`` seconds.

        Run before a claim, never after: a failure here must not cost the items a claim took.
        The statement itself skips bands another process moved less than ``marks_every`` ago.
        """
        now = time.monotonic()
        if now < self._marks_next.get(pool, 0.0):
            return
        self._marks_next[pool] = now + self.marks_every
        await self._run(
            "moving claim marks", self._fetchval, "advance_marks", self._off(), pool,
            float(self.marks_every), float(self.marks_lag), float(self.sweep_every),
        )  # fmt: skip
        if pool in self._grouped:
            await self._run(
                "moving group marks", self._fetchval, "advance_group_marks", self._off(), pool,
                float(self.marks_every), float(self.marks_lag), float(self.sweep_every), GROUP_MARKS_PER_MOVE,
            )  # fmt: skip

    async def _claim(self, conn: Any, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        if pool in self._grouped:
            return await self._claim_grouped(conn, pool, worker_id, limit, lease)
        rows = await conn.fetch(with_limit(self._q["claim"], limit), self._off(), pool, worker_id, lease)
        if len(rows) == 1 and rows[0][12]:
            # The worker loop's claim: one row, taken. No poisoned lease to claim past, nothing to sort.
            return [_claimed(rows[0], pool, worker_id, lease)]
        if not rows and await self._has_groups(conn, pool):
            return await self._claim_grouped(conn, pool, worker_id, limit, lease)
        return await self._taken(conn, rows, pool, worker_id, limit, lease)

    async def _has_groups(self, conn: Any, pool: str) -> bool:
        """Whether ``pool`` has groups; asked after a claim of it found nothing (remembered once true)."""
        if await conn.fetchval(self._q["pool_grouped"], pool):
            self._grouped.add(pool)
            return True
        return False

    async def _claim_grouped(self, conn: Any, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        """The claim of a pool with groups: one call of claim_grouped (migration 0008), which poisons
        the spent leases it meets and keeps going, so every row it returns as taken is the claim's."""
        rows = await conn.fetch(self._q["claim_grouped"], self._off(), pool, worker_id, lease, limit)
        # Already in claim order: each was the next turn's.
        return [_claimed(r, pool, worker_id, lease) for r in rows if r[12]]

    async def _taken(
        self, conn: Any, rows: list[Any], pool: str, worker_id: str, limit: int, lease: float
    ) -> list[WorkItem]:
        """The items a claim statement took; claims again while spent leases it poisoned left it short."""
        taken = [r for r in rows if r[12]]
        short = len(taken) < len(rows)
        while short and len(taken) < limit:
            # Each round poisons at least one spent lease that ranked ahead, so this ends.
            more_sql = with_limit(self._q["claim"], limit - len(taken))
            rows = await conn.fetch(more_sql, self._off(), pool, worker_id, lease)
            more = [r for r in rows if r[12]]
            taken += more
            short = len(more) < len(rows)
        return [_claimed(r, pool, worker_id, lease) for r in _claim_order(taken)]

    async def complete(self, pool: str, acks: Sequence[Ack]) -> list[bool]:
        if not acks:
            return []
        return await self._run(
            "complete", self._complete, pool, acks, recover=lambda conn: self._recover_complete(conn, pool, acks)
        )

    async def _complete(self, conn: Any, pool: str, acks: Sequence[Ack]) -> list[bool]:
        off = self._off()
        if len(acks) == 1:
            ack = acks[0]
            key = item_number(ack.item_id)
            if key is None:
                return [False]
            return [await conn.fetchval(self._q["complete_one"], off, pool, key, ack.token, ack.result) is not None]
        # One statement for the batch; an id given twice is completed once, by its first ack.
        first: dict[int, int] = {}
        for n, ack in enumerate(acks):
            key = item_number(ack.item_id)
            if key is not None and key not in first:
                first[key] = n
        chosen = [acks[n] for n in first.values()]
        rows = await conn.fetch(
            self._q["complete_many"],
            off,
            pool,
            list(first),
            [a.token for a in chosen],
            [a.result for a in chosen],
        )
        accepted = {first[r[0]] for r in rows}
        return [n in accepted for n in range(len(acks))]

    async def _recover_complete(self, conn: Any, pool: str, acks: Sequence[Ack]) -> list[bool]:
        """After a drop mid-complete: done with our token means applied; still ours means run it again."""
        results = []
        for ack in acks:
            key = item_number(ack.item_id)
            row = None if key is None else await conn.fetchrow(self._q["item_state"], key)
            if row is not None and row[0] == "claimed" and row[1] == ack.token:
                raise _Rerun
            results.append(row is not None and row[0] == "done" and row[1] == ack.token)
        return results

    async def complete_and_claim(
        self, pool: str, ack: Ack, worker_id: str, limit: int, lease: float
    ) -> tuple[bool, list[WorkItem]]:
        key = item_number(ack.item_id)
        if key is None:
            return False, []

        async def recover(conn: Any) -> tuple[bool, list[WorkItem]]:
            # Still ours: nothing ran (one statement), so it runs again (``_Rerun``). Otherwise the
            # statement may have claimed items for ``worker_id`` that never reached it: the caller
            # must learn that, as for a lost claim (see ``claim``).
            await self._recover_complete(conn, pool, [ack])
            raise OutcomeUnknown(
                f"the connection to PostgreSQL at {self.config.where} dropped while completing {ack.item_id} and "
                "claiming more: the completion may be applied and items may be held by this worker; give back "
                "what it holds (release_by_worker) before claiming again",
                where=self.config.where,
            )

        if time.monotonic() >= self._marks_next.get(pool, 0.0):
            await self._advance_marks(pool)
        return await self._run(
            "complete_and_claim", self._complete_and_claim, pool, key, ack, worker_id, limit, float(lease),
            recover=recover,
        )  # fmt: skip

    async def _complete_and_claim(
        self, conn: Any, pool: str, key: int, ack: Ack, worker_id: str, limit: int, lease: float
    ) -> tuple[bool, list[WorkItem]]:
        if pool in self._grouped:
            # One call: the completion frees its group's slot before the claim counts the slots.
            rows = await conn.fetch(
                self._q["complete_and_claim_grouped"], self._off(), pool, key, ack.token, ack.result,
                worker_id, lease, limit,
            )  # fmt: skip
            if not rows:
                return False, []
            return True, [_claimed(r[1:], pool, worker_id, lease) for r in rows if r[13]]
        rows = await conn.fetch(
            with_limit(self._q["complete_and_claim"], limit), self._off(), pool, key, ack.token, ack.result,
            worker_id, lease,
        )  # fmt: skip
        if not rows or not rows[0][0]:
            return False, []
        touched = [r[1:] for r in rows if r[1] is not None]
        if not touched and await self._has_groups(conn, pool):
            # Completed; the pool has groups, so the claim part found nothing to take: claim through
            # its turns (committed apart from the completion, this once: later calls go the way above).
            return True, await self._claim_grouped(conn, pool, worker_id, limit, lease)
        return True, await self._taken(conn, touched, pool, worker_id, limit, lease)

    async def fail(
        self, pool: str, item_id: str, token: int, error: str, retry_in: float, poison: bool
    ) -> ItemState | None:
        key = item_number(item_id)
        if key is None:
            return None
        error = error.replace("\x00", "\ufffd")  # PostgreSQL text cannot hold NUL

        async def recover(conn: Any) -> ItemState | None:
            row = await conn.fetchrow(self._q["item_state"], key)
            if row is None:
                return None
            if row[0] == "claimed" and row[1] == token:
                raise _Rerun
            if row[1] == token and row[0] in ("pending", "poisoned") and row[2] == error:
                return _STATES[row[0]]
            if row[1] == token:
                return None
            raise OutcomeUnknown(
                f"the connection to PostgreSQL at {self.config.where} dropped while failing {item_id}, and the "
                "item has been claimed again since: whether the failure was recorded is unknown",
                where=self.config.where,
            )

        state = await self._run(
            "fail", self._fetchval, "fail", self._off(), key, pool, token, error, float(retry_in), poison,
            recover=recover,
        )  # fmt: skip
        if state is None:
            return None
        if state == "pending":
            await self._notify(pool)
        return _STATES[state]

    async def release(self, pool: str, item_id: str, token: int, delay: float) -> bool:
        key = item_number(item_id)
        if key is None:
            return False

        async def recover(conn: Any) -> Any:
            row = await conn.fetchrow(self._q["item_state"], key)
            if row is not None and row[0] == "claimed" and row[1] == token:
                raise _Rerun
            if row is not None and row[0] == "pending" and row[1] == token:
                return key
            if row is None or row[1] == token:
                return None
            raise OutcomeUnknown(
                f"the connection to PostgreSQL at {self.config.where} dropped while releasing {item_id}, and the "
                "item has been claimed again since: whether the release was recorded is unknown",
                where=self.config.where,
            )

        released = await self._run(
            "release", self._fetchval, "release", self._off(), key, pool, token, float(delay), recover=recover
        )
        if released is not None:
            await self._notify(pool)
        return released is not None

    async def extend(self, pool: str, item_id: str, token: int, lease: float) -> float | None:
        key = item_number(item_id)
        if key is None:
            return None
        # Extending twice from "now" is the same as once: run again after a drop.
        expiry = await self._run("extend", self._fetchval, "extend", self._off(), key, pool, token, float(lease))
        return None if expiry is None else float(expiry)

    async def get(self, pool: str, item_id: str) -> WorkItem | None:
        key = item_number(item_id)
        if key is None:
            return None
        rows = await self._run("get", self._fetch, "get", key, pool)
        return _item(rows[0]) if rows else None

    async def list_items(self, pool: str, state: ItemState, limit: int, offset: int = 0) -> list[WorkItem]:
        rows = await self._run("list items", self._fetch, "list_items", pool, state.value, limit, offset)
        return [_item(r) for r in rows]

    async def requeue(self, pool: str, item_ids: Sequence[str] | None) -> int:
        keys = None if item_ids is None else [k for k in (item_number(i) for i in item_ids) if k is not None]
        count = int(await self._run("requeue", self._fetchval, "requeue", self._off(), pool, keys))
        if count:
            await self._notify(pool)
        return count

    async def release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> int:
        released, poisoned = await self._run(
            "release_by_worker", self._release_by_worker, pool, worker_id, spend_attempt
        )
        if released:
            for name in [pool] if pool is not None else await self.pools():
                await self._notify(name)
        return released + poisoned

    async def _release_by_worker(
        self, conn: Any, pool: str | None, worker_id: str, spend_attempt: bool
    ) -> tuple[int, int]:
        off = self._off()
        async with conn.transaction():
            poisoned = 0
            if spend_attempt:
                status = await conn.execute(self._q["poison_worker_spent"], off, worker_id, pool)
                poisoned = int(status.split()[-1])
            status = await conn.execute(self._q["release_worker"], off, worker_id, pool, not spend_attempt)
            return int(status.split()[-1]), poisoned

    async def purge(self, pool: str, older_than: float) -> int:
        status = await self._run("purge", self._execute, "purge", self._off(), pool, float(older_than))
        return int(status.split()[-1])

    # -- durable steps (KeepsSteps, rules ST1-ST5) --------------------------
    async def step_put(self, pool: str, item_id: str, token: int, key: str, payload: str, failed: bool) -> bool:
        number = item_number(item_id)
        if number is None:
            return False
        # Twice is harmless: a key stored already keeps its value, and the fence is checked again.
        stored = await self._run(
            "storing a step", self._fetchval, "step_put", self._off(), number, pool, token, key, payload, failed
        )
        return bool(stored)

    async def step_list(self, pool: str, item_id: str) -> list[StepRecord]:
        number = item_number(item_id)
        if number is None:
            return []
        rows = await self._run("reading steps", self._fetch, "step_list", number, pool)
        return [StepRecord(r[0], r[1], bool(r[2]), int(r[3]), float(r[4])) for r in rows]

    async def step_clear(self, pool: str, item_ids: Sequence[str]) -> int:
        numbers = [n for n in (item_number(i) for i in dict.fromkeys(item_ids)) if n is not None]
        if not numbers:
            return 0
        status = await self._run("clearing steps", self._execute, "step_clear", pool, numbers)
        return int(status.split()[-1])

    async def stats(self, pool: str) -> PoolStats:
        rows = await self._run("stats", self._fetch, "stats", self._off(), pool)
        r = rows[0]
        return PoolStats(pool, r[0], r[1], r[2], r[3], r[4], r[5], cancelled=r[6])

    async def cancel(self, pool: str, item_ids: Sequence[str]) -> list[ItemState | None]:
        keys = {item_id: item_number(item_id) for item_id in item_ids}
        wanted = [k for k in keys.values() if k is not None]
        # Not rerun on a dropped connection: a second run would find the items cancelled already.
        if not wanted:
            return [None] * len(item_ids)
        rows = await self._run("cancel", self._fetch, "cancel", self._off(), pool, wanted, rerun=False)
        found = {r[0]: _STATES[r[1]] for r in rows}
        return [None if key is None else found.get(key) for key in keys.values()]

    # -- groups (workhive.storage.ServesGroups, rules GR1-GR9) ----------------
    async def set_group_weight(self, pool: str, group: str, weight: float) -> None:
        """Group ``group`` of ``pool`` takes turns with weight ``weight`` (kept before it has items)."""
        await self._set(pool, "group_set_weight", pool, group, float(weight))

    async def set_group_limit(self, pool: str, group: str | None, limit: int | None) -> None:
        """At most ``limit`` unexpired claims of ``group`` (None: the default of every named group without its own)."""
        if group is None:
            await self._set(pool, "group_set_default_limit", pool, limit)
        else:
            await self._set(pool, "group_set_limit", pool, group, limit)

    async def set_pool_limit(self, pool: str, limit: int | None) -> None:
        """At most ``limit`` unexpired claims in ``pool`` (None: no limit)."""
        await self._set(pool, "pool_set_limit", pool, limit)

    async def pause_group(self, pool: str, group: str, seconds: float | None) -> None:
        """Claims skip ``group`` until the hive's now + ``seconds``; None resumes it at once."""
        await self._set(pool, "group_pause", self._off(), pool, group, None if seconds is None else float(seconds))

    async def _set(self, pool: str, name: str, *args: Any) -> None:
        # Setting the same value twice is harmless: run again after a dropped connection.
        await self._run("storing a group setting", self._execute, name, *args)
        self._grouped.add(pool)
        await self._notify(pool)  # a raised limit or a resumed group may have made items claimable

    async def group_report(self, pool: str) -> GroupReport:
        """The pool's limits and, per group with live items or a setting of its own, its counts (GR9)."""
        return await self._run("reading groups", self._group_report, pool)

    async def _group_report(self, conn: Any, pool: str) -> GroupReport:
        # One snapshot for the settings and the counts.
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            limits = await conn.fetchrow(self._q["group_pool_settings"], pool)
            rows = await conn.fetch(self._q["group_report"], self._off(), pool)
        groups = []
        for grp, weight, weight_set, limit, paused_until, in_flight, ready, waiting, now in rows:
            paused = paused_until if paused_until is not None and paused_until > now else None
            own = weight_set or limit is not None or paused is not None
            if not (own or in_flight or ready or waiting):
                continue  # a group whose items are all done and that has no setting of its own
            name = grp or None  # '' is the ungrouped items' row
            groups.append(GroupStats(name, float(weight), limit, int(in_flight), int(ready), int(waiting), paused))
        groups.sort(key=lambda g: (g.group is not None, g.group or ""))
        return GroupReport(
            pool,
            None if limits is None else limits[0],
            None if limits is None else limits[1],
            tuple(groups),
        )

    async def pools(self) -> list[str]:
        return [r[0] for r in await self._run("list pools", self._fetch, "pools")]

    # -- workers ------------------------------------------------------------
    async def register_worker(self, registration: WorkerRegistration) -> WorkerRecord:
        reg = registration
        rows = await self._run(
            "register worker", self._fetch, "register_worker", self._off(), reg.worker_id, reg.host, reg.pid,
            list(reg.pools), list(reg.capabilities),
        )  # fmt: skip
        return _worker(rows[0])

    async def heartbeat(self, worker_id: str) -> WorkerRecord:
        return await self._run("heartbeat", self._heartbeat, worker_id)

    async def _heartbeat(self, conn: Any, worker_id: str) -> WorkerRecord:
        off = self._off()
        async with conn.transaction():
            status = await conn.fetchval(self._q["worker_status_for_update"], worker_id)
            if status is None:
                raise WorkerNotFound(f"no worker {worker_id!r} is registered; register it first", worker_id=worker_id)
            if status == WorkerStatus.LOST.value:
                raise WorkerLost(
                    f"worker {worker_id!r} was declared lost (no heartbeat in time) and its items were released; "
                    "stop it and register again",
                    worker_id=worker_id,
                )
            row = await conn.fetchrow(self._q["heartbeat"], off, worker_id)
            await conn.execute(self._q["extend_worker_leases"], off, worker_id)
            return _worker(row)

    async def set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None:
        found = await self._run(
            "set worker status", self._fetchval, "set_worker_status", worker_id, status.value, detail
        )
        if found is None:
            raise WorkerNotFound(f"no worker {worker_id!r} is registered; register it first", worker_id=worker_id)

    async def get_worker(self, worker_id: str) -> WorkerRecord | None:
        rows = await self._run("get worker", self._fetch, "get_worker", worker_id)
        return _worker(rows[0]) if rows else None

    async def list_workers(self, filter: WorkerFilter) -> list[WorkerRecord]:
        rows = await self._run("list workers", self._fetch, "list_workers", filter.host)
        now = await self.now()
        records = [_worker(r) for r in rows]
        return [r for r in records if filter.matches(r, now)]

    async def reap(self, threshold: float) -> list[ReapedWorker]:
        reaped = await self._run("reap", self._reap, float(threshold))
        if any(r.released for r in reaped):
            for name in await self.pools():
                await self._notify(name)
        return reaped

    async def _reap(self, conn: Any, threshold: float) -> list[ReapedWorker]:
        off = self._off()
        reaped = []
        async with conn.transaction():
            for worker_id, last_heartbeat, now in await conn.fetch(self._q["silent_workers"], off, threshold):
                detail = f"no heartbeat for {now - last_heartbeat:.1f}s (threshold {threshold:g}s)"
                await conn.execute(self._q["mark_lost"], worker_id, detail)
                status = await conn.execute(self._q["poison_worker_spent"], off, worker_id, None)
                poisoned = int(status.split()[-1])
                status = await conn.execute(self._q["release_worker"], off, worker_id, None, False)
                reaped.append(ReapedWorker(worker_id, last_heartbeat, int(status.split()[-1]), poisoned))
        return reaped

    # -- rate budgets (workhive.budgets.TakesBudget) -------------------------
    async def take_budget(self, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
        """Reserve rate budget for the fleet in one transaction on the server's clock (``TakesBudget``).

        See ``workhive_postgres.budget``: takes are serialised per key across the fleet.
        """
        return await self._run("taking rate budget", take_budget, self._q, self._off, choices, float(max_wait))

    # -- schedules (workhive.schedules.StoresSchedules) -----------------------
    async def schedule_add(self, schedule: Schedule) -> bool:
        """Store ``schedule`` unless its name is taken (``workhive_postgres.schedules``)."""
        return await self._run("adding a schedule", schedules.add, self._q, schedule, rerun=False)

    async def schedule_get(self, name: str) -> Schedule | None:
        """The schedule called ``name``, or None."""
        return await self._run("reading a schedule", schedules.get, self._q, name)

    async def schedule_list(self) -> list[Schedule]:
        """Every schedule, by name."""
        return await self._run("listing schedules", schedules.list_all, self._q)

    async def schedule_remove(self, name: str) -> bool:
        """Delete the schedule; False when there was none."""
        return await self._run("removing a schedule", schedules.remove, self._q, name, rerun=False)

    async def schedule_fire(self, name: str, tick: float, item: NewItem) -> str | None:
        """Record ``tick`` and push ``item`` in one statement, unless a tick at or after it was fired.

        Run again after a dropped connection: the tick is recorded by then or not at all, so a
        second run pushes nothing more (it answers None though the first may have pushed).
        """
        return await self._run(
            "firing a schedule", schedules.fire, self._q, self._off(), self._channel, name, float(tick), item
        )

    # -- shared state -------------------------------------------------------
    async def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        ttl_f = None if ttl is None else float(ttl)
        await self._run("shared state put", self._execute, "state_put", self._off(), namespace, key, value, ttl_f)

    async def state_get(self, namespace: str, key: str) -> str | None:
        value = await self._run("shared state get", self._fetchval, "state_get", self._off(), namespace, key)
        return None if value is None else str(value)

    async def state_scan(self, namespace: str) -> dict[str, str]:
        rows = await self._run("shared state scan", self._fetch, "state_scan", self._off(), namespace)
        return {r[0]: r[1] for r in rows}

    async def state_delete(self, namespace: str, key: str) -> bool:
        live = await self._run("shared state delete", self._fetchval, "state_delete", self._off(), namespace, key)
        return bool(live)
