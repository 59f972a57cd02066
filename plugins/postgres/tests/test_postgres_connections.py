"""The storage's connection pool, with stand-in connections: who gets which connection, and when."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from workhive_postgres.connections import ConnectionPool, PoolClosed


class FakeConnection:
    made = 0

    def __init__(self) -> None:
        FakeConnection.made += 1
        self.number = FakeConnection.made
        self.closed = False
        self.terminated = False
        self.in_transaction = False

    def is_closed(self) -> bool:
        return self.closed

    def is_in_transaction(self) -> bool:
        return self.in_transaction

    def terminate(self) -> None:
        self.closed = self.terminated = True

    async def close(self) -> None:
        self.closed = True


class Connector:
    def __init__(self) -> None:
        self.opened: list[FakeConnection] = []
        self.fail_next = 0

    async def __call__(self) -> FakeConnection:
        await asyncio.sleep(0)
        if self.fail_next:
            self.fail_next -= 1
            raise OSError("connection refused (the test's)")
        conn = FakeConnection()
        self.opened.append(conn)
        return conn


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_idle_connections_are_reused_and_new_ones_opened_only_up_to_max_size() -> None:
    connect = Connector()
    pool = ConnectionPool(connect, max_size=2)
    a = await pool.acquire()
    pool.release(a)
    assert await pool.acquire() is a  # reused, not reopened
    b = await pool.acquire()
    assert b is not a and len(connect.opened) == 2 and pool.size == 2
    third = asyncio.create_task(pool.acquire())
    await settle()
    assert not third.done() and len(connect.opened) == 2  # at max_size it waits
    pool.release(b)
    assert await third is b
    pool.release(a)
    pool.release(b)
    await pool.close()


@pytest.mark.asyncio
async def test_waiters_are_served_first_come_first_served() -> None:
    pool = ConnectionPool(Connector(), max_size=1)
    held = await pool.acquire()
    order: list[str] = []

    async def take(name: str) -> None:
        conn = await pool.acquire()
        order.append(name)
        pool.release(conn)

    tasks = [asyncio.create_task(take(name)) for name in "abc"]
    await settle()
    pool.release(held)
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c"]
    await pool.close()


@pytest.mark.asyncio
async def test_a_connection_back_closed_or_inside_a_transaction_is_dropped_and_its_place_passed_on() -> None:
    connect = Connector()
    pool = ConnectionPool(connect, max_size=1)
    conn = await pool.acquire()
    waiting = asyncio.create_task(pool.acquire())
    await settle()
    conn.in_transaction = True  # its call was cancelled mid-transaction
    pool.release(conn)
    fresh = await waiting
    assert conn.terminated and fresh is not conn and pool.size == 1
    fresh.closed = True  # the server ended it
    pool.release(fresh)
    assert pool.size == 0
    again = await pool.acquire()
    assert again not in (conn, fresh) and pool.size == 1
    pool.release(again)
    await pool.close()


@pytest.mark.asyncio
async def test_a_failed_connect_frees_its_place() -> None:
    connect = Connector()
    connect.fail_next = 1
    pool = ConnectionPool(connect, max_size=1)
    with pytest.raises(OSError, match="refused"):
        await pool.acquire()
    assert pool.size == 0
    conn = await pool.acquire()
    pool.release(conn)
    await pool.close()


@pytest.mark.asyncio
async def test_a_waiter_cancelled_as_it_is_handed_a_connection_passes_it_on() -> None:
    pool = ConnectionPool(Connector(), max_size=1)
    held = await pool.acquire()
    first = asyncio.create_task(pool.acquire())
    second = asyncio.create_task(pool.acquire())
    await settle()
    pool.release(held)  # handed to the first waiter...
    first.cancel()  # ...which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, 5) is held  # nothing leaked: the second waiter has it
    pool.release(held)
    await pool.close()


@pytest.mark.asyncio
async def test_close_waits_for_connections_in_use_and_refuses_new_acquires() -> None:
    connect = Connector()
    pool = ConnectionPool(connect, max_size=2)
    idle, busy = await pool.acquire(), await pool.acquire()
    pool.release(idle)
    waiter_pool = ConnectionPool(Connector(), max_size=1)
    closing = asyncio.create_task(pool.close())
    await settle()
    assert idle.closed and not closing.done()  # idle closed at once; the busy one is still out
    with pytest.raises(PoolClosed):
        await pool.acquire()
    pool.release(busy)
    await asyncio.wait_for(closing, 5)
    assert busy.terminated and pool.size == 0
    # Waiting callers are told the pool closed rather than left waiting.
    held: Any = await waiter_pool.acquire()
    waiting = asyncio.create_task(waiter_pool.acquire())
    await settle()
    waiter_pool.terminate()
    with pytest.raises(PoolClosed):
        await waiting
    waiter_pool.release(held)
    assert held.terminated


@pytest.mark.asyncio
async def test_take_idle_hands_out_only_an_open_idle_connection_and_counts_it_as_acquire_does() -> None:
    connect = Connector()
    pool = ConnectionPool(connect, max_size=2)
    assert pool.take_idle() is None  # nothing idle: it never opens one (acquire does)
    assert connect.opened == []
    a, b = await pool.acquire(), await pool.acquire()
    pool.release(a)
    pool.release(b)
    b.closed = True  # the server ended it while idle
    assert pool.take_idle() is a  # the closed one is passed over and its place freed
    assert pool.size == 1
    assert pool.take_idle() is None
    # Handed out as by acquire: a waiter for the only place is served when it comes back.
    one = ConnectionPool(Connector(), max_size=1)
    held = await one.acquire()
    one.release(held)
    assert one.take_idle() is held
    waiting = asyncio.create_task(one.acquire())
    await settle()
    assert not waiting.done()
    one.release(held)
    assert await asyncio.wait_for(waiting, 5) is held
    one.release(held)
    await one.close()
    assert one.take_idle() is None  # closing: nothing is handed out
    pool.release(a)
    await pool.close()


@pytest.mark.asyncio
async def test_after_a_lost_connection_none_opened_before_it_is_handed_out_again() -> None:
    """A half-open network leaves every idle connection dead without a word: after the first loss, the pool
    closes the idle ones at once and those in use as they come back, so no caller meets a second dead one."""
    connect = Connector()
    pool = ConnectionPool(connect, max_size=4)
    a, b, c = await pool.acquire(), await pool.acquire(), await pool.acquire()
    pool.release(a)
    pool.release(b)
    pool.connection_lost()
    assert a.terminated and b.terminated and not c.terminated
    assert pool.size == 1  # c, still in use
    fresh = await pool.acquire()
    assert fresh not in (a, b, c) and len(connect.opened) == 4
    pool.release(c)  # opened before the loss: closed as it comes back, not reused
    assert c.terminated and pool.size == 1
    pool.release(fresh)  # opened after it: reused
    assert not fresh.terminated and await pool.acquire() is fresh
    pool.release(fresh)
    await pool.close()
