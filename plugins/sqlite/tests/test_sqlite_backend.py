"""What is particular to the SQLite backend beyond the contract.

The event loop's own connection never waits for a lock, never checkpoints, and
fails over to the thread; ``complete_and_claim`` is one immediate transaction
on that fast path, all or nothing (the behaviour every backend shares is in
the contract suite).
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
import sqlite_workers as mp_workers

import workhive
from workhive.errors import StorageError
from workhive.models import ItemState
from workhive.storage import CompletesAndClaims
from workhive_sqlite import SqliteStorage, backend
from workhive_sqlite.ops import Operations

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


@pytest.mark.asyncio
async def test_both_connections_keep_a_statements_temporary_tables_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """temp_store = MEMORY on the loop's connection and the thread's: a grouped claim's temporary
    tables (the rows an UPDATE with triggers changes, the rows RETURNING gives back) went to a
    temporary file, about 90 KB written per claim of 512 items."""
    storage = SqliteStorage(f"sqlite:///{tmp_path}/hive.db")
    async with workhive.Hive(storage) as hive:
        await hive.pool("jobs").push_many(["here", "there"], group="t")
        seen: list[tuple[bool, int]] = []
        claim = Operations.claim

        def spy(self: Operations, *args: Any) -> Any:
            seen.append((self is storage._fast, self.conn.execute("PRAGMA temp_store").fetchone()[0]))
            return claim(self, *args)

        monkeypatch.setattr(Operations, "claim", spy)
        elsewhere = await asyncio.to_thread(asyncio.run, storage.claim("jobs", "w", 1, 30.0))
        here = await storage.claim("jobs", "w", 1, 30.0)
        assert len(elsewhere + here) == 2
        assert seen == [(False, 2), (True, 2)]  # 2: MEMORY


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


# -- complete_and_claim: one transaction on the fast path ------------------------------------------
def test_the_sqlite_storage_has_the_native_method(tmp_path: Path) -> None:
    assert isinstance(SqliteStorage(f"sqlite:///{tmp_path}/hive.db"), CompletesAndClaims)


@pytest.mark.asyncio
async def test_complete_and_claim_is_one_transaction_on_the_loops_connection(tmp_path: Path) -> None:
    storage = SqliteStorage(f"sqlite:///{tmp_path}/hive.db")
    async with workhive.Hive(storage) as hive:
        pool = hive.pool("jobs")
        await pool.push_many(["a", "b"])
        first = await pool.claim("w")
        assert first is not None
        statements: list[str] = []
        assert storage._fast is not None
        storage._fast.conn.set_trace_callback(statements.append)
        try:
            second = await pool.complete_and_claim(first, "done", "w")
        finally:
            storage._fast.conn.set_trace_callback(None)
        assert second is not None and second.data == "b"
        # Ran on the loop's own connection (the trace saw it) as one BEGIN IMMEDIATE … COMMIT.
        # SQLite reports a statement again as each trigger program of it starts (the groups
        # triggers of schema version 8, whose WHEN is false in a pool without groups).
        statements = [s for i, s in enumerate(statements) if i == 0 or s != statements[i - 1]]
        words = [s.split()[0].upper() for s in statements]
        assert words[0] == "BEGIN" and "IMMEDIATE" in statements[0].upper()
        assert words[-1] == "COMMIT" and words.count("BEGIN") == 1 and words.count("COMMIT") == 1
        assert words.count("UPDATE") == 2


@pytest.mark.asyncio
async def test_a_locked_database_sends_it_to_the_thread_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hive.db"
    storage = SqliteStorage(f"sqlite:///{path}")
    async with workhive.Hive(storage) as hive:
        pool = hive.pool("jobs")
        await pool.push_many(["a", "b"])
        first = await pool.claim("w")
        assert first is not None
        used: list[bool] = []
        fused = Operations.complete_and_claim

        def spy(self: Operations, *args: Any) -> Any:
            used.append(self is storage._fast)
            return fused(self, *args)

        monkeypatch.setattr(Operations, "complete_and_claim", spy)
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            # The thread waits for the lock; the loop stays free to let the holder go.
            asyncio.get_running_loop().call_later(0.2, holder.execute, "COMMIT")
            second = await pool.complete_and_claim(first, "done", "w")
        finally:
            holder.close()
        assert used == [True, False]  # tried on the loop, met the lock, ran on the thread
        assert second is not None and second.data == "b" and second.token == 1 and second.attempts == 1
        stats = await pool.stats()
        assert (stats.pending, stats.claimed, stats.done) == (0, 1, 1)


@pytest.mark.asyncio
async def test_a_failing_claim_rolls_the_completion_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with workhive.open(f"sqlite:///{tmp_path}/hive.db") as hive:
        pool = hive.pool("jobs")
        await pool.push_many(["a", "b"])
        first = await pool.claim("w")
        assert first is not None

        def broken(self: Operations, *args: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(Operations, "_claim", broken)
        with pytest.raises(StorageError, match="disk I/O error"):
            await pool.complete_and_claim(first, "done", "w")
        monkeypatch.undo()
        still = await pool.get(first.id)
        assert still.state is ItemState.CLAIMED and still.token == first.token and still.result is None
        assert (await pool.stats()).pending == 1
        second = await pool.complete_and_claim(first, "done", "w")
        assert second is not None and second.data == "b"
