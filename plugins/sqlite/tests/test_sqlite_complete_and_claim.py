"""``complete_and_claim`` on SQLite: one immediate transaction, on the fast path, all or nothing.

The behaviour every backend shares is in the contract suite; these check how
this backend does it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import workhive
from workhive.errors import StorageError
from workhive.models import ItemState
from workhive.storage import CompletesAndClaims
from workhive_sqlite import SqliteStorage
from workhive_sqlite.ops import Operations


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
