"""``PostgresLocks``: fleet-wide named locks with fencing tokens, on PostgreSQL advisory locks.

A held lock is a session advisory lock on (schema key, lock id), held by a
connection kept for as long as the lock is held:

* One holder at a time on every machine that reaches the server.
* A crashed holder's lock is freed by the server when its connection ends
  (the process dies, or TCP keepalive gives up on a dead machine: idle 10 s,
  then 3 probes 5 s apart). A live holder past its ttl is reported, never broken.
* A waiter blocks in ``pg_advisory_lock`` under ``lock_timeout``: the server
  wakes it when the lock frees, however it frees. No polling.
* The ``locks`` table row of a name keeps its fencing token (it only rises, also
  across processes and restarts) and the holder's pid, host and worker.

Behind PgBouncer: in session mode the locks work through it unchanged (a client
session keeps its server connection, and PgBouncer's ``DISCARD ALL`` frees the
locks of a client that went away). In transaction mode a session lock would stay
on a server connection PgBouncer hands to someone else: the locks connect to
``?direct_host=`` (PostgreSQL itself), and without it every call is refused with
``LockSystemError`` saying so.

>>> async def main():  # doctest: +SKIP
...     locks = PostgresLocks("postgresql://app@db.example/jobs")
...     held = await locks.acquire("repo:acme", ttl=60, timeout=5, worker_id="w1")
...     await locks.release(held)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import zlib
from typing import Any

from workhive.errors import LockNotHeld, LockSystemError, WorkhiveError
from workhive.locks import HeldLock, LockHolder, check_lock_args, check_lock_name, lock_timeout_error, report_overdue
from workhive_postgres.failures import is_connection_loss, open_failure
from workhive_postgres.schema import ensure_schema
from workhive_postgres.sqlfiles import statements
from workhive_postgres.url import PostgresConfig, parse_url

__all__ = ["PostgresLocks"]

#: Connections this provider may use at once: one per held lock and one per waiter.
MAX_CONNECTIONS = 32
_KEEPALIVE = {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"}


def _encode(name: str) -> tuple[bytes, bytes]:
    raw = name.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).digest(), raw


#: the client-side bound of a wait the caller asked to last forever (asyncpg needs a number)
FOREVER = 10.0**9


class PostgresLocks:
    """Fleet-wide locks in a hive's PostgreSQL schema; see the module docstring."""

    #: tokens live in the database: a new provider (or process, or machine) continues them
    persistent_tokens = True

    def __init__(self, url: str) -> None:
        self.config: PostgresConfig = parse_url(url)
        self.url = self.config.redacted
        # Non-negative, as pg_locks shows advisory keys as oids.
        self._schema_key = zlib.crc32(f"workhive-locks:{self.config.schema}".encode()) & 0x7FFFFFFF
        self._q = statements(self.config.schema, "locks.sql")
        self._pool: Any = None
        self._opening = asyncio.Lock()
        self._held: dict[object, tuple[Any, int, int]] = {}
        self._host = socket.gethostname()
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresLocks({self.url!r})"

    async def _open(self) -> Any:
        if self._closed:
            raise LockSystemError(f"{self!r} is closed; create a new provider")
        if self._pool is not None:
            return self._pool
        if not self.config.sessions_reach_server:
            raise LockSystemError(
                f"fleet-wide locks at {self.config.where} cannot work through PgBouncer in transaction mode "
                "(a lock is held by a session, and each transaction may run on another server connection): "
                "add ?direct_host=HOST&direct_port=PORT naming PostgreSQL itself, point the locks at a "
                "session-mode PgBouncer (?pgbouncer=session), or use other locks (WORKHIVE_LOCKS)",
                where=self.config.where,
            )
        async with self._opening:
            if self._pool is not None:
                return self._pool
            import asyncpg

            cfg = self.config
            # Server-side keepalives are startup parameters, which PgBouncer refuses; behind it the
            # holder's side is watched by PgBouncer's own tcp_keepalive settings instead.
            direct = cfg.direct()
            keepalive = _KEEPALIVE if direct.pgbouncer is None else {}
            try:
                pool = await asyncpg.create_pool(
                    **direct.connect_kwargs(),
                    # A statement a stalled or half-open network leaves unanswered fails instead of
                    # hanging its caller (a supervisor's reaper); the wait for a lock sets its own.
                    command_timeout=cfg.command_timeout,
                    min_size=0,
                    max_size=MAX_CONNECTIONS,
                    server_settings={"application_name": cfg.application_name, **keepalive},
                )
                async with pool.acquire() as conn:
                    await ensure_schema(conn, cfg, create=True)
            except WorkhiveError as exc:
                raise LockSystemError(str(exc)) from None
            except Exception as exc:
                raise LockSystemError(str(open_failure(direct, exc))) from None
            self._pool = pool
            return pool

    async def acquire(
        self, name: str, *, ttl: float | None = None, timeout: float | None = None, worker_id: str | None = None
    ) -> HeldLock:
        """Take lock ``name``; ``timeout=None`` waits forever, ``0`` tries once (``LockTimeout`` names the holder)."""
        check_lock_args(name, ttl, timeout, worker_id)
        pool = await self._open()
        name_hash, raw = _encode(name)
        ttl_f = None if ttl is None else float(ttl)
        q = self._q
        conn = await pool.acquire()
        try:
            lock_id = await self._lock_row(conn, name, name_hash, raw)
            if not await conn.fetchval(q["try_lock"], self._schema_key, lock_id):
                await self._wait(conn, name, name_hash, lock_id, timeout)
            row = await conn.fetchrow(q["record_holder"], lock_id, os.getpid(), self._host, worker_id, ttl_f)
        except BaseException as exc:
            # Whatever happened (a timeout, a cancel mid-wait), this connection may hold the
            # lock or be granted it any moment: ending the connection frees it for sure.
            _end(conn)
            await pool.release(conn)
            if isinstance(exc, WorkhiveError) or not isinstance(exc, Exception):
                raise
            raise self._failure(exc, f"taking lock {name!r}") from None
        handle = object()
        self._held[handle] = (conn, lock_id, int(row[0]))
        return HeldLock(name=name, token=int(row[0]), acquired_at=float(row[1]), ttl=ttl_f, handle=handle)

    async def _lock_row(self, conn: Any, name: str, name_hash: bytes, raw: bytes) -> int:
        """The id of lock ``name``'s row, created on first use.

        Two sessions creating the same lock at once: the second one's insert waits for
        the first one's and then does nothing, and its own look-up, which reads the
        snapshot taken when its statement began, cannot see the row either. Asking
        again, in a new statement, finds it.
        """
        for _ in range(3):
            lock_id = await conn.fetchval(self._q["lock_row"], name_hash, raw)
            if lock_id is not None:
                return int(lock_id)
        raise LockSystemError(f"the row of lock {name!r} keeps vanishing while it is taken (is something deleting it?)")

    async def _wait(self, conn: Any, name: str, name_hash: bytes, lock_id: int, timeout: float | None) -> None:
        """Block in the server until the lock is ours, or raise ``LockTimeout`` naming the holder."""
        import asyncpg

        holder = await self._holders(conn, name_hash)
        current = holder[0] if holder else None
        now = await conn.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8")
        if current is not None and current.overdue(now):
            report_overdue(current, now)
        if timeout == 0:
            raise lock_timeout_error(name, current, 0.0)
        # lock_timeout bounds the wait inside the server; '0' is forever.
        limit = "0" if timeout is None else f"{max(1, round(timeout * 1000))}ms"
        await conn.execute(self._q["set_lock_timeout"], limit)
        try:
            # The server bounds this wait (lock_timeout); the client only outlasts it.
            wait = FOREVER if timeout is None else timeout + self.config.command_timeout
            await conn.execute(self._q["wait_lock"], self._schema_key, lock_id, timeout=wait)
        except asyncpg.exceptions.LockNotAvailableError:
            holder = await self._holders(conn, name_hash)
            raise lock_timeout_error(name, holder[0] if holder else current, float(timeout or 0.0)) from None
        finally:
            if not conn.is_closed():
                await conn.execute(self._q["set_lock_timeout"], "0")

    async def release(self, lock: HeldLock) -> None:
        """Release ``lock``; ``LockNotHeld`` if it was released already or is not from this provider."""
        handle = lock.handle if isinstance(lock, HeldLock) else None
        entry = self._held.pop(handle, None) if handle is not None else None
        if entry is None:
            name = lock.name if isinstance(lock, HeldLock) else lock
            raise LockNotHeld(
                f"lock {name!r} is not held by this provider (released already, or acquired elsewhere)", name=name
            )
        conn, lock_id, token = entry
        try:
            await conn.execute(self._q["clear_holder"], lock_id, token)
            await conn.fetchval(self._q["unlock"], self._schema_key, lock_id)
        except Exception as exc:
            # A lost connection has freed the lock already; anything else: end the session to free it.
            _end(conn)
            if not is_connection_loss(exc):
                raise self._failure(exc, f"releasing lock {lock.name!r}") from None
        finally:
            await self._pool.release(conn)

    async def _holders(self, conn: Any, name_hash: bytes | None) -> list[LockHolder]:
        rows = await conn.fetch(self._q["holders"], self._schema_key, name_hash)
        return [
            LockHolder(
                name=bytes(r[0]).decode("utf-8", "surrogatepass"),
                token=int(r[1]),
                pid=int(r[2] or 0),
                host=str(r[3] or "?"),
                worker_id=r[4],
                acquired_at=float(r[5] or 0.0),
                ttl=r[6],
            )
            for r in rows
        ]

    async def holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` right now (a live session), or None."""
        check_lock_name(name)
        pool = await self._open()
        try:
            async with pool.acquire() as conn:
                found = await self._holders(conn, _encode(name)[0])
        except WorkhiveError:
            raise
        except Exception as exc:
            raise self._failure(exc, f"reading lock {name!r}") from None
        return found[0] if found else None

    async def list_locks(self) -> list[LockHolder]:
        """Every lock held right now in this schema, sorted by name."""
        pool = await self._open()
        try:
            async with pool.acquire() as conn:
                found = await self._holders(conn, None)
        except WorkhiveError:
            raise
        except Exception as exc:
            raise self._failure(exc, "listing locks") from None
        return sorted(found, key=lambda h: h.name)

    async def close(self) -> None:
        """Release every lock still held through this provider; it cannot be used afterwards."""
        self._closed = True
        for handle in list(self._held):
            conn, lock_id, token = self._held.pop(handle)
            with contextlib.suppress(Exception):
                await conn.execute(self._q["clear_holder"], lock_id, token)
            _end(conn)  # frees every advisory lock of the session
            with contextlib.suppress(Exception):
                await self._pool.release(conn)
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 10)
            except Exception:
                pool.terminate()

    def _failure(self, exc: BaseException, what: str) -> LockSystemError:
        return LockSystemError(
            f"{what} failed at PostgreSQL {self.config.where}: {type(exc).__name__}: "
            f"{(str(exc).strip().splitlines() or [''])[0]}",
            where=self.config.where,
        )


def _end(conn: Any) -> None:
    """End a pooled connection's session. One the network already lost is detached from asyncpg's
    pool, which then refuses ``terminate()``: its session (and every lock it held) is gone anyway."""
    with contextlib.suppress(Exception):
        conn.terminate()
