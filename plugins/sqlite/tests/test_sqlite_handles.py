"""Several hive handles on one SQLite file in one process, next to short-lived processes (issue 24).

SQLite's locks are POSIX advisory locks: they belong to the process, and closing
*any* descriptor of the file drops them all, including those of the process's
other SQLite connections. A handle that opened the file outside SQLite (to read
its header) therefore left every other handle of the process without locks; a
short-lived process then believed it was the file's last user and, on exit,
checkpointed and deleted the ``-wal`` and ``-shm`` those handles still wrote to.
Their later commits went to a deleted log: lost items, or a corrupt index.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner

import workhive
from workhive.cli import cli
from workhive.models import ItemState

T = TypeVar("T")

#: Generous: a child that hangs is a failure, a loaded machine is merely slow.
CHILD_TIMEOUT = 180

# A short-lived process: opens the hive, pushes one item, and exits (closing the hive,
# which is where a process that believes it is the file's last user deletes the WAL).
_CHILD = """
import asyncio, json, sys, workhive

async def main():
    async with workhive.open(sys.argv[1]) as hive:
        await hive.pool("jobs").push(json.loads(sys.argv[2]))

asyncio.run(main())
"""

# Whether some process holds a SHARED lock on the database. SQLite's lock bytes are part
# of its file format (os.h): SHARED is a read lock on the 510 bytes from 2**30 + 2, and a
# connection in WAL mode holds it for as long as it is open. A write lock on that range
# is granted only when no other process holds it.
_PROBE = """
import fcntl, os, sys

fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, 0x40000002)
except OSError:
    print("held")
else:
    print("free")
"""


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


async def _python(*args: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, *args], capture_output=True, text=True, timeout=CHILD_TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def _child_pushes(url: str, data: Any) -> None:
    await _python("-c", _CHILD, url, json.dumps(data))


async def _shared_lock(path: Path) -> str:
    """Whether some process (this one) holds SQLite's SHARED lock on ``path``: "held" or "free"."""
    return await _python("-c", _PROBE, str(path))


@pytest.mark.asyncio
@pytest.mark.parametrize("create", [True, False], ids=["create", "existing-only"])
async def test_a_second_handle_leaves_the_first_handles_locks_in_place(tmp_path: Path, create: bool) -> None:
    path = tmp_path / "hive.db"
    async with workhive.open(_url(path)) as first:
        await first.pool("jobs").push("first")
        assert await _shared_lock(path) == "held"
        second = await workhive.open(_url(path), create=create).open()
        try:
            await second.pool("jobs").push("second")
            assert await _shared_lock(path) == "held", "opening a second handle dropped this process's locks"
        finally:
            await second.close()
        # Closing one handle leaves the other's locks (and so its WAL) alone.
        assert await _shared_lock(path) == "held", "closing the second handle dropped the first one's locks"
        await first.pool("jobs").push("first again")
    # The probe does see a free file: once every handle is closed, nobody holds the lock.
    assert await _shared_lock(path) == "free"
    async with workhive.open(_url(path), create=False) as hive:
        assert (await hive.pool("jobs").stats()).pending == 3


class _Elsewhere:
    """Runs coroutines on an event loop of its own, in another thread (a handle per thread)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="second-loop", daemon=True)
        self.thread.start()

    async def __call__(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=CHILD_TIMEOUT)
        assert not self.thread.is_alive()
        self.loop.close()


async def _here(coro: Awaitable[T]) -> T:
    return await coro


@contextlib.contextmanager
def _place(where: str) -> Iterator[Callable[[Coroutine[Any, Any, Any]], Awaitable[Any]]]:
    if where == "same-loop":
        yield _here
        return
    elsewhere = _Elsewhere()
    try:
        yield elsewhere
    finally:
        elsewhere.stop()


async def _open(url: str) -> workhive.Hive:
    return await workhive.open(url).open()


async def _push(hive: workhive.Hive, data: Any) -> None:
    await hive.pool("jobs").push(data)


async def _push_through_a_new_handle(url: str, data: Any) -> None:
    async with workhive.open(url) as hive:
        await hive.pool("jobs").push(data)


ROUNDS = 6


def _wal_exists(path: Path) -> bool:
    return os.path.exists(f"{path}-wal")


def _key(data: Any) -> str:
    return json.dumps(data, sort_keys=True)


async def _check_everything_is_there(path: Path, expected: list[Any], wal_deleted: list[int]) -> None:
    """The file is intact, holds exactly the items pushed, and no exiting process took the WAL away."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    async with workhive.open(_url(path), create=False) as hive:
        found = await hive.pool("jobs").items(ItemState.PENDING, limit=10_000)
    assert sorted(_key(item.data) for item in found) == sorted(map(_key, expected))
    assert wal_deleted == [], f"after rounds {wal_deleted}, a process that exited had deleted the WAL in use here"


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["same-loop", "another-thread"])
async def test_two_handles_on_one_file_lose_nothing_to_short_lived_processes(tmp_path: Path, where: str) -> None:
    # The reported sequence, driven step by step: a hive held open, a second handle on the
    # same file held open beside it (as the flatmachines adapter's two backends do), and
    # processes that open the hive, push one item and exit. Each exit is where the WAL was
    # deleted under the two handles; their later pushes then went to a deleted log.
    path = tmp_path / "hive.db"
    url = _url(path)
    expected: list[Any] = []
    wal_deleted: list[int] = []
    with _place(where) as there:
        async with workhive.open(url) as first:
            pool = first.pool("jobs")
            batch = [{"by": "first", "n": n} for n in range(50)]
            await pool.push_many(batch)
            expected += batch
            second = await there(_open(url))
            try:
                for r in range(ROUNDS):
                    batch = [{"by": "first", "round": r, "n": n} for n in range(50)]
                    await pool.push_many(batch)
                    expected += batch
                    await there(_push(second, {"by": "second", "round": r}))
                    expected.append({"by": "second", "round": r})
                    await _child_pushes(url, {"by": "child", "round": r})
                    expected.append({"by": "child", "round": r})
                    if not _wal_exists(path):
                        wal_deleted.append(r)
                await pool.push({"by": "first", "last": True})
                expected.append({"by": "first", "last": True})
            finally:
                await there(second.close())
    await _check_everything_is_there(path, expected, wal_deleted)


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["same-loop", "another-thread"])
async def test_handles_opened_and_closed_beside_a_held_one_leave_its_log_alone(tmp_path: Path, where: str) -> None:
    # Handles come and go next to one held open (a command run in-process while a fleet runs,
    # an adapter reopening per event loop): neither their open nor their close may take the
    # held handle's locks or log away from it.
    path = tmp_path / "hive.db"
    url = _url(path)
    expected: list[Any] = []
    wal_deleted: list[int] = []
    with _place(where) as there:
        async with workhive.open(url) as first:
            pool = first.pool("jobs")
            for r in range(ROUNDS):
                batch = [{"by": "first", "round": r, "n": n} for n in range(50)]
                await pool.push_many(batch)
                expected += batch
                await there(_push_through_a_new_handle(url, {"by": "passing", "round": r}))
                expected.append({"by": "passing", "round": r})
                await _child_pushes(url, {"by": "child", "round": r})
                expected.append({"by": "child", "round": r})
                if not _wal_exists(path):
                    wal_deleted.append(r)
            await pool.push({"by": "first", "last": True})
            expected.append({"by": "first", "last": True})
    await _check_everything_is_there(path, expected, wal_deleted)


