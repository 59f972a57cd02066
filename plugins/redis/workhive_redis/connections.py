"""One connection at a time to Redis, scripts by SHA, and what to do when things fail.

Why not redis-py's ``Redis`` object: a storage call here is one ``EVALSHA``
and nothing else, and redis-py's pool and command layers cost about as much
per call as the round trip itself on a loaded machine. So ``RedisClient``
keeps its own list of idle ``redis.asyncio.Connection`` objects (redis-py's
protocol code, hiredis parser) and sends each command on one of them.

Failures, and who retries:

* Refused before anything was sent (connection refused, a connection that
  the server closed while idle, the server still loading its data after a
  restart, ``NOSCRIPT`` after a restart or ``SCRIPT FLUSH``): nothing was
  applied, so every call is retried, with jittered exponential backoff, for
  up to ``retry_for`` seconds; then ``StorageUnavailable`` naming host:port.
  Opening waits at most 5 s for a server that does not answer (a wrong
  address fails fast), but a server that answers ``LOADING`` is up and
  coming: that wait lasts the URL's whole ``retry_for``, opening included.
* Dropped while a write was in flight: it was applied once or not at all,
  and retrying blindly could apply it twice, so ``OutcomeUnknown`` is raised
  (fenced calls are safe to retry; after an unknown claim the caller gives
  back what its worker holds, since heartbeats would keep those leases alive).
  Reads are retried like the first case.
* Refused by the server for good (wrong password, a database index out of
  range, an ACL that forbids ``EVALSHA``, out of memory): a
  ``StorageUnavailable``/``StorageError`` that says what to do. So is a TLS
  set-up that cannot work (a certificate no trusted CA signed, a host name the
  certificate does not list, a refused handshake): raised at once, not retried.
  No message
  ever contains the password (the messages are ``workhive_redis.failures``').
* Behind Sentinel (``redis+sentinel://``), new connections go to the master
  the sentinels name (``workhive_redis.sentinel.MasterFinder``). A connection
  error, or a ``READONLY`` reply (the server was demoted to a replica: nothing
  was applied), makes the client forget that master and ask again; while the
  sentinels name none, or name one that refuses, calls are retried as above,
  then ``StorageUnavailable`` names the service and the sentinels.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Any

from workhive.errors import StorageError, StorageUnavailable
from workhive_redis.failures import (
    dropped_in_flight,
    read_only,
    refusal,
    still_loading,
    tls_problem,
    unreachable,
)
from workhive_redis.luafiles import Script, load_scripts
from workhive_redis.sentinel import MasterFinder, SentinelConfig
from workhive_redis.url import RedisConfig

__all__ = ["RedisClient", "check_cancelled"]

#: idle connections kept open; more are opened under load and closed when returned
MAX_IDLE = 64
_FIRST_PAUSE = 0.05
_MAX_PAUSE = 2.0


def check_cancelled() -> None:
    """Raise ``CancelledError`` if this task was cancelled and the cancellation got lost on the way.

    redis-py's ``connect()`` (redis-py 8, Python 3.11) can return normally to a task
    cancelled while it connected; a lock waiter cancelled then went on waiting for
    ever. ``Task.cancelling()`` (3.11+) still says the cancellation is pending.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError


