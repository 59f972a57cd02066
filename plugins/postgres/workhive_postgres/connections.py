"""``ConnectionPool``: the storage's asyncpg connections, handed out and taken back without awaiting.

asyncpg's own pool costs about 40 us of this process's time per acquire and
release (a task to shield each release, a timer per idle connection, a queue),
paid twice per item by a worker claiming and completing one at a time: as much
as the statements themselves. This pool keeps idle connections on a stack,
opens new ones up to ``max_size`` when none is idle, serves waiters first come
first served, and takes a connection back synchronously. A connection that
comes back closed, or inside a transaction (its call was cancelled mid-way), is
dropped, and its place goes to the next waiter.

>>> async def main():  # doctest: +SKIP
...     pool = ConnectionPool(lambda: asyncpg.connect(dsn), max_size=8)
...     conn = await pool.acquire()
...     try:
...         await conn.fetchval("SELECT 1")
...     finally:
...         pool.release(conn)
...     await pool.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["ConnectionPool", "PoolClosed"]


class PoolClosed(Exception):
    """The pool was closed: no connection is handed out any more."""


class ConnectionPool:
    """Up to ``max_size`` connections made by ``connect``, reused most recently released first."""

    def __init__(self, connect: Callable[[], Awaitable[Any]], max_size: int) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {max_size}")
        self._connect = connect
        self.max_size = max_size
        self._idle: list[Any] = []
        self._size = 0  # connections open or being opened
        self._out = 0  # connections handed out (to a caller, or to a waiter not yet resumed)
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._closing = False
        self._all_back: asyncio.Event | None = None
        # Bumped by connection_lost: a connection opened in an earlier epoch is not reused.
        self._epoch = 0
        self._opened_in: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    @property
    def size(self) -> int:
        """Connections open or being opened."""
        return self._size

    def take_idle(self) -> Any | None:
        """An idle open connection, handed out as ``acquire`` would, or None: then await ``acquire``.

        Not a coroutine: the usual case (a connection is idle) costs no coroutine to create and await,
        twice per item of a worker claiming and completing one at a time.
        """
        if self._closing:
            return None
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                self._out += 1
                return conn
            self._size -= 1
        return None

    async def acquire(self) -> Any:
        """An open connection: an idle one, a new one while under ``max_size``, else the next released."""
        if self._closing:
            raise PoolClosed("the connection pool is closed")
        idle = self.take_idle()
        if idle is not None:
            return idle
        if self._size < self.max_size:
            self._size += 1
        else:
            waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                handed = await waiter
            except asyncio.CancelledError:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    # Handed something just as we were cancelled: pass it on.
                    if waiter.result() is not None:
                        self.release(waiter.result())
                    else:
                        self._free_place()
                raise
            if handed is not None:
                return handed  # already counted as out by release
            # None: a connection was dropped and its place is ours; open one in it.
        try:
            conn = await self._connect()
        except BaseException:
            self._free_place()
            raise
        if self._closing:
            conn.terminate()
            self._free_place()
            raise PoolClosed("the connection pool was closed while a connection was opened")
        self._opened_in[conn] = self._epoch
        self._out += 1
        return conn

    def release(self, conn: Any) -> None:
        """Take ``conn`` back (never awaits, never raises): to the next waiter, or onto the idle stack."""
        stale = self._opened_in.get(conn, self._epoch) < self._epoch
        if self._closing or stale or conn.is_closed() or conn.is_in_transaction():
            if not conn.is_closed():
                conn.terminate()  # a transaction left open, opened before a loss, or closing: never reuse it
            self._out -= 1
            self._free_place()
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)  # stays counted as out
                return
        self._out -= 1
        self._idle.append(conn)

    def connection_lost(self) -> None:
        """A connection of this pool was found broken: retire every connection opened before now.

        A reset, a restarted server or a network that went half-open takes the pool's other
        connections with it, and nothing says so until each is used: a caller would meet one
        dead connection after another, each costing a timeout (``command_timeout`` for a
        half-open one) out of the ``retry_for`` window that the first loss opened. So the idle
        ones close now and those in use close when they come back; the next acquire opens a
        fresh one. After a loss that took only its own connection, this costs a reconnect each.
        """
        self._epoch += 1
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.terminate()
            self._free_place()

    def _free_place(self) -> None:
        """A connection left the pool (or was never opened): its place goes to a waiter, or is freed."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._size -= 1
        if self._closing and self._out == 0 and self._all_back is not None:
            self._all_back.set()

    async def close(self) -> None:
        """Close idle connections now and the others as they come back; return once all are closed."""
        self._closing = True
        self._fail_waiters()
        idle, self._idle = self._idle, []
        self._size -= len(idle)
        # Side by side: each close waits for its server process to end the session, a round trip
        # each that a process exiting at the end of a fleet waited out once per connection.
        await asyncio.gather(*(conn.close() for conn in idle), return_exceptions=True)
        while self._out > 0:
            self._all_back = asyncio.Event()
            await self._all_back.wait()

    def terminate(self) -> None:
        """Close every idle connection at once; connections in use are closed when they come back."""
        self._closing = True
        self._fail_waiters()
        idle, self._idle = self._idle, []
        for conn in idle:
            self._size -= 1
            conn.terminate()

    def _fail_waiters(self) -> None:
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(PoolClosed("the connection pool is closed"))
