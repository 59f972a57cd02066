"""Fleets of processes on one hive: exactly-once completion, server-side connection kills, SIGKILLed holders."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import time
from collections import Counter
from typing import Any

import asyncpg
import attrs
import postgres_server
import postgres_workers
import pytest

import workhive
from workhive.errors import LeaseLost
from workhive.models import ItemState
from workhive_postgres import PostgresLocks

CTX = mp.get_context("spawn")


async def push_all(url: str, n: int) -> list[str]:
    ids: list[str] = []
    async with workhive.open(url) as hive:
        for start in range(0, n, 5000):
            ids += await hive.pool("jobs").push_many([{"n": i} for i in range(start, min(n, start + 5000))])
    return ids


def run_fleet(url: str, processes: int, coroutines: int, lease: float) -> tuple[list[Any], list[Any]]:
    out = CTX.Queue()
    procs = [
        CTX.Process(target=postgres_workers.drain, args=(url, f"p{i}", coroutines, lease, out))
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    return procs, [out]


def collect(procs: list[Any], out: Any, timeout: float = 600.0) -> list[tuple[str, int]]:
    accepted: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout
    reported = 0
    while reported < len(procs):
        try:
            _, _, got = out.get(timeout=1.0)
        except queue.Empty:
            crashed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not crashed, f"a worker process failed (exit codes {crashed})"
            assert time.monotonic() < deadline, "the fleet did not finish in time"
            continue
        accepted += got
        reported += 1
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return accepted


async def final_states(url: str, ids: list[str]) -> Counter[ItemState]:
    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        states: Counter[ItemState] = Counter()
        for start in range(0, len(ids), 2000):
            for item in await hive.storage.list_items("jobs", ItemState.DONE, 2000, start):
                states[item.state] += 1
        stats = await pool.stats()
        assert stats.total == len(ids)
        states[ItemState.PENDING] = stats.pending + stats.delayed
        states[ItemState.CLAIMED] = stats.claimed
        states[ItemState.POISONED] = stats.poisoned
        return states


def test_eight_processes_drain_forty_thousand_items_each_exactly_once(url: str) -> None:
    # One connection per coroutine (plus a listener): the fleet stays far below max_connections.
    url += "&pool_size=4"
    ids = asyncio.run(push_all(url, 8 * 5000))
    procs, (out,) = run_fleet(url, processes=8, coroutines=4, lease=60.0)
    accepted = collect(procs, out)
    counts = Counter(item_id for item_id, _ in accepted)
    assert len(counts) == len(ids) and set(counts) == set(ids), "an item was lost"
    assert max(counts.values()) == 1, "an item was completed twice"
    # No lease expired, so no item was ever claimed twice: every accepted claim was the first.
    assert {token for _, token in accepted} == {1}
    states = asyncio.run(final_states(url, ids))
    assert states[ItemState.DONE] == len(ids) and states[ItemState.PENDING] == states[ItemState.CLAIMED] == 0


async def terminate_backends(application_name: str) -> int:
    conn = await asyncpg.connect(postgres_server.SERVER)
    try:
        rows = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", application_name
        )
        return sum(1 for r in rows if r[0])
    finally:
        await conn.close()


async def done_count(url: str) -> int:
    async with workhive.open(url) as hive:
        return (await hive.pool("jobs").stats()).done


def test_connections_killed_by_the_server_during_a_drain_lose_nothing_and_accept_no_stale_token(
    schema: str,
) -> None:
    app = f"wh_fault_{schema[-8:]}"
    url = postgres_server.url_for(schema) + f"&application_name={app}"
    n = 6000
    ids = asyncio.run(push_all(url, n))
    procs, (out,) = run_fleet(url, processes=4, coroutines=4, lease=3.0)
    killed = 0
    rounds = 0
    # Kill every connection of the fleet whenever another tenth of the items is done.
    next_mark = n // 10
    deadline = time.monotonic() + 300
    while rounds < 5 and time.monotonic() < deadline:
        done = asyncio.run(done_count(url))
        if done >= n * 0.9:
            break
        if done >= next_mark:
            killed += asyncio.run(terminate_backends(app))
            rounds += 1
            next_mark = done + n // 10
        time.sleep(0.05)
    accepted = collect(procs, out)
    assert rounds >= 3 and killed >= 3 * 4, f"only {rounds} kill rounds ({killed} connections) landed mid-drain"
    counts = Counter(item_id for item_id, _ in accepted)
    assert set(counts) == set(ids), "an item was lost"
    assert max(counts.values()) == 1, "a completion from a stale claim was accepted"
    states = asyncio.run(final_states(url, ids))
    assert states[ItemState.DONE] == n


def test_a_sigkilled_worker_holding_claims_and_a_lock_loses_them_and_its_late_completion_is_refused(
    url: str,
) -> None:
    asyncio.run(push_all(url, 5))
    ready = CTX.Queue()
    proc = CTX.Process(target=postgres_workers.hold_then_wait, args=(url, ready))
    proc.start()
    try:
        claims, lock_token, _pid = ready.get(timeout=120)
    finally:
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=60)
    assert proc.exitcode == -signal.SIGKILL and len(claims) == 3

    async def after() -> None:
        locks = PostgresLocks(url)
        try:
            # The server freed the lock with the dead session; a waiter gets it, token higher.
            held = await locks.acquire("repo", ttl=10.0, timeout=60.0, worker_id="survivor")
            assert held.token > lock_token
            await locks.release(held)
        finally:
            await locks.close()
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            reclaimed: dict[str, Any] = {}
            deadline = time.monotonic() + 60
            while len(reclaimed) < 5 and time.monotonic() < deadline:
                item = await pool.claim("survivor", lease=60.0)
                if item is None:
                    await pool.wait_for_work(0.5)
                    continue
                reclaimed[item.id] = item
            assert set(reclaimed) >= {item_id for item_id, _ in claims}, "a dead worker's item never came back"
            for item_id, token in claims:
                late = attrs.evolve(reclaimed[item_id], token=token)
                with pytest.raises(LeaseLost):
                    await pool.complete(late, "late")
                assert (await pool.get(item_id)).state is ItemState.CLAIMED
                await pool.complete(reclaimed[item_id], "survivor")

    asyncio.run(after())
