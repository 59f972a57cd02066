"""Wake-ups through Redis pub/sub: waiters block on the server, nobody polls.

One subscriber connection per backend (or lock provider), opened on first
use, carries every channel this process waits on. A script that makes work
claimable (push, fail or release with no delay, requeue, a released worker)
publishes on the pool's channel; a released lock publishes its member on
the locks channel. A waiter registers first, subscribes (and waits for the
server's confirmation), and only then looks at the store, so a message sent
between its look and its wait still wakes it.

If the subscriber connection drops, every waiter is woken (its caller looks
again, which is always safe) and the next wait reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from workhive_redis.connections import RedisClient, check_cancelled

__all__ = ["Wakeups"]


class Wakeups:
    """Futures to resolve when a message arrives on a channel (optionally with given data)."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._conn: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._subscribed: dict[str, asyncio.Future[None]] = {}
        self._waiters: dict[tuple[str, str | None], set[asyncio.Future[None]]] = {}
        self._connecting: asyncio.Lock | None = None

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
        await self._disconnect()
        self._wake_all()

    def register(self, channel: str, data: str | None = None) -> asyncio.Future[None]:
        """A future resolved by the next message on ``channel`` (with ``data``, when given)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault((channel, data), set()).add(future)
        return future

    def unregister(self, channel: str, data: str | None, future: asyncio.Future[None]) -> None:
        waiting = self._waiters.get((channel, data))
        if waiting is not None:
            waiting.discard(future)
            if not waiting:
                del self._waiters[(channel, data)]

    async def subscribe(self, channel: str) -> None:
        """Make sure this connection listens on ``channel`` (returns once the server confirmed)."""
        confirmed = self._subscribed.get(channel)
        if confirmed is None or (confirmed.done() and confirmed.exception() is not None):
            if self._connecting is None:
                self._connecting = asyncio.Lock()
            async with self._connecting:
                if self._conn is None:
                    conn = self._client.pubsub()
                    await conn.connect()
                    try:
                        check_cancelled()
                    except asyncio.CancelledError:
                        await conn.aclose()
                        raise
                    self._conn = conn
                    self._reader = asyncio.get_running_loop().create_task(self._read(conn))
                confirmed = self._subscribed.get(channel)
                if confirmed is None:
                    confirmed = self._subscribed[channel] = asyncio.get_running_loop().create_future()
                    await self._conn.subscribe(channel)
        await asyncio.shield(confirmed)

    async def _read(self, conn: Any) -> None:
        try:
            while True:
                message = await conn.get_message(ignore_subscribe_messages=False, timeout=None)
                if not message:
                    continue
                kind, channel, data = message["type"], message["channel"], message["data"]
                if kind == "message":
                    self._wake(channel, data)
                elif kind == "subscribe":
                    confirmed = self._subscribed.get(channel)
                    if confirmed is not None and not confirmed.done():
                        confirmed.set_result(None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the connection dropped: everyone looks again, the next wait reconnects
            for confirmed in self._subscribed.values():
                if not confirmed.done():
                    confirmed.set_exception(ConnectionError(str(exc)))
                    confirmed.exception()  # retrieved: a waiter that gave up must not log it
            self._subscribed = {}
            if self._conn is conn:
                self._conn = None
                self._reader = None
            with contextlib.suppress(Exception):
                await conn.aclose()
            self._wake_all()

    def _wake(self, channel: str, data: str) -> None:
        for key in ((channel, None), (channel, data)):
            for future in self._waiters.pop(key, ()):
                if not future.done():
                    future.set_result(None)

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, {}
        for futures in waiters.values():
            for future in futures:
                if not future.done():
                    future.set_result(None)

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        self._subscribed = {}
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.aclose()