class RedisClient:
    """Connections to one Redis server (see the module docstring for the failure rules)."""

    def __init__(self, config: RedisConfig) -> None:
        self.config = config
        self.scripts: dict[str, Script] = load_scripts()
        self._idle: list[Any] = []
        self._connection_class: Any = None
        self._kwargs: dict[str, Any] = {}
        self._closed = True
        self._errors: Any = None
        self._dropping: set[asyncio.Future[None]] = set()
        self._finder: MasterFinder | None = None  # behind Sentinel: who the master is
        #: how many times the master the sentinels name changed while this client was open
        self.failovers = 0

    # -- lifecycle --------------------------------------------------------------
    async def open(self, *, retry_for: float | None = None) -> None:
        """Import the driver, connect once (errors say why) and register the scripts."""
        import redis.asyncio.connection as connection
        import redis.exceptions as errors

        self._errors = errors
        kwargs = self.config.connection_kwargs()
        if self.config.path is not None:
            self._connection_class = connection.UnixDomainSocketConnection
        elif self.config.scheme in ("rediss", "rediss+sentinel"):
            self._connection_class = connection.SSLConnection
        else:
            self._connection_class = connection.Connection
        self._kwargs = kwargs
        if isinstance(self.config, SentinelConfig) and self._finder is None:
            self._finder = MasterFinder(self.config)
        self._closed = False
        await self.load_scripts(retry_for=retry_for)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await self._drop(conn)
        finder, self._finder = self._finder, None
        if finder is not None:
            await finder.close()

    @property
    def follows_master(self) -> bool:
        """Whether the server is whichever one the sentinels name master (``redis+sentinel://``)."""
        return isinstance(self.config, SentinelConfig)

    def new_connection(self, **overrides: Any) -> Any:
        """An unconnected redis-py connection with this server's settings (pub/sub uses its own)."""
        return self._connection_class(**{**self._kwargs, **overrides})

    def pubsub(self) -> Any:
        """A redis-py ``PubSub`` on its own connection, which waits for messages without a timeout."""
        import redis.asyncio as aioredis

        kwargs = {**self._kwargs, "socket_timeout": None, "socket_keepalive": True}
        pool = aioredis.ConnectionPool(connection_class=self._connection_class, max_connections=1, **kwargs)
        return aioredis.Redis.from_pool(pool).pubsub()

    async def load_scripts(self, *, retry_for: float | None = None) -> None:
        """``SCRIPT LOAD`` every script (after a restart or ``SCRIPT FLUSH`` too)."""
        commands = [("SCRIPT", "LOAD", s.text) for s in self.scripts.values()]
        shas = await self.pipeline(commands, write=False, retry_for=retry_for, scripts=False)
        for script, sha in zip(self.scripts.values(), shas):
            if sha != script.sha:  # a server that hashes differently would call the wrong text
                raise StorageError(f"Redis at {self.config.where} registered script {script.name} as {sha!r}")

    # -- calls --------------------------------------------------------------------
    async def run(self, name: str, keys: Sequence[str], args: Sequence[Any], *, write: bool = True) -> Any:
        """``EVALSHA`` the script ``name`` with ``keys`` and ``args``; its reply."""
        script = self.scripts[name]
        return (await self.pipeline([("EVALSHA", script.sha, len(keys), *keys, *args)], write=write))[0]

    async def command(self, *args: Any, write: bool = False) -> Any:
        """One plain command (``HGETALL``, ``PING``…): its reply."""
        return (await self.pipeline([args], write=write))[0]

    async def pipeline(
        self,
        commands: Sequence[Sequence[Any]],
        *,
        write: bool,
        retry_for: float | None = None,
        scripts: bool = True,
    ) -> list[Any]:
        """Send ``commands`` in one round trip on one connection; their replies, in order.

        A reply that is an error raises. After ``NOSCRIPT`` the scripts are
        loaded again and the whole batch is sent again, so a batch that mixes a
        script with plain writes must be idempotent (the ones this package
        sends are: ``SADD`` before a claim, extensions of live leases).
        """
        if self._closed:
            raise StorageUnavailable(
                f"Redis storage at {self.config.where} is not open; use `async with hive:` (or await hive.open()) first"
            )
        errors = self._errors
        budget = self.config.retry_for if retry_for is None else retry_for
        started = time.monotonic()
        deadline = started + budget
        # A server answering LOADING is there and will serve once its data is read: wait for it
        # as long as the URL's retry_for says, even where a server that does not answer is given
        # up on sooner (opening).
        loading_budget = max(budget, self.config.retry_for)
        loading_deadline = started + loading_budget
        pause = _FIRST_PAUSE
        while True:
            sent = False
            conn = None
            try:
                # An idle connection without a coroutine (twice per item of a worker going one at
                # a time); behind Sentinel, _connection asks who the master is first.
                conn = self._take_idle() if self._finder is None else None
                if conn is None:
                    conn = await self._connection()
                packed = conn.pack_commands(commands)
                sent = True
                await conn.send_packed_command(packed, check_health=False)
                replies = []
                failure: Exception | None = None
                for _ in commands:
                    try:
                        replies.append(await conn.read_response())
                    except errors.ResponseError as exc:  # an error reply; the connection is fine
                        replies.append(None)
                        failure = failure or exc
                self._release(conn)
                conn = None
                if failure is None:
                    check_cancelled()
                    return replies
                raise failure
            except errors.NoScriptError:
                if not scripts:
                    raise
                await self.load_scripts()
                continue
            except errors.BusyLoadingError:
                # The server is loading its data after a restart: nothing ran.
                if time.monotonic() + pause > loading_deadline:
                    raise still_loading(self.config, time.monotonic() - started, loading_budget) from None
            except errors.AuthenticationError as exc:
                raise refusal(self.config, errors, exc) from None
            except errors.NoPermissionError as exc:
                raise refusal(self.config, errors, exc) from None
            except errors.ReadOnlyError as exc:
                if self._finder is None:
                    raise refusal(self.config, errors, exc) from None
                # Behind Sentinel: the server we took for the master is a replica now (a failover
                # demoted it), which refused the write before applying anything. Ask again.
                self._finder.forget()
                await self._drop_idle()
                if time.monotonic() + pause > deadline:
                    raise read_only(self.config, exc, budget) from None
            except errors.ResponseError as exc:
                raise refusal(self.config, errors, exc) from None
            except (errors.ConnectionError, errors.TimeoutError, OSError) as exc:
                if conn is not None:
                    await self._drop(conn)
                    conn = None
                if self._finder is not None:
                    self._finder.forget()  # gone, or failed over: ask the sentinels on the next attempt
                tls = tls_problem(self.config, exc)
                if tls is not None:
                    raise tls from None
                if sent and write:
                    raise dropped_in_flight(self.config, exc) from None
                if time.monotonic() + pause > deadline:
                    if isinstance(exc, StorageUnavailable):  # the sentinels named no master: their words
                        raise StorageUnavailable(f"{exc} (retried for {budget:g}s)", where=self.config.where) from None
                    raise unreachable(self.config, exc, budget) from None
            finally:
                if conn is not None:
                    await self._drop(conn)
            await asyncio.sleep(pause * (0.5 + random.random() / 2))
            pause = min(_MAX_PAUSE, pause * 2)

    # -- connections --------------------------------------------------------------
    def _take_idle(self) -> Any | None:
        """The most recently released idle connection that is still open, or None (then ``_connection``).

        One the server closed while it was idle (a restart: the loop already saw the EOF)
        stays on the stack for ``_connection`` to drop, which awaits.
        """
        idle = self._idle
        if idle:
            conn = idle[-1]
            reader = getattr(conn, "_reader", None)
            if conn.is_connected and reader is not None and not reader.at_eof():
                return idle.pop()
        return None

    async def _connection(self) -> Any:
        if self._finder is not None:
            await self._follow_master(self._finder)
        idle = self._idle
        while idle:
            conn = idle.pop()
            reader = getattr(conn, "_reader", None)
            # The server closed it while idle (a restart): the loop already saw the EOF.
            if conn.is_connected and reader is not None and not reader.at_eof():
                return conn
            await self._drop(conn)
        conn = self.new_connection()
        await conn.connect()
        check_cancelled()
        return conn

    async def _follow_master(self, finder: MasterFinder) -> None:
        """Point new connections at the master the sentinels name; drop idle ones to any other server."""
        address = await finder.master()
        known = (self._kwargs.get("host"), self._kwargs.get("port"))
        if known != address:
            if known[0] is not None:
                self.failovers += 1
            self._kwargs["host"], self._kwargs["port"] = address
            await self._drop_idle()

    async def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await self._drop(conn)

    def _release(self, conn: Any) -> None:
        if self._closed or len(self._idle) >= MAX_IDLE:
            task = asyncio.ensure_future(self._drop(conn))
            self._dropping.add(task)
            task.add_done_callback(self._dropping.discard)
        else:
            self._idle.append(conn)

    @staticmethod
    async def _drop(conn: Any) -> None:
        try:
            await conn.disconnect(nowait=True)
        except Exception:  # a connection being thrown away may fail to close; nothing to do
            pass
