"""Start-up against a server still loading its data set: wait up to the URL's retry_for, then say so.

The server is ``LoadingProxy`` (answers ``-LOADING`` to a set number of connections, then
forwards to the tests' Redis under a prefix of their own), and the client's clock is a fake
one that moves only when it sleeps: what is checked is how many ``LOADING`` answers the
client rode out and how long it meant to wait, never how long anything took.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import pytest
import workhive_redis.connections as client_module
from redis_loading_proxy import LoadingProxy
from redis_server import REDIS_URL, new_prefix, url_for
from workhive_redis import RedisLocks

import workhive
from workhive.errors import StorageUnavailable


class FakeClock:
    """``time.monotonic`` for the client, advanced by its own sleeps only."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept = 0.0

    def monotonic(self) -> float:
        return self.now


class _AsyncioWithFakeSleep:
    """``asyncio`` as the client module sees it, except that ``sleep`` moves the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float, result: Any = None) -> Any:
        self._clock.now += delay
        self._clock.slept += delay
        await asyncio.sleep(0)  # still let the loop run: the proxy answers on it
        return result


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(client_module, "time", fake)
    monkeypatch.setattr(client_module, "asyncio", _AsyncioWithFakeSleep(fake))
    return fake


def _through(proxy: LoadingProxy, prefix: str, **options: object) -> str:
    """The tests' Redis URL (its user and password kept) pointed at the proxy."""
    parts = urlsplit(REDIS_URL)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{proxy.port}" if userinfo else f"127.0.0.1:{proxy.port}"
    return url_for(prefix, base=parts._replace(netloc=netloc, query="").geturl(), **options)


def _upstream() -> tuple[str, int]:
    parts = urlsplit(REDIS_URL)
    return parts.hostname or "127.0.0.1", parts.port or 6379


def test_opening_rides_out_loading_for_longer_than_five_seconds_within_retry_for(clock: FakeClock) -> None:
    """40 LOADING answers back to back take the client's backoff well past the 5 s that opening once allowed."""
    prefix = new_prefix()

    async def main() -> None:
        async with LoadingProxy(*_upstream(), loading=40) as proxy:
            async with workhive.open(_through(proxy, prefix, retry_for=600)) as hive:
                pool = hive.pool("jobs")
                await pool.push({"n": 1})
                assert (await pool.stats()).pending == 1
            assert proxy.loading_answers == 40
            assert proxy.forwarded >= 1

    asyncio.run(main())
    # Each pause is at least half of 0.05, 0.1, … capped at 2 s: 40 of them are more than 35 s.
    assert clock.slept > 5


def test_fleet_wide_locks_ride_out_loading_too(clock: FakeClock) -> None:
    prefix = new_prefix()

    async def main() -> None:
        async with LoadingProxy(*_upstream(), loading=30) as proxy:
            locks = RedisLocks(_through(proxy, prefix, retry_for=600))
            try:
                held = await locks.acquire("repo:acme", ttl=60, timeout=0, worker_id="w1")
                await locks.release(held)
            finally:
                await locks.close()
            assert proxy.loading_answers == 30

    asyncio.run(main())
    assert clock.slept > 5


def test_a_server_that_keeps_loading_fails_after_retry_for_naming_the_wait(clock: FakeClock) -> None:
    prefix = new_prefix()

    async def main() -> None:
        async with LoadingProxy(*_upstream(), loading=10**9) as proxy:
            with pytest.raises(StorageUnavailable, match=r"still loading") as info:
                async with workhive.open(_through(proxy, prefix, retry_for=20)):
                    pass
            assert proxy.forwarded == 0
            message = str(info.value)
            assert "retry_for=20" in message and f"127.0.0.1:{proxy.port}" in message, message

    asyncio.run(main())
    # It gave up when the next pause (at most 2 s) would have passed retry_for, not before.
    assert 18 <= clock.slept <= 20


def test_a_lock_waiter_cancelled_while_it_connects_stops_and_leaves_nothing_held() -> None:
    """redis-py's connect() can return normally to a task cancelled meanwhile (redis-py 8, Python 3.11):
    the waiter then went on waiting for ever (the lock contract's cancelled-waiter test hung under load).
    The cancel lands at many points of a first acquire, most of them inside connecting."""
    prefix = new_prefix()

    async def once(delay: float) -> None:
        url = url_for(prefix)
        locks, other = RedisLocks(url), RedisLocks(url)
        try:
            held = await locks.acquire("cancel", ttl=None, timeout=5, worker_id=None)
            waiter = asyncio.create_task(other.acquire("cancel", ttl=None, timeout=None, worker_id=None))
            await asyncio.sleep(delay)
            waiter.cancel()
            # A hang detector, not a time measured: a waiter that swallowed its cancel never ends.
            done, _ = await asyncio.wait({waiter}, timeout=120)
            assert done, f"the waiter cancelled after {delay}s kept waiting"
            assert waiter.cancelled() or waiter.exception() is None
            await locks.release(held)
            again = await locks.acquire("cancel", ttl=None, timeout=0, worker_id=None)
            await locks.release(again)
        finally:
            await locks.close()
            await other.close()

    async def main() -> None:
        for step in range(40):
            await once(step * 0.0005)

    asyncio.run(main())


class _IdleConnection:
    """A stand-in for an idle redis-py connection: open, or closed by the server (EOF seen)."""

    class _Reader:
        def __init__(self, eof: bool) -> None:
            self.eof = eof

        def at_eof(self) -> bool:
            return self.eof

    def __init__(self, *, eof: bool) -> None:
        self.is_connected = True
        self._reader = self._Reader(eof)
        self.disconnected = False

    async def disconnect(self, nowait: bool = False) -> None:
        self.disconnected = True


@pytest.mark.asyncio
async def test_an_idle_connection_the_server_closed_is_never_handed_out() -> None:
    from workhive_redis.url import parse_url

    client = client_module.RedisClient(parse_url(REDIS_URL))
    live, dead = _IdleConnection(eof=False), _IdleConnection(eof=True)
    client._idle = [live, dead]
    assert client._take_idle() is None  # the newest is closed: left for _connection, which drops it
    assert await client._connection() is live
    assert dead.disconnected and client._idle == []
    client._idle = [dead, live]
    assert client._take_idle() is live and client._idle == [dead]
