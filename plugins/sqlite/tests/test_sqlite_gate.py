"""The write gate (workhive_sqlite.gate): writers queue on it, reads pass it, nothing keeps it by mistake.

Each test watches the gate itself: whether a writer is queued on it is read from
/proc/locks (Linux), not guessed from how long a call took.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import pytest_asyncio

from workhive.models import ItemState, NewItem
from workhive_sqlite import SqliteStorage
from workhive_sqlite.backend import INLINE_MAX
from workhive_sqlite.gate import GATE_SUFFIX, LONG_SUFFIX

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads the kernel's lock table, /proc/locks (Linux)"),
]

#: How long a test waits for a state it expects (a writer queued, a call answered): a bound, not a measurement.
PATIENCE = 30.0


def gate_of(database: Path) -> Path:
    return Path(f"{database}{GATE_SUFFIX}")


def long_mark_of(database: Path) -> Path:
    return Path(f"{database}{LONG_SUFFIX}")


def queued_on(gate: Path) -> int:
    """How many lock requests wait on ``gate`` now, by the kernel's lock table.

    A waiting request's line has ``->`` and names the file as ``major:minor:inode``
    (the device's numbers in hex), three fields from the end.
    """
    st = os.stat(gate)
    file = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    waiting = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" not in fields:
            continue
        major, minor, inode = fields[-3].split(":")
        if (int(major, 16), int(minor, 16), int(inode)) == file:
            waiting += 1
    return waiting


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not seen within {PATIENCE:g}s: {what}")
        await asyncio.sleep(0.005)


@contextmanager
def held(gate: Path) -> Iterator[int]:
    """The gate, taken by a descriptor of the test's own (as another writer would)."""
    fd = os.open(gate, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def is_free(gate: Path) -> bool:
    fd = os.open(gate, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def pending_in_file(database: Path, pool: str) -> int:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT count(*) FROM items WHERE pool = ? AND state = 'pending'", (pool,)).fetchone()[0]


@pytest_asyncio.fixture
async def storage(tmp_path: Path) -> AsyncIterator[SqliteStorage]:
    store = SqliteStorage(f"sqlite:///{tmp_path}/hive.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_a_write_queues_behind_a_long_write_and_runs_when_it_lets_go(
    storage: SqliteStorage, tmp_path: Path
) -> None:
    database = tmp_path / "hive.db"
    gate = gate_of(database)
    assert gate.exists() and long_mark_of(database).exists()
    with held(gate), held(long_mark_of(database)):  # as a long write holds them
        push = asyncio.ensure_future(storage.push("p", [NewItem("{}")]))
        await until(lambda: queued_on(gate) == 1, "the push queued on the gate")
        assert not push.done()
        assert pending_in_file(database, "p") == 0
    ids = await asyncio.wait_for(push, PATIENCE)
    assert len(ids) == 1 and pending_in_file(database, "p") == 1
    assert is_free(gate) and is_free(long_mark_of(database))


async def test_behind_a_short_write_a_write_waits_for_sqlites_lock_not_for_the_gate(
    storage: SqliteStorage, tmp_path: Path
) -> None:
    database = tmp_path / "hive.db"
    holder = sqlite3.connect(database, isolation_level=None)
    try:
        with held(gate_of(database)):  # a short write holds the gate (and, below, SQLite's lock)
            holder.execute("BEGIN IMMEDIATE")
            push = asyncio.ensure_future(storage.push("p", [NewItem("{}")]))
            await asyncio.sleep(0)  # the push has tried the gate and gone to the thread
            holder.execute("COMMIT")
            # Done while the gate is still held: it waited in SQLite's busy handler, not in the queue.
            assert len(await asyncio.wait_for(push, PATIENCE)) == 1
            assert queued_on(gate_of(database)) == 0
    finally:
        holder.close()


async def test_a_long_write_queues_behind_any_write(storage: SqliteStorage, tmp_path: Path) -> None:
    database = tmp_path / "hive.db"
    gate = gate_of(database)
    many = [NewItem("{}") for _ in range(INLINE_MAX + 1)]  # run on the thread, by size
    with held(gate):  # a short write's hold: no long mark
        push = asyncio.ensure_future(storage.push("p", many))
        await until(lambda: queued_on(gate) == 1, "the long push queued on the gate")
        assert pending_in_file(database, "p") == 0
    await asyncio.wait_for(push, PATIENCE)
    assert pending_in_file(database, "p") == INLINE_MAX + 1


async def test_a_long_write_holds_the_gate_and_its_mark_while_it_runs(storage: SqliteStorage, tmp_path: Path) -> None:
    database = tmp_path / "hive.db"
    inside, go_on = threading.Event(), threading.Event()

    def a_long_write(*_: object) -> None:
        inside.set()
        go_on.wait(PATIENCE)

    running = asyncio.ensure_future(storage._thread(a_long_write))
    await until(inside.is_set, "the long write running")
    assert not is_free(gate_of(database)) and not is_free(long_mark_of(database))
    go_on.set()
    await asyncio.wait_for(running, PATIENCE)
    assert is_free(gate_of(database)) and is_free(long_mark_of(database))


async def test_reads_pass_a_held_gate(storage: SqliteStorage, tmp_path: Path) -> None:
    database = tmp_path / "hive.db"
    [item_id] = await storage.push("p", [NewItem("{}")])
    with held(gate_of(database)):
        # Each would wait for the test's hold, and time out, if it took the gate.
        assert (await asyncio.wait_for(storage.stats("p"), PATIENCE)).pending == 1
        assert await asyncio.wait_for(storage.pools(), PATIENCE) == ["p"]
        assert (await asyncio.wait_for(storage.get("p", item_id), PATIENCE)) is not None
        assert len(await asyncio.wait_for(storage.list_items("p", ItemState.PENDING, 10), PATIENCE)) == 1
        assert await asyncio.wait_for(storage.state_get("ns", "k"), PATIENCE) is None
        assert queued_on(gate_of(database)) == 0


async def test_an_operation_that_fails_lets_go_of_the_gate_on_either_connection(
    storage: SqliteStorage, tmp_path: Path
) -> None:
    gate = gate_of(tmp_path / "hive.db")

    def broken(*_: object) -> None:
        raise ZeroDivisionError("the operation's own bug")

    with pytest.raises(ZeroDivisionError):
        await storage._run(broken)  # the event loop's connection
    assert is_free(gate)
    with pytest.raises(ZeroDivisionError):
        await storage._thread(broken)  # the connection's thread, as a long write
    assert is_free(gate) and is_free(long_mark_of(tmp_path / "hive.db"))


async def test_two_handles_in_one_process_queue_for_each_other(tmp_path: Path) -> None:
    database = tmp_path / "hive.db"
    first = SqliteStorage(f"sqlite:///{database}")
    second = SqliteStorage(f"sqlite:///{database}")
    await first.open()
    await second.open()
    try:
        inside, go_on = threading.Event(), threading.Event()

        def hold_the_gate(*_: object) -> None:  # a long write on the first handle's thread
            inside.set()
            go_on.wait(PATIENCE)

        holding = asyncio.ensure_future(first._thread(hold_the_gate))
        await until(inside.is_set, "the first handle's thread inside the gate")
        push = asyncio.ensure_future(second.push("p", [NewItem("{}")]))
        await until(lambda: queued_on(gate_of(database)) == 1, "the second handle's push queued on the gate")
        assert not push.done() and pending_in_file(database, "p") == 0
        go_on.set()
        await asyncio.wait_for(holding, PATIENCE)
        assert len(await asyncio.wait_for(push, PATIENCE)) == 1
    finally:
        await second.close()
        await first.close()


async def test_a_process_killed_holding_the_gate_lets_the_others_on(storage: SqliteStorage, tmp_path: Path) -> None:
    database = tmp_path / "hive.db"
    gate = gate_of(database)
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import fcntl, os, sys, time\n"
        "for path in sys.argv[1:]:\n"
        "    fcntl.flock(os.open(path, os.O_RDWR), fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n",
        str(gate),
        str(long_mark_of(database)),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert await asyncio.wait_for(holder.stdout.readline(), PATIENCE) == b"held\n"
        push = asyncio.ensure_future(storage.push("p", [NewItem("{}")]))
        await until(lambda: queued_on(gate) == 1, "the push queued behind the other process's long write")
        holder.kill()  # SIGKILL: the kernel drops its locks with its descriptors
        assert len(await asyncio.wait_for(push, PATIENCE)) == 1
        assert pending_in_file(database, "p") == 1
    finally:
        if holder.returncode is None:
            holder.kill()
        await holder.wait()


async def test_a_gate_that_cannot_be_opened_leaves_the_store_working_without_it(tmp_path: Path) -> None:
    database = tmp_path / "hive.db"
    gate_of(database).mkdir()  # a directory where the side file would be: it cannot be opened for writing
    store = SqliteStorage(f"sqlite:///{database}")
    await store.open()
    try:
        assert store._gate is None
        assert len(await store.push("p", [NewItem("{}")])) == 1
        assert len(await store.claim("p", "w", 1, 30.0)) == 1
    finally:
        await store.close()