# -- no descriptor on the database outside SQLite ---------------------------------------------

#: Audit events through which Python code gets at a file by name (open() and os.open raise "open").
_FILE_EVENTS = frozenset({"open", "os.remove", "os.rename", "os.truncate", "shutil.copyfile"})
_recorders: list[tuple[frozenset[str], list[tuple[str, str]]]] = []
_hook_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Installed once per process (audit hooks cannot be removed); idle unless a test records.
    if not _recorders or event not in _FILE_EVENTS:
        return
    for arg in args[:2]:
        if isinstance(arg, (str, bytes, os.PathLike)):
            name = os.path.abspath(os.fsdecode(arg))
            for watched, seen in _recorders:
                if name in watched:
                    seen.append((event, name))


@contextlib.contextmanager
def _file_access(path: Path) -> Iterator[list[tuple[str, str]]]:
    """Records every open, copy, rename, truncation or removal of ``path`` or its -wal, -shm, -journal by Python."""
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)
        _hook_installed = True
    watched = frozenset(os.path.abspath(f"{path}{suffix}") for suffix in ("", "-wal", "-shm", "-journal"))
    seen: list[tuple[str, str]] = []
    entry = (watched, seen)
    _recorders.append(entry)
    try:
        yield seen
    finally:
        _recorders.remove(entry)


def test_the_recorder_sees_a_python_open_of_the_file(tmp_path: Path) -> None:
    # The recorder below must be able to fail: an open() of the file is seen.
    path = tmp_path / "hive.db"
    path.write_bytes(b"")
    with _file_access(path) as seen:
        with path.open("rb"):
            pass
        with open(f"{path}-wal", "ab"):
            pass
    assert [event for event, _ in seen] == ["open", "open"]


@pytest.mark.asyncio
async def test_workhive_opens_the_database_files_only_through_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any descriptor of the file opened and closed by Python code in a process holding the
    # hive open drops that process's locks; so nothing but SQLite may open the file: not
    # when a handle opens (new file, existing file, create=False), not while it works or
    # closes, not in the commands (run here in-process, next to an open handle).
    monkeypatch.chdir(tmp_path)  # the commands' default lock directory lands here, not in the checkout
    path = tmp_path / "hive.db"
    url = _url(path)
    with _file_access(path) as seen:
        async with workhive.open(url) as first:
            pool = first.pool("jobs")
            await pool.push_many(range(300))  # over INLINE_MAX: the threaded connection too
            async with workhive.open(url) as second, workhive.open(url, create=False) as reader:
                await second.pool("jobs").push("second")
                await reader.pool("jobs").stats()
                await reader.pools()
                await reader.pool("jobs").items(ItemState.PENDING, limit=10)
            item = await pool.claim("w")
            assert item is not None
            await pool.complete(item, "ok")
            for args in (["status"], ["status", "jobs"], ["dead", "jobs"], ["workers"], ["show", "jobs", item.id]):
                result = await asyncio.to_thread(CliRunner().invoke, cli, ["--storage", url, *args])
                assert result.exit_code == 0, (args, result.output)
            await pool.push("after the commands")
    assert seen == []
