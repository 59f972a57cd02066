"""``SqliteStorage``: the workhive storage contract on one SQLite file.

Concurrency model
-----------------
* Two connections per ``SqliteStorage``. Each storage operation is one plain
  function (``workhive_sqlite.ops``) running its statements (one autocommit
  statement, or ``BEGIN IMMEDIATE`` … ``COMMIT``) on a raw ``sqlite3``
  connection; statements are prepared once and reused from sqlite3's cache.
* The fast path (``_run``): small operations run right on the event loop's
  thread, on a connection with busy timeout 0 and no automatic checkpoints.
  A locked database answers SQLITE_BUSY at once, before anything changed, and
  the operation is handed to the other connection.
* The threaded connection, owned by aiosqlite's thread, takes what the fast
  path handed over, what scans or writes a lot (``INLINE_MAX``, stats,
  purge, listings), and the WAL checkpoints (``_checkpoint``). There a locked
  database is waited for by SQLite's own busy handler, up to ``busy_timeout``,
  then retried with backoff a bounded number of times before
  ``StorageUnavailable``. One operation is one round trip.
* Writes pass the write gate (``workhive_sqlite.gate``, a ``flock`` on
  ``<file>-whgate``): a write waiting behind a long one (what ``_thread`` runs
  by size) waits there, woken by the kernel when the gate is let go, instead of
  in SQLite's busy handler, whose sleeps left the lock free while every waiter
  slept. Behind a short one it waits in the busy handler as before. The loop's
  connection only tries the gate. Reads (``READS``) and checkpoints never take it.
* Processes share the file in WAL mode. Writers serialise on SQLite's write
  lock, which every write takes before reading, so a claim is atomic across
  processes. Readers never block writers.
* ``wait_for_work`` wakes at once for pushes through this object, and within
  one poll interval (``PRAGMA data_version``, one cheap read per interval
  for all waiters of the process) for commits by other processes.
* Time is hive time (``workhive_sqlite.clock``): a per-boot anchor stored in
  the file plus the machine's monotonic clock, the same for every process on
  the machine and immune to wall-clock steps; or ``clock()`` when injected.
* Only SQLite opens the database file (and its ``-wal`` and ``-shm``). SQLite's
  locks are POSIX advisory locks, which belong to the process and are all
  dropped when *any* descriptor of the file is closed, whoever opened it.
  SQLite itself shares one set of descriptors and locks per file among all the
  connections of a process (a connection closed while others hold locks leaves
  its descriptor open), so any number of ``SqliteStorage`` objects on one file
  in one process is safe. An ``open(path)`` + ``close()`` of our own would drop
  the locks of every other handle in the process: another process would then
  believe it is the file's last user and delete the ``-wal`` and ``-shm`` those
  handles still write to (lost commits, a corrupt index). So the header is
  checked through SQLite (``_setup``), and the checks before connecting only
  ``stat`` the path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from workhive.budgets import BudgetTake
from workhive.errors import HiveNotFound, StorageError, StorageUnavailable
from workhive.models import (
    Ack,
    GroupReport,
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
from workhive_sqlite import groups as _groups
from workhive_sqlite import schedules as _schedules
from workhive_sqlite.budget import take_budget
from workhive_sqlite.clock import HiveClock, TimeSources
from workhive_sqlite.failures import corrupt, failure, foreign, is_busy, is_notadb
from workhive_sqlite.gate import WriteGate
from workhive_sqlite.ops import Operations
from workhive_sqlite.schema import migrate
from workhive_sqlite.url import SqliteConfig, parse_url

__all__ = ["SqliteStorage"]


T = TypeVar("T")

#: How often waiters check whether another process committed (seconds).
POLL_INTERVAL = 0.015
#: Operations that only read: they never take the write gate (workhive_sqlite.gate), as in WAL
#: mode they never wait for a writer either. One missing here would wait its turn among the
#: writes, and hold them up for as long as it ran.
READS: frozenset[Callable[..., Any]] = frozenset(
    {
        Operations.get,
        Operations.get_worker,
        Operations.list_items,
        Operations.list_workers,
        Operations.stats,
        Operations.pools,
        Operations.poll,
        Operations.next_due,
        Operations.data_version,
        Operations.state_get,
        Operations.state_scan,
        Operations.step_list,
        _groups.group_report,
        _schedules.schedule_get,
        _schedules.schedule_list,
    }
)
#: After busy_timeout ran out this many times in a row, give up with StorageUnavailable.
BUSY_RETRIES = 3
#: Batches larger than this (items pushed, claimed or acked) run on the connection's
#: thread: their SQL takes milliseconds, too long to hold the event loop for.
INLINE_MAX = 128
#: After this many operations on the event loop's connection (which never checkpoints
#: itself), a checkpoint runs on the connection's thread. A checkpoint copies each
#: page once however often it was rewritten since the last one, and the hot pages
#: (the front of the ready index, the tail of the lease index) are rewritten by
#: nearly every commit: checkpointing every 2,048 operations instead of every 256
#: measured about 10% more items/s with 4 processes; the log stays bounded by
#: WAL_RESTART_FRAMES either way.
CHECKPOINT_EVERY = 1024
#: A WAL longer than this many frames (4 KiB each) after a passive checkpoint is
#: restarted: under steady writes a passive checkpoint never catches up, and the
#: log would only grow.
WAL_RESTART_FRAMES = 8192
#: Files up to this size get SQLite's ``quick_check`` when opened (it reads every page: about
#: a second per few hundred MiB, paid by every process that opens the file). Larger files
#: are opened on their header and schema alone; every operation still refuses a damaged
#: page it meets with ``StorageCorrupt`` (``failures.failure``).
QUICK_CHECK_MAX_BYTES = 64 * 1024 * 1024


class SqliteStorage:
    """Storage on a SQLite file; what ``workhive.open("sqlite:///…")`` builds.

    ``clock`` replaces hive time (``workhive_sqlite.clock``) as the database clock
    (tests time-travel with it); ``time_sources`` replaces the clocks hive time is
    built from (tests step the wall clock with it).
    ``create=False`` opens only an existing hive: a missing file (or directory)
    raises ``HiveNotFound`` and nothing is created (read-only commands use it).

    >>> async def main():  # doctest: +SKIP
    ...     async with workhive.Hive(SqliteStorage("sqlite:///.workhive/hive.db")) as hive:
    ...         await hive.pool("emails").push({"to": "a@example.com"})
    """

    capabilities = frozenset({"notify", "multiprocess"})

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] | None = None,
        create: bool = True,
        time_sources: TimeSources | None = None,
    ) -> None:
        self.url = url
        self.create = create
        self.config: SqliteConfig = parse_url(url)
        # Resolved now: a later chdir must not move the store.
        self.path = Path(os.path.abspath(self.config.path))
        self._hive_clock: HiveClock | None = None
        self._clock: Callable[[], float]
        if clock is None:
            self._hive_clock = self._clock = HiveClock(time_sources)
        else:
            self._clock = clock
        self._conn: Any = None
        self._execute: Callable[..., Awaitable[Any]] | None = None
        self._ops: Operations | None = None
        # The event loop's own connection (see _run), its thread, and the checkpoint it owes.
        self._fast: Operations | None = None
        self._gate: WriteGate | None = None  # opened with the file (workhive_sqlite.gate)
        self._loop_thread = 0
        self._since_checkpoint = 0
        self._checkpointing: asyncio.Task[None] | None = None
        self._events: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        self._due: dict[str, float | None] = {}
        self._watcher: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<SqliteStorage {str(self.path)!r} {'open' if self._conn is not None else 'closed'}>"

    # -- lifecycle ----------------------------------------------------------
    async def open(self) -> None:
        if self._conn is not None:
            return
        import aiosqlite

        self._check_path()
        cfg = self.config
        connecting = aiosqlite.connect(
            self._target(),
            # SQLite waits for another process's write lock (ops.py says why its own busy
            # handler); past the timeout, _retry_busy takes over.
            timeout=cfg.busy_timeout_ms / 1000,
            isolation_level=None,  # autocommit: transactions are explicit BEGIN IMMEDIATE … COMMIT
            check_same_thread=False,
            cached_statements=256,
            uri=not self.create,
        )
        # aiosqlite's thread is not a daemon: a program that never closes its hive
        # would hang at exit waiting for it. As a daemon it ends with the program;
        # SQLite's journal makes that as safe as a crash (a commit is all or nothing).
        thread = getattr(connecting, "_thread", None)
        if thread is None:
            raise StorageUnavailable(
                f"this aiosqlite ({getattr(aiosqlite, '__version__', '?')}) has no Connection._thread; "
                "install a supported version: pip install 'aiosqlite>=0.20,<1'"
            )
        thread.daemon = True
        thread.name = f"workhive-sqlite {self.path.name}"
        conn = await connecting
        # One round trip per operation needs a way to run a function on the
        # connection's thread; aiosqlite's `_execute(fn, *args)` is that (stable
        # since aiosqlite 0.x through 0.22, the same queue its public methods use).
        # The alternative, a private thread of our own, would duplicate aiosqlite
        # entirely; we check for the method here so a changed aiosqlite fails loudly.
        execute = getattr(conn, "_execute", None)
        if execute is None:
            await conn.close()
            raise StorageUnavailable(
                f"this aiosqlite ({getattr(aiosqlite, '__version__', '?')}) lacks Connection._execute; "
                "install a supported version: pip install 'aiosqlite>=0.20,<1'"
            )
        self._conn, self._execute = conn, execute
        # `_conn` is aiosqlite's raw sqlite3 connection, used only on its thread.
        self._ops = Operations(conn._conn, self._clock)
        try:
            await self._call(self._setup)
            self._open_fast()
            self._gate = WriteGate.open(self.path)
        except BaseException:
            await self.close()
            raise

    def _open_fast(self) -> None:
        """Open the event loop's own connection: no busy wait, no checkpoints (see ``_run``)."""
        try:
            self._connect_fast()
        except sqlite3.Error as exc:
            raise failure(self.path, exc) from exc

    def _connect_fast(self) -> None:
        conn = sqlite3.connect(
            self._target(),
            timeout=0,  # SQLITE_BUSY at once: the operation then goes to the thread, which waits
            isolation_level=None,
            check_same_thread=False,  # _run checks the thread itself and falls back
            cached_statements=256,
            uri=not self.create,
        )
        try:
            self._session_pragmas(conn)  # a checkpoint fsyncs: it runs on the connection's thread instead
        except BaseException:
            conn.close()
            raise
        self._fast = Operations(conn, self._clock, optimistic=True)
        self._loop_thread = threading.get_ident()

    def _session_pragmas(self, conn: sqlite3.Connection) -> None:
        """What each connection sets for itself (both: the event loop's and the thread's)."""
        conn.execute(f"PRAGMA synchronous = {self.config.synchronous.upper()}")
        # Checkpoints run as their own step on the thread's connection (_checkpoint), between
        # operations, while the event loop goes on: not inside a commit.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        # A statement's temporary tables (an UPDATE with triggers keeps the rows it changes in
        # one; RETURNING keeps its rows in another) stay in memory, not in a temporary file: a
        # grouped claim of 512 items wrote about 90 KB there (0.78 blocks of 512 bytes an item
        # written against 0.44 in memory; an ungrouped claim's 0.38 either way). What they hold
        # is bounded by a statement's rows: a claim's or a batch of settlements' (at most 10,000
        # items); the largest is the sort behind a group report's counts, about 20 bytes per
        # pending item of the pool while the report runs.
        conn.execute("PRAGMA temp_store = MEMORY")

    def _target(self) -> str:
        """What the connections open: the path, or with ``create=False`` a URI that never creates the file."""
        if self.create:
            return str(self.path)
        # mode=rw: SQLite refuses a missing file instead of creating it, so a file
        # deleted between _check_path and the connect is not silently recreated.
        return f"{self.path.as_uri()}?mode=rw"

    def _not_found(self, why: str) -> HiveNotFound:
        return HiveNotFound(
            f"no workhive hive at {self.path}: {why}; check the storage URL, or push to it first "
            "(reading never creates one)",
            path=str(self.path),
        )

    def _check_path(self) -> None:
        path = self.path
        if not self.create:
            # Checked before anything else: nothing may be created, not even the directory.
            if not path.parent.is_dir():
                raise self._not_found(f"the directory {path.parent} does not exist")
            if not path.exists():
                raise self._not_found("the file does not exist")
            if path.is_file() and path.stat().st_size == 0:
                raise self._not_found("the file is empty")
        if path.is_dir():
            raise StorageUnavailable(
                f"SQLite store {path} is a directory; the URL must name a file, e.g. sqlite:///{path}/hive.db",
                path=str(path),
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageUnavailable(
                f"cannot create the directory {path.parent} for SQLite store {path}: {exc.strerror or exc}; "
                "create it yourself or point the URL at a writable location",
                path=str(path),
            ) from None
        # WAL needs to create -wal and -shm files next to the database.
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise StorageUnavailable(
                f"SQLite store {path}: directory {path.parent} is not writable (WAL keeps its -wal and -shm "
                "files there); fix its permissions or choose another path",
                path=str(path),
            )
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise StorageUnavailable(
                f"SQLite store {path} is not readable and writable by this user; fix its permissions",
                path=str(path),
            )
        # Never open the file here, not even to read its header: closing that descriptor would
        # drop every POSIX lock this process holds on it (see the module docstring). The
        # header is read by SQLite, the first thing _setup does.

    def _read_header(self, conn: sqlite3.Connection) -> int:
        """The file's ``user_version``, read by SQLite; a file whose first page is no SQLite header is refused.

        SQLite checks the header before it reads or writes anything else, and
        answers SQLITE_NOTADB for a file that is not a database; nothing is
        written to it. An empty (or new) file reads as version 0.
        """
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            if is_notadb(exc):
                raise foreign(self.path) from None
            raise

    def _setup(self) -> None:
        assert self._ops is not None
        conn = self._ops.conn
        if sqlite3.sqlite_version_info < (3, 35, 0):
            raise StorageUnavailable(
                f"workhive-sqlite needs SQLite >= 3.35 (RETURNING); this Python links {sqlite3.sqlite_version}"
            )
        # Before WAL mode is set, which would write to the file.
        if self._read_header(conn) == 0 and not self.create:
            raise self._not_found("the file holds no workhive schema")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StorageUnavailable(
                f"SQLite store {self.path} could not switch to WAL mode (got {mode!r}); WAL needs a local "
                "filesystem with shared memory, not a network share",
                path=str(self.path),
            )
        self._session_pragmas(conn)
        migrate(conn, str(self.path), self._ops.begin)
        self._check_integrity(conn)
        if self._hive_clock is not None:
            self._ops.write(self._hive_clock.anchor, conn)

    def _check_integrity(self, conn: sqlite3.Connection) -> None:
        """Refuse a damaged file at open, so no command half-works on it (see ``QUICK_CHECK_MAX_BYTES``).

        The header and the schema were read already (a damaged one failed there).
        """
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        if pages * page_size <= QUICK_CHECK_MAX_BYTES:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise corrupt(self.path, "; ".join(problems))

    async def close(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None and not watcher.done():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        for pool in list(self._events):
            self._notify(pool)
        checkpointing, self._checkpointing = self._checkpointing, None
        if checkpointing is not None and not checkpointing.done():
            # Let it finish: it is already on the thread, and closing waits for it anyway.
            with contextlib.suppress(Exception):
                await checkpointing
        if self._hive_clock is not None and self._hive_clock.anchored and self._ops is not None:
            # The floor for the next boot's anchor (see workhive_sqlite.clock); best effort.
            with contextlib.suppress(StorageError):
                await self._call(Operations.write, self._db, self._hive_clock.record, self._db.conn)
        fast, self._fast = self._fast, None
        if fast is not None:
            # Closed first, so the threaded connection is the file's last one in this
            # process and its close (on the thread) does the final checkpoint.
            fast.conn.close()
        conn, self._conn, self._execute, self._ops = self._conn, None, None, None
        if conn is not None:
            await conn.close()
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.close()  # after the thread's last operation: it may have held the gate

    async def now(self) -> float:
        return self._clock()

    # -- the fast path: no thread hop ------------------------------------------
    async def _run(self, op: Callable[..., T], *args: Any) -> T:
        """Run ``op`` (an unbound ``Operations`` method) on the loop's connection, else on the thread.

        Most operations are a few statements taking tens of microseconds, while
        a round trip to aiosqlite's thread costs about as much again, twice per
        worker item. So ``op`` first runs right here on a second connection whose
        busy timeout is 0: when another connection holds the write lock, SQLite
        answers SQLITE_BUSY at once, before the operation changed anything (a
        write takes the lock before it reads, and a failed transaction is rolled
        back), and the operation is run on the thread, which waits for the lock
        as before. (A claim by turns reads first and takes the lock with its
        first write, ``Operations.optimistic_write``: busy there too when another
        connection committed since its reads, and rolled back, nothing changed.)
        The event loop is blocked for the SQL itself, never for a lock wait, and
        never for a checkpoint's fsync (``_checkpoint``).

        Why not retry here first, yielding the CPU to the lock holder? Measured
        with 4 processes on 2 cores: up to 16 tries with ``os.sched_yield``
        between them sent almost no operation to the thread, but burnt CPU on
        failed attempts (each new read snapshot also re-reads the pages another
        process changed), and gave no more items/s than going to the thread at
        once, where the loser sleeps and leaves the CPU to the holder. Retrying
        here after an ``asyncio.sleep`` of about 1 ms (SQLite's own first busy
        wait), without blocking the loop, was slower still: a quarter fewer items/s.
        """
        fast = self._fast
        gate = None if op in READS else self._gate
        if fast is not None and threading.get_ident() == self._loop_thread:
            if gate is not None and not gate.try_enter():
                # Another writer holds the gate: on the thread, queued behind it if it is a long
                # write, else in SQLite's busy handler (workhive_sqlite.gate says why).
                return await self._call(op, self._db, *args, queue=gate.long_write_holds_it())
            try:
                result: T = op(fast, *args)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise failure(self.path, exc) from exc
                # Locked by another connection; nothing was changed: wait on the thread.
            except sqlite3.Error as exc:
                raise failure(self.path, exc) from exc
            else:
                self._since_checkpoint += 1
                if self._since_checkpoint >= CHECKPOINT_EVERY:
                    self._start_checkpoint()
                return result
            finally:
                if gate is not None:
                    gate.leave()
        return await self._call(op, self._db, *args, queue=gate is not None and gate.long_write_holds_it())

    async def _thread(self, op: Callable[..., T], *args: Any, weight: int = 1) -> T:
        """Run ``op`` on the connection's thread: for work that scans or writes a lot (see ``INLINE_MAX``).

        ``weight`` is how many small operations' worth of WAL it may write, for ``CHECKPOINT_EVERY``.
        """
        result = await self._call(op, self._db, *args, long=op not in READS)
        self._since_checkpoint += weight
        if self._since_checkpoint >= CHECKPOINT_EVERY:
            self._start_checkpoint()
        return result

    def _start_checkpoint(self) -> None:
        self._since_checkpoint = 0
        if self._checkpointing is None or self._checkpointing.done():
            self._checkpointing = asyncio.get_running_loop().create_task(self._checkpoint())

    async def _checkpoint(self) -> None:
        """Copy the WAL back into the database on the thread (the loop's connection never does).

        Without it the log would grow for as long as this process writes; each
        process checkpoints for its own writes, so the log stays bounded
        however many share the file.
        """
        with contextlib.suppress(StorageError):
            await self._call(Operations.checkpoint, self._db, WAL_RESTART_FRAMES)
            if self._hive_clock is not None:
                await self._call(Operations.write, self._db, self._hive_clock.record, self._db.conn)

    # -- the one round trip -------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any, queue: bool = False, long: bool = False) -> T:
        """``fn(*args)`` on the connection's thread: one round trip.

        ``long``: a write long enough that others should queue behind it, which holds the write
        gate throughout (waiting for it first); ``queue``: a write that waits for the gate first.
        """
        execute = self._execute
        if execute is None:
            raise StorageUnavailable(
                f"SQLite store {self.path} is not open; use `async with hive:` (or await hive.open()) first",
                path=str(self.path),
            )
        gate = self._gate
        if gate is not None and (long or queue):
            fn, args = (gate.through_long if long else gate.through), (fn, *args)
        try:
            result: T = await execute(fn, *args)
            return result
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                return await self._retry_busy(fn, args)
            raise failure(self.path, exc) from exc
        except sqlite3.Error as exc:
            raise failure(self.path, exc) from exc

    async def _retry_busy(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        # SQLite already waited busy_timeout; keep the worker alive through a long
        # writer elsewhere, but not forever: a stuck lock must surface.
        for attempt in range(BUSY_RETRIES):
            await asyncio.sleep(min(0.05 * 2**attempt, 1.0) * (0.5 + random.random()))
            execute = self._execute
            if execute is None:
                break
            try:
                result: T = await execute(fn, *args)
                return result
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise failure(self.path, exc) from exc
        waited = self.config.busy_timeout_ms / 1000 * (BUSY_RETRIES + 1)
        raise StorageUnavailable(
            f"SQLite store {self.path} stayed locked for over {waited:g}s: another process holds a long "
            f"write transaction (find it with `fuser {self.path}`), or raise the wait with "
            "?busy_timeout=<ms> in the storage URL",
            path=str(self.path),
        )

    @property
    def _db(self) -> Operations:
        ops = self._ops
        if ops is None:
            raise StorageUnavailable(
                f"SQLite store {self.path} is not open; use `async with hive:` (or await hive.open()) first",
                path=str(self.path),
            )
        return ops

    # -- wake-ups -----------------------------------------------------------
    def _notify(self, pool: str) -> None:
        event = self._events.pop(pool, None)
        if event is not None:
            event.set()

    async def wait_for_work(self, pool: str, timeout: float) -> None:
        # Take the event before looking, so a push landing between the look and
        # the wait still wakes us.
        event = self._events.get(pool)
        if event is None:
            event = self._events[pool] = asyncio.Event()
        due = (await self._run(Operations.next_due, (pool,)))[pool]
        if timeout <= 0 or (due is not None and due <= self._clock()):
            return
        self._waiting[pool] = self._waiting.get(pool, 0) + 1
        known = self._due.get(pool)
        self._due[pool] = due if known is None or (due is not None and due < known) else known
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            left = self._waiting.pop(pool, 1) - 1
            if left:
                self._waiting[pool] = left
            else:
                self._due.pop(pool, None)

    async def _watch(self) -> None:
        try:
            version = await self._run(Operations.data_version)
            while self._waiting:
                await asyncio.sleep(POLL_INTERVAL)
                now = self._clock()
                for pool, due in list(self._due.items()):
                    if due is not None and due <= now:
                        self._notify(pool)
                pools = list(self._waiting)
                if not pools:
                    break
                version, dues = await self._run(Operations.poll, version, pools)
                if dues is not None:
                    for pool, due in dues.items():
                        if pool in self._waiting:
                            self._due[pool] = due
                        if due is not None and due <= now:
                            self._notify(pool)
        except (StorageError, RuntimeError):
            # Closed or broken store: let every waiter go; its next call reports the error.
            for pool in list(self._events):
                self._notify(pool)

    # -- items --------------------------------------------------------------
    async def push(self, pool: str, items: Sequence[NewItem]) -> list[str]:
        if len(items) <= INLINE_MAX:
            ids = await self._run(Operations.push, pool, items)
        else:
            ids = await self._thread(Operations.push, pool, items, weight=len(items) // 8)
        self._notify(pool)
        return ids

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        return await (self._run if limit <= INLINE_MAX else self._thread)(
            Operations.claim, pool, worker_id, limit, lease
        )

    async def complete(self, pool: str, acks: Sequence[Ack]) -> list[bool]:
        return await (self._run if len(acks) <= INLINE_MAX else self._thread)(Operations.complete, pool, acks)

    async def complete_and_claim(
        self, pool: str, ack: Ack, worker_id: str, limit: int, lease: float
    ) -> tuple[bool, list[WorkItem]]:
        # One BEGIN IMMEDIATE … COMMIT on the fast path: when the lock is taken,
        # BEGIN answers SQLITE_BUSY before anything changed and the thread retries it whole.
        return await (self._run if limit <= INLINE_MAX else self._thread)(
            Operations.complete_and_claim, pool, ack, worker_id, limit, lease
        )

    async def fail(
        self, pool: str, item_id: str, token: int, error: str, retry_in: float, poison: bool
    ) -> ItemState | None:
        state = await self._run(Operations.fail, pool, item_id, token, error, retry_in, poison)
        if state is ItemState.PENDING:
            self._notify(pool)
        return state

    async def release(self, pool: str, item_id: str, token: int, delay: float) -> bool:
        released = await self._run(Operations.release, pool, item_id, token, delay)
        if released:
            self._notify(pool)
        return released

    async def extend(self, pool: str, item_id: str, token: int, lease: float) -> float | None:
        return await self._run(Operations.extend, pool, item_id, token, lease)

    async def get(self, pool: str, item_id: str) -> WorkItem | None:
        return await self._run(Operations.get, pool, item_id)

    async def list_items(self, pool: str, state: ItemState, limit: int, offset: int = 0) -> list[WorkItem]:
        return await self._thread(Operations.list_items, pool, state, limit, offset)

    async def requeue(self, pool: str, item_ids: Sequence[str] | None) -> int:
        count = await self._thread(Operations.requeue, pool, item_ids)
        if count:
            self._notify(pool)
        return count

    async def release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> int:
        count = await self._thread(Operations.release_by_worker, pool, worker_id, spend_attempt)
        if count:
            self._notify_all(pool)
        return count

    def _notify_all(self, pool: str | None) -> None:
        for name in [pool] if pool is not None else list(self._events):
            self._notify(name)

    async def cancel(self, pool: str, item_ids: Sequence[str]) -> list[ItemState | None]:
        return await self._thread(Operations.cancel, pool, item_ids)

    async def purge(self, pool: str, older_than: float) -> int:
        return await self._thread(Operations.purge, pool, older_than)

    # -- groups (workhive.storage.ServesGroups, rules GR1-GR9) ---------------
    async def set_group_weight(self, pool: str, group: str, weight: float) -> None:
        """Group ``group`` takes ``weight`` shares of the pool's turns (``workhive_sqlite.groups``)."""
        await self._run(_groups.set_group_weight, pool, group, weight)

    async def set_group_limit(self, pool: str, group: str | None, limit: int | None) -> None:
        """At most ``limit`` claims of ``group`` in flight; ``group`` None sets the default of named groups."""
        await self._run(_groups.set_group_limit, pool, group, limit)
        self._notify(pool)  # a raised limit may free a waiting claim

    async def set_pool_limit(self, pool: str, limit: int | None) -> None:
        """At most ``limit`` claims of ``pool`` in flight; None removes the limit."""
        await self._run(_groups.set_pool_limit, pool, limit)
        self._notify(pool)

    async def pause_group(self, pool: str, group: str, seconds: float | None) -> None:
        """Claims skip ``group`` until hive time now + ``seconds``; None resumes it at once."""
        await self._run(_groups.pause_group, pool, group, seconds)
        self._notify(pool)

    async def group_report(self, pool: str) -> GroupReport:
        """The pool's limits and its groups' settings and counts (``GroupReport``)."""
        return await self._thread(_groups.group_report, pool)

    # -- durable steps (KeepsSteps, rules ST1-ST5) --------------------------
    async def step_put(self, pool: str, item_id: str, token: int, key: str, payload: str, failed: bool) -> bool:
        return await self._run(Operations.step_put, pool, item_id, token, key, payload, failed)

    async def step_list(self, pool: str, item_id: str) -> list[StepRecord]:
        return await self._run(Operations.step_list, pool, item_id)

    async def step_clear(self, pool: str, item_ids: Sequence[str]) -> int:
        return await self._thread(Operations.step_clear, pool, item_ids)

    async def stats(self, pool: str) -> PoolStats:
        return await self._thread(Operations.stats, pool)

    async def pools(self) -> list[str]:
        return await self._thread(Operations.pools)

    # -- workers ------------------------------------------------------------
    async def register_worker(self, registration: WorkerRegistration) -> WorkerRecord:
        return await self._run(Operations.register_worker, registration)

    async def heartbeat(self, worker_id: str) -> WorkerRecord:
        return await self._run(Operations.heartbeat, worker_id)

    async def set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None:
        await self._run(Operations.set_worker_status, worker_id, status, detail)

    async def get_worker(self, worker_id: str) -> WorkerRecord | None:
        return await self._run(Operations.get_worker, worker_id)

    async def list_workers(self, filter: WorkerFilter) -> list[WorkerRecord]:
        return await self._thread(Operations.list_workers, filter)

    async def reap(self, threshold: float) -> list[ReapedWorker]:
        reaped = await self._thread(Operations.reap, threshold)
        if any(r.released for r in reaped):
            self._notify_all(None)
        return reaped

    # -- shared state -------------------------------------------------------
    async def take_budget(self, choices: Sequence[Sequence[BudgetTake]], max_wait: float) -> tuple[int, float]:
        """Reserve rate budget for the fleet in one transaction (``workhive.budgets.TakesBudget``)."""
        return await self._run(take_budget, choices, max_wait)

    # -- schedules (workhive.schedules.StoresSchedules) -----------------------
    async def schedule_add(self, schedule: Schedule) -> bool:
        """Store ``schedule`` unless its name is taken (``workhive_sqlite.schedules``)."""
        return await self._run(_schedules.schedule_add, schedule)

    async def schedule_get(self, name: str) -> Schedule | None:
        """The schedule called ``name``, or None."""
        return await self._run(_schedules.schedule_get, name)

    async def schedule_list(self) -> list[Schedule]:
        """Every schedule, by name."""
        return await self._run(_schedules.schedule_list)

    async def schedule_remove(self, name: str) -> bool:
        """Delete the schedule; False when there was none."""
        return await self._run(_schedules.schedule_remove, name)

    async def schedule_fire(self, name: str, tick: float, item: NewItem) -> str | None:
        """Record ``tick`` and push ``item`` in one transaction, unless a tick at or after it was fired."""
        fired = await self._run(_schedules.schedule_fire, name, tick, item)
        if fired is None:
            return None
        self._notify(fired[0])
        return fired[1]

    async def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        await self._run(Operations.state_put, namespace, key, value, ttl)

    async def state_get(self, namespace: str, key: str) -> str | None:
        return await self._run(Operations.state_get, namespace, key)

    async def state_scan(self, namespace: str) -> dict[str, str]:
        return await self._run(Operations.state_scan, namespace)

    async def state_delete(self, namespace: str, key: str) -> bool:
        return await self._run(Operations.state_delete, namespace, key)
