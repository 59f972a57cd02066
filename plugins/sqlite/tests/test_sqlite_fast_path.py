"""The event loop's own connection: it never waits for a lock, never checkpoints, and fails over to the thread.

Also the version-2 schema: done items without an index, counted per pool.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlite_mp_workers as mp_workers

import workhive
from workhive.models import ItemState
from workhive_sqlite import SqliteStorage, backend
from workhive_sqlite.ops import Operations
from workhive_sqlite.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION

CTX = mp.get_context("spawn")


@pytest.mark.asyncio
async def test_the_event_loop_keeps_running_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/hive.db"
    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        await pool.push_many(["a", "b"])
        ready = CTX.Event()
        holder = CTX.Process(target=mp_workers.hold_write_lock, args=(str(tmp_path / "hive.db"), 1.0, ready))
        holder.start()
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, ready.wait, 60)
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticking = asyncio.create_task(ticker())
            try:
                # Both must wait for the holder; the fast path hands them to the thread at once.
                item = await pool.claim("w")
                pushed = await pool.push("during")
            finally:
                ticking.cancel()
            holder.join(timeout=30)
        finally:
            holder.join(timeout=30)
        assert holder.exitcode == 0
        # A loop blocked in a lock wait would not have ticked until the holder let go.
        assert ticks >= 10
        assert item is not None and item.data == "a" and item.token == 1
        # The attempts that met the lock changed nothing: one claim, one new item.
        stats = await pool.stats()
        assert (stats.pending, stats.claimed) == (2, 1)
        assert (await pool.get(pushed)).data == "during"


@pytest.mark.asyncio
async def test_a_call_from_another_thread_uses_the_threaded_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = SqliteStorage(f"sqlite:///{tmp_path}/hive.db")
    async with workhive.Hive(storage) as hive:
        await hive.pool("jobs").push_many(["here", "there"])
        used: list[bool] = []
        claim = Operations.claim

        def spy(self: Operations, *args: Any) -> Any:
            used.append(self is storage._fast)
            return claim(self, *args)

        monkeypatch.setattr(Operations, "claim", spy)
        # The loop's connection belongs to the loop's thread; any other thread goes to aiosqlite's.
        elsewhere = await asyncio.to_thread(asyncio.run, storage.claim("jobs", "w", 1, 30.0))
        here = await storage.claim("jobs", "w", 1, 30.0)
        assert [i.payload for i in elsewhere + here] == ['"here"', '"there"']
        assert used == [False, True]


@pytest.mark.asyncio
async def test_the_wal_stays_bounded_under_steady_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Small thresholds so a short run crosses them many times.
    monkeypatch.setattr(backend, "CHECKPOINT_EVERY", 16)
    monkeypatch.setattr(backend, "WAL_RESTART_FRAMES", 128)
    wal = tmp_path / "hive.db-wal"
    async with workhive.open(f"sqlite:///{tmp_path}/hive.db") as hive:
        pool = hive.pool("jobs")
        await pool.push_many(range(1500))
        largest = 0
        while item := await pool.claim("w"):
            await pool.complete(item, "ok")
            if item.data % 100 == 0:
                await asyncio.sleep(0)  # let a pending checkpoint task start
                largest = max(largest, wal.stat().st_size)
        assert (await pool.stats()).done == 1500
    # 1,500 claims and completions write over 7,000 frames; unchecked, the log would hold them all.
    assert largest < 3000 * 4120


def _make_version_1_file(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    rows = [
        # pool, state, finished_at
        ("a", "pending", None),
        ("a", "claimed", None),
        ("a", "done", 1.0),
        ("a", "done", 2.0),
        ("a", "poisoned", 1.0),
        ("b", "done", 1.0),
    ]
    for pool, state, finished in rows:
        conn.execute(
            "INSERT INTO items (pool, payload, state, priority, max_attempts, created_at, available_at, "
            "claimed_by, lease_expires_at, lease_seconds, finished_at, attempts, token) "
            "VALUES (?, '1', ?, 0, 3, 0, 0, ?, ?, ?, ?, ?, ?)",
            (
                pool,
                state,
                "w" if state == "claimed" else None,
                4e9 if state == "claimed" else None,
                30.0 if state == "claimed" else None,
                finished,
                0 if state == "pending" else 1,
                0 if state == "pending" else 1,
            ),
        )
    conn.close()


@pytest.mark.asyncio
async def test_a_version_1_file_is_migrated_with_its_counts(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    _make_version_1_file(path)
    async with workhive.open(f"sqlite:///{path}") as hive:
        a, b = hive.pool("a"), hive.pool("b")
        stats = await a.stats()
        assert (stats.pending, stats.claimed, stats.done, stats.poisoned) == (1, 1, 2, 1)
        assert (await b.stats()).done == 1
        assert sorted(await hive.pools()) == ["a", "b"]
        assert [i.finished_at for i in await a.items(ItemState.DONE)] == [1.0, 2.0]
        assert len(await a.items(ItemState.POISONED)) == 1
        # Counts follow pushes and purges after the migration too.
        await a.push("new")
        assert (await a.purge(0.0)) == 3
        stats = await a.stats()
        assert (stats.pending, stats.claimed, stats.done, stats.poisoned) == (2, 1, 0, 0)
        assert await b.purge(0.0) == 1
        assert await hive.pools() == ["a"]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "items_finished" not in indexes and "items_poisoned" in indexes


@pytest.mark.asyncio
async def test_a_claimed_item_reads_the_same_as_a_fresh_get(tmp_path: Path) -> None:
    # The claim reads back only the columns it did not set itself; the rest must still agree.
    async with workhive.open(f"sqlite:///{tmp_path}/hive.db") as hive:
        pool = hive.pool("jobs")
        await pool.push({"n": 1}, priority=2, dedup_key="k")
        await pool.push_many([{"n": 2}, {"n": 3}])
        first = await pool.claim("w", lease=30.0)
        assert first is not None
        await pool.fail(first, "boom", retry_in=0.0)
        again = await pool.claim("w2", lease=12.5)
        assert again is not None and again.error == "boom" and again.attempts == 2
        assert again == await pool.get(again.id)
        for item in await pool.claim_many(5, "w3", lease=7.0):
            assert item == await pool.get(item.id)
