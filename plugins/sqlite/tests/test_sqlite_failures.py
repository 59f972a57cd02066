"""Storage faults: a damaged page is refused by every command, a full disk is one precise error."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import workhive
from workhive.errors import StorageCorrupt, StorageError, StorageUnavailable
from workhive.models import ItemState
from workhive_sqlite import SqliteStorage, backend


async def _make_hive(path: Path, items: int) -> None:
    async with workhive.open(f"sqlite:///{path}") as hive:
        pool = hive.pool("jobs")
        for start in range(0, items, 500):
            await pool.push_many({"n": n, "pad": "x" * 200} for n in range(start, start + 500))
    # Closing checkpointed the log into the file: every page now lives in hive.db itself.


def _damage_middle_pages(path: Path) -> None:
    """Overwrite the middle fifth of the file's pages with garbage (never page 1, the header)."""
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    assert pages > 50
    with path.open("r+b") as f:
        for page in range(pages * 2 // 5, pages * 3 // 5):
            f.seek(page * page_size)
            f.write(bytes([0xA5]) * page_size)


@pytest.mark.asyncio
async def test_a_damaged_page_is_refused_at_open_naming_the_file_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    await _make_hive(path, 3000)
    _damage_middle_pages(path)
    for create in (True, False):
        with pytest.raises(StorageCorrupt) as info:
            await SqliteStorage(f"sqlite:///{path}", create=create).open()
        message = str(info.value)
        assert str(path) in message and "backup" in message and ".recover" in message
        assert info.value.path == str(path)  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_a_damaged_page_met_by_an_operation_is_storage_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file too large for the open-time check: the operation that meets the page refuses it.
    path = tmp_path / "hive.db"
    await _make_hive(path, 3000)
    _damage_middle_pages(path)
    monkeypatch.setattr(backend, "QUICK_CHECK_MAX_BYTES", 0)
    async with workhive.open(f"sqlite:///{path}") as hive:
        pool = hive.pool("jobs")
        with pytest.raises(StorageCorrupt, match=str(path)):
            await pool.items(ItemState.PENDING, limit=3000)
        with pytest.raises(StorageCorrupt, match=str(path)):
            await pool.purge(0.0)  # scans the whole table on the thread's connection


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "content",
    [b"\x00" * 8192, b"SQLite format 3\x00" + b"\xa5" * 8176, b"SQLite format 3\x00"],
    ids=["zeros", "magic-then-garbage", "magic-alone"],
)
@pytest.mark.parametrize("create", [True, False])
async def test_a_file_whose_header_is_garbage_is_not_called_corrupt_but_foreign(
    tmp_path: Path, content: bytes, create: bool
) -> None:
    # No valid first page: SQLite reads the header (workhive no longer opens the file itself,
    # see test_sqlite_handles.py) and refuses it before writing anything; the message says it
    # is another program's file, or a store whose first page is damaged.
    path = tmp_path / "hive.db"
    path.write_bytes(content)
    with pytest.raises(StorageUnavailable, match="not a SQLite database") as info:
        await SqliteStorage(f"sqlite:///{path}", create=create).open()
    assert "first page is damaged" in str(info.value) and info.value.path == str(path)  # type: ignore[attr-defined]
    assert path.read_bytes() == content
    assert os.listdir(tmp_path) == ["hive.db"]


@pytest.mark.asyncio
async def test_a_full_database_is_a_precise_storage_error_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    storage = SqliteStorage(f"sqlite:///{path}")
    async with workhive.Hive(storage) as hive:
        pool = hive.pool("jobs")
        kept = await pool.push_many(range(10))
        # SQLite's own page limit stands in for a full disk: the same SQLITE_FULL on the same paths.
        assert storage._fast is not None
        pages = storage._fast.conn.execute("PRAGMA page_count").fetchone()[0]
        storage._fast.conn.execute(f"PRAGMA max_page_count = {pages}")
        await storage._call(lambda: storage._db.conn.execute(f"PRAGMA max_page_count = {pages}"))
        big = [{"pad": "y" * 4000, "n": n} for n in range(50)]
        for push in (pool.push_many(big), pool.push_many(big * 4)):  # the loop's connection, then the thread's
            with pytest.raises(StorageError) as info:
                await push
            assert type(info.value) is StorageError
            assert info.value.sqlite_error == "SQLITE_FULL"  # type: ignore[attr-defined]
            message = str(info.value)
            assert str(path) in message and "Free space" in message and "full" in message
        # All or nothing: the failed pushes left no item behind, and the store still works.
        stats = await pool.stats()
        assert (stats.pending, stats.done) == (10, 0)
        item = await pool.claim("w")
        assert item is not None and item.id == kept[0]
        await pool.complete(item, "ok")
        assert (await pool.stats()).done == 1


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs under ``tmp_path``: a real full disk (needs the right to mount, e.g. root)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs ({mounted.stderr.strip()}); the max_page_count test covers it")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.mark.asyncio
async def test_a_really_full_disk_is_the_same_precise_error(tiny_disk: Path) -> None:
    async with workhive.open(f"sqlite:///{tiny_disk}/hive.db") as hive:
        pool = hive.pool("jobs")
        pushed = 0
        with pytest.raises(StorageError) as info:
            for _ in range(1000):  # 1 MiB holds far fewer than 1000 x 50 x 2 KB
                await pool.push_many([{"pad": "z" * 2000}] * 50)
                pushed += 50
        assert info.value.sqlite_error == "SQLITE_FULL"  # type: ignore[attr-defined]
        assert str(tiny_disk) in str(info.value) and "Free space" in str(info.value)
        # Every acknowledged push is there; the refused one left nothing.
        assert (await pool.stats()).pending == pushed > 0


@pytest.mark.skipif(sys.version_info < (3, 11), reason="result codes on sqlite3 errors need Python >= 3.11")
def test_a_stale_snapshot_is_told_from_a_held_lock(tmp_path: Path) -> None:
    """SQLITE_BUSY_SNAPSHOT (a deferred transaction's first write after another commit) is not a held lock."""
    from workhive_sqlite.failures import is_busy, is_stale_snapshot

    path = tmp_path / "t.db"
    first = sqlite3.connect(path, isolation_level=None, timeout=0)
    second = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        first.execute("PRAGMA journal_mode = wal")
        first.execute("CREATE TABLE t (x)")
        first.execute("BEGIN")
        first.execute("SELECT count(*) FROM t").fetchone()  # its snapshot
        second.execute("INSERT INTO t VALUES (1)")  # committed past it
        with pytest.raises(sqlite3.OperationalError) as stale:
            first.execute("INSERT INTO t VALUES (2)")
        first.execute("ROLLBACK")
        assert is_busy(stale.value) and is_stale_snapshot(stale.value)
        second.execute("BEGIN IMMEDIATE")  # the lock held
        with pytest.raises(sqlite3.OperationalError) as held:
            first.execute("BEGIN IMMEDIATE")
        second.execute("ROLLBACK")
        assert is_busy(held.value) and not is_stale_snapshot(held.value)
    finally:
        first.close()
        second.close()
