"""Code that runs in child processes of the multi-process tests (imported by spawn, so it lives in a module)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from typing import Any

import workhive


def drain(url: str, worker: str, batch: int, start: Any, out: Any) -> None:
    """Claim and complete until the pool is empty; report every accepted (item, token) and every claim."""

    async def run() -> tuple[str, list[tuple[str, int]], list[tuple[str, int]]]:
        claims: list[tuple[str, int]] = []
        completions: list[tuple[str, int]] = []
        async with workhive.open(url, lease=120.0) as hive:
            pool = hive.pool("jobs")
            await pool.stats()
            start.wait()
            while True:
                items = await pool.claim_many(batch, worker)
                if not items:
                    return worker, claims, completions
                claims += [(i.id, i.token) for i in items]
                if batch == 1:
                    await pool.complete(items[0], {"by": worker})
                    completions.append((items[0].id, items[0].token))
                else:
                    accepted = await pool.complete_many([(i, {"by": worker}) for i in items])
                    completions += [(i.id, i.token) for i, ok in zip(items, accepted) if ok]

    out.put(asyncio.run(run()))


def claim_and_hang(url: str, count: int, lease: float, out: Any) -> None:
    """Claim ``count`` items, report their (id, token), then hang until killed."""

    async def run() -> None:
        async with workhive.open(url) as hive:
            items = await hive.pool("jobs").claim_many(count, "doomed", lease=lease)
            out.put([(i.id, i.token) for i in items])
            await asyncio.Event().wait()  # never set: hang holding the claims

    asyncio.run(run())


def hold_write_lock(path: str, seconds: float, ready: Any) -> None:
    """Hold SQLite's write lock on ``path`` for ``seconds`` (a long writer in another process)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE items SET priority = priority WHERE id = 1")
    ready.set()
    time.sleep(seconds)
    conn.execute("COMMIT")
    conn.close()


def hold_write_lock_until(path: str, ready: Any, release: Any) -> None:
    """Hold SQLite's write lock on ``path`` until ``release`` is set (at most 120 s)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE items SET priority = priority WHERE id = 1")
    ready.set()
    release.wait(120)
    conn.execute("COMMIT")
    conn.close()


def push_later(url: str, delay: float) -> None:
    """Push one item into pool 'jobs' after ``delay`` seconds (a producer in another process)."""

    async def run() -> None:
        async with workhive.open(url) as hive:
            await asyncio.sleep(delay)
            await hive.pool("jobs").push({"from": os.getpid()})

    asyncio.run(run())


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
