"""The event loop's own connection: it never waits for a lock, never checkpoints, and fails over to the thread.

Also the version-2 schema: done items without an index, counted per pool.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import sqlite3
from collections.abc import Callable
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


async def _wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` for up to 60 s (never a fixed sleep: the machine may be loaded)."""
    for _ in range(6000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"gave up waiting (60 s) for {what}")


@pytest.mark.asyncio
async def test_the_event_loop_keeps_running_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    # A generous busy timeout: the lock is held for as long as the test needs, not for a set time.
    url = f"sqlite:///{tmp_path}/hive.db?busy_timeout=120000"
    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        await pool.push_many(["a", "b"])
        ready, release = CTX.Event(), CTX.Event()
        holder = CTX.Process(target=mp_workers.hold_write_lock_until, args=(str(tmp_path / "hive.db"), ready, release))
        holder.start()
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, ready.wait, 60)
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.001)
                    ticks += 1

            ticking = asyncio.create_task(ticker())
            try:
                # Both must wait for the holder; the fast path hands them to the thread at once.
                claiming = asyncio.create_task(pool.claim("w"))
                pushing = asyncio.create_task(pool.push("during"))
                # The loop goes on ticking while both wait: it is not blocked in a lock wait.
                await _wait_for(lambda: ticks >= 20, "the event loop to tick while the lock is held")
                assert not claiming.done() and not pushing.done()
                release.set()
                item, pushed = await claiming, await pushing
            finally:
                ticking.cancel()
                release.set()
        finally:
            holder.join(timeout=60)
        assert holder.exitcode == 0
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


def _size(path: Path) -> int:
    return os.path.getsize(path)


def _wal_frames(conn: sqlite3.Connection) -> int:
    """Frames in the log as a passive checkpoint reports them (it copies what it can, never waits)."""
    return int(conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])


def test_a_checkpoint_restarts_a_long_wal_so_the_next_writes_start_from_the_top(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t (x BLOB)")
    for _ in range(300):
        conn.execute("INSERT INTO t VALUES (randomblob(3000))")
    ops = Operations(conn, lambda: 0.0)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    log, copied = ops.checkpoint(restart_above=100)
    # Over the threshold: a RESTART, which copied every frame back and rewound the log.
    assert any("RESTART" in s for s in statements)
    assert log == copied and log > 300
    conn.execute("INSERT INTO t VALUES (1)")
    assert _wal_frames(conn) <= 2
    # Below it, only the passive step, which never waits for the write lock.
    statements.clear()
    for _ in range(5):
        conn.execute("INSERT INTO t VALUES (randomblob(3000))")
    log, copied = ops.checkpoint(restart_above=100)
    assert log < 100 and not any("RESTART" in s for s in statements)
    conn.close()


@pytest.mark.asyncio
async def test_every_checkpoint_every_operations_a_checkpoint_runs_on_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend, "CHECKPOINT_EVERY", 16)
    monkeypatch.setattr(backend, "WAL_RESTART_FRAMES", 64)
    calls: list[tuple[bool, int]] = []
    checkpoint = Operations.checkpoint
    storage = SqliteStorage(f"sqlite:///{tmp_path}/hive.db")

    def spy(self: Operations, restart_above: int) -> tuple[int, int]:
        calls.append((self is storage._fast, restart_above))
        return checkpoint(self, restart_above)

    monkeypatch.setattr(Operations, "checkpoint", spy)
    async with workhive.Hive(storage) as hive:
        pool = hive.pool("jobs")
        for start in range(0, 400, 100):  # 100 a call: on the loop's connection, one operation each
            await pool.push_many(range(start, start + 100))
        largest = 0
        while item := await pool.claim("w"):
            await pool.complete(item, "ok")
            # Wait for a checkpoint the operations started, so the count below is exact
            # however slowly the thread is scheduled.
            if storage._checkpointing is not None:
                await storage._checkpointing
            largest = max(largest, _size(tmp_path / "hive.db-wal"))
        assert (await pool.stats()).done == 400
    # 806 operations (4 pushes, 400 claims and completes, the last empty claim, stats):
    # one checkpoint per 16, each on the thread's connection, never the loop's.
    assert calls == [(False, 64)] * (806 // 16)
    # Restarted whenever over 64 frames: the log never held much more than 64 + 16 operations' frames,
    # where 800 unchecked claims and completions write thousands.
    assert largest < 200 * 4120


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
