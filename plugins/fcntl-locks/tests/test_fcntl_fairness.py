"""Fair handover: a process that takes a lock again at once cannot overtake a process waiting in line.

Every test checks the mechanism (who got which token, who is in line), never a
duration: the waiting helpers only give up after generous deadlines.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from workhive.errors import InvalidArgument, LockTimeout
from workhive_fcntl_locks import FcntlLocks, queue
from workhive_fcntl_locks.provider import STREAK_TOKENS, SUFFIX

WORKER = str(Path(__file__).with_name("lock_worker.py"))


def line_of(locks: FcntlLocks, name: str) -> str:
    return queue.queue_dir_for(locks.path_for(name), SUFFIX)


def someone_in_line(locks: FcntlLocks, name: str) -> bool:
    return queue.first_other(line_of(locks, name), None, ring=False)


def write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


async def wait_until(predicate: Callable[[], bool], what: str, deadline: float = 60.0) -> None:
    give_up = time.monotonic() + deadline
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up after {deadline:g}s waiting for {what}")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def taker(lockdir: str, name: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """Another process that takes ``name`` once (waiting as long as it takes), prints "got <token>", exits."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, WORKER, "take", lockdir, name, "1", stdout=asyncio.subprocess.PIPE
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def tokens_printed(proc: asyncio.subprocess.Process) -> list[int]:
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0
    return [int(line.split()[1]) for line in out.decode().splitlines() if line.startswith("got ")]


@pytest.mark.asyncio
async def test_a_holder_that_reacquires_at_once_cannot_take_the_lock_twice_in_a_row_while_another_waits(
    tmp_path: Path,
) -> None:
    lockdir = str(tmp_path / "locks")
    # max_streak=0: hand over at every release; a handoff_timeout far beyond the test's deadlines.
    locks = FcntlLocks(lockdir, max_streak=0, handoff_timeout=600)
    held = await locks.acquire("fair", ttl=None, timeout=0, worker_id=None)
    for _ in range(3):
        async with taker(lockdir, "fair") as other:
            await wait_until(lambda: someone_in_line(locks, "fair"), "the other process to wait in line")
            ours = held.token
            await locks.release(held)
            held = await locks.acquire("fair", ttl=None, timeout=120, worker_id=None)  # at once
            [theirs] = await tokens_printed(other)
        assert theirs == ours + 1, "the waiting process must get the token right after ours"
        assert held.token == theirs + 1
    await locks.release(held)
    await locks.close()
    assert os.listdir(line_of(locks, "fair")) == []  # everyone left the line


@pytest.mark.asyncio
async def test_a_waiter_killed_while_the_lock_is_handed_to_it_holds_nobody_up(tmp_path: Path) -> None:
    lockdir = str(tmp_path / "locks")
    locks = FcntlLocks(lockdir, max_streak=0, handoff_timeout=600)
    held = await locks.acquire("fair", ttl=None, timeout=0, worker_id=None)
    async with taker(lockdir, "fair") as other:
        await wait_until(lambda: someone_in_line(locks, "fair"), "the other process to wait in line")
        other.send_signal(signal.SIGSTOP)  # it cannot take the lock we hand over...
        await locks.release(held)
        assert "fair" not in [h.name for h in await locks.list_locks()]
        other.kill()  # ...and dies before it could
        await other.wait()
        # Only its death (the kernel closes its FIFO) can end our wait: handoff_timeout is 600s.
        again = await locks.acquire("fair", ttl=None, timeout=120, worker_id=None)
    assert again.token == held.token + 1
    assert os.listdir(line_of(locks, "fair")) == []  # its entry was removed as dead
    await locks.release(again)
    await locks.close()


@pytest.mark.asyncio
async def test_a_stuck_waiter_delays_the_holder_only_up_to_the_handoff_timeout(tmp_path: Path) -> None:
    lockdir = str(tmp_path / "locks")
    locks = FcntlLocks(lockdir, max_streak=0, handoff_timeout=0.2)
    held = await locks.acquire("fair", ttl=None, timeout=0, worker_id=None)
    async with taker(lockdir, "fair") as other:
        await wait_until(lambda: someone_in_line(locks, "fair"), "the other process to wait in line")
        other.send_signal(signal.SIGSTOP)  # alive and in line, but its event loop cannot run
        await locks.release(held)
        again = await locks.acquire("fair", ttl=None, timeout=120, worker_id=None)
        assert again.token == held.token + 1
        other.send_signal(signal.SIGCONT)
        await locks.release(again)
        [theirs] = await tokens_printed(other)  # it still gets its turn
    assert theirs > again.token
    await locks.close()


@pytest.mark.asyncio
async def test_giving_up_while_the_lock_is_handed_over_says_so(tmp_path: Path) -> None:
    lockdir = str(tmp_path / "locks")
    locks = FcntlLocks(lockdir, max_streak=0, handoff_timeout=600)
    held = await locks.acquire("fair", ttl=None, timeout=0, worker_id=None)
    async with taker(lockdir, "fair") as other:
        await wait_until(lambda: someone_in_line(locks, "fair"), "the other process to wait in line")
        other.send_signal(signal.SIGSTOP)
        await locks.release(held)
        with pytest.raises(LockTimeout, match="free but handed over to a process waiting in line") as info:
            await locks.acquire("fair", ttl=None, timeout=0, worker_id=None)
        assert info.value.holder is None  # type: ignore[attr-defined]
        other.send_signal(signal.SIGCONT)
        [theirs] = await tokens_printed(other)
    assert theirs == held.token + 1
    await locks.close()


@pytest.mark.asyncio
async def test_a_waiter_that_gives_up_leaves_the_line_and_clean_removes_empty_lines(tmp_path: Path) -> None:
    a, b = FcntlLocks(tmp_path), FcntlLocks(tmp_path)
    held = await a.acquire("busy", ttl=None, timeout=0, worker_id=None)
    with pytest.raises(LockTimeout):
        await b.acquire("busy", ttl=None, timeout=0.05, worker_id=None)
    waiter = asyncio.create_task(b.acquire("busy", ttl=None, timeout=None, worker_id=None))
    await wait_until(lambda: someone_in_line(a, "busy"), "the waiter to be in line")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not someone_in_line(a, "busy")
    assert os.listdir(line_of(a, "busy")) == []
    await a.release(held)
    assert await b.clean() == ["busy"]
    assert sorted(os.listdir(tmp_path)) == [".token-floor", ".token-floor.lock"]


@pytest.mark.asyncio
async def test_a_file_in_the_line_that_is_no_waiters_fifo_is_ignored_and_never_written(tmp_path: Path) -> None:
    locks = FcntlLocks(tmp_path, max_streak=0, handoff_timeout=600)
    held = await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
    os.makedirs(line_of(locks, "x"))
    planted = os.path.join(line_of(locks, "x"), "00000000000000000000-1-0")
    write_file(planted, b"precious")
    await locks.release(held)
    again = await locks.acquire("x", ttl=None, timeout=0, worker_id=None)  # nobody to hand over to
    assert again.token == held.token + 1
    assert read_file(planted) == b"precious"
    await locks.release(again)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_streak": -1}, {"max_streak": float("nan")}, {"handoff_timeout": 0}, {"handoff_timeout": "1"}],
)
def test_bad_fairness_settings_raise_invalid_argument(tmp_path: Path, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        FcntlLocks(tmp_path, **kwargs)  # type: ignore[arg-type]


def rings_waiting(entry: queue.Entry) -> int:
    try:
        return len(os.read(entry.fd, 512))
    except BlockingIOError:
        return 0


@pytest.mark.asyncio
async def test_within_its_streak_a_holder_rings_the_line_only_if_it_does_not_take_the_lock_again_at_once(
    tmp_path: Path,
) -> None:
    locks = FcntlLocks(tmp_path, max_streak=3600)  # never hands over: only the deferred ring is left
    held = await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
    waiter = queue.join(line_of(locks, "x"))  # a waiter in line, as another process would be
    try:
        await locks.release(held)
        held = await locks.acquire("x", ttl=None, timeout=0, worker_id=None)  # again, at once
        await asyncio.sleep(0)  # the deferred ring runs now
        assert rings_waiting(waiter) == 0, "rung although the holder took the lock again"
        await locks.release(held)
        await asyncio.sleep(0)
        assert rings_waiting(waiter) == 1, "the lock went free and the waiter in line was not woken"
    finally:
        queue.leave(waiter)


@pytest.mark.asyncio
async def test_past_its_streak_a_holder_rings_the_first_in_line_and_leaves_the_lock_to_it(tmp_path: Path) -> None:
    locks = FcntlLocks(tmp_path, max_streak=0, handoff_timeout=600)
    held = await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
    first, second = queue.join(line_of(locks, "x")), queue.join(line_of(locks, "x"))
    try:
        await locks.release(held)
        assert (rings_waiting(first), rings_waiting(second)) == (1, 0)
        with pytest.raises(LockTimeout, match="handed over"):
            await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
        queue.leave(first)  # gives up (or dies): the next in line is rung, and still goes first
        with pytest.raises(LockTimeout, match="handed over"):
            await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
        assert rings_waiting(second) >= 1
    finally:
        queue.leave(second)
    again = await locks.acquire("x", ttl=None, timeout=0, worker_id=None)  # nobody left in line
    assert again.token == held.token + 1
    await locks.release(again)


@pytest.mark.asyncio
async def test_a_streak_ends_after_streak_tokens_acquisitions_however_fast_they_are(tmp_path: Path) -> None:
    locks = FcntlLocks(tmp_path, max_streak=3600, handoff_timeout=600)
    waiter = queue.join(line_of(locks, "x"))
    try:
        for _ in range(STREAK_TOKENS - 1):  # the first STREAK_TOKENS - 1 releases keep the turn...
            await locks.release(await locks.acquire("x", ttl=None, timeout=0, worker_id=None))
        last = await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
        assert rings_waiting(waiter) == 0
        await locks.release(last)  # ...the next one hands it over
        assert rings_waiting(waiter) == 1
        with pytest.raises(LockTimeout, match="handed over"):
            await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
    finally:
        queue.leave(waiter)


def test_a_holder_looking_at_the_line_while_a_waiter_joins_never_removes_the_new_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worst moment for a racing holder (or clean()) to look: the joiner has made its FIFO but
    # not opened it yet. An entry visible then looks dead (nobody reads it) and would be removed,
    # leaving its owner waiting out of line where no holder could hand it a turn.
    line = str(tmp_path / "x.queue")
    real_open = os.open
    looked: list[bool] = []

    def open_while_someone_looks(path: str, flags: int, *args: object) -> int:
        if flags & os.O_RDWR and os.path.dirname(path) == line:  # the joiner opening its read end
            looked.append(queue.first_other(line, None, ring=True))
            queue.sweep(line)
        return real_open(path, flags, *args)

    monkeypatch.setattr(queue.os, "open", open_while_someone_looks)
    entry = queue.join(line)
    monkeypatch.undo()
    try:
        assert looked == [False]  # not in line yet, so neither rung nor removed
        assert os.listdir(line) == [entry.name]
        assert queue.first_other(line, None, ring=True)  # in line now, and reachable
        assert rings_waiting(entry) == 1
    finally:
        queue.leave(entry)
    assert os.listdir(line) == []


def test_a_joiner_that_died_before_showing_its_entry_leaves_nothing_clean_keeps(tmp_path: Path) -> None:
    line = tmp_path / "x.queue"
    line.mkdir()
    fresh, leftover = line / ".0-1-0", line / ".0-2-0"
    os.mkfifo(fresh)
    os.mkfifo(leftover)
    old = time.time() - queue.STALE_HIDDEN_SECONDS - 5
    os.utime(leftover, (old, old))
    assert not queue.first_other(str(line), None, ring=True)  # hidden entries are nobody in line
    queue.sweep(str(line))
    assert os.listdir(line) == [fresh.name]  # a fresh one may be a joiner at work: left alone


@pytest.mark.asyncio
async def test_a_waiter_whose_entry_vanished_takes_a_new_place_in_line(tmp_path: Path) -> None:
    holder, waiter = FcntlLocks(tmp_path, max_streak=0, handoff_timeout=600), FcntlLocks(tmp_path)
    held = await holder.acquire("x", ttl=None, timeout=0, worker_id=None)
    task = asyncio.create_task(waiter.acquire("x", ttl=None, timeout=120, worker_id=None))
    line = line_of(holder, "x")
    await wait_until(lambda: someone_in_line(holder, "x"), "the waiter to join the line")
    [gone] = os.listdir(line)
    os.unlink(os.path.join(line, gone))  # removed from outside: nobody could hand it a turn now
    await wait_until(lambda: someone_in_line(holder, "x"), "the waiter to take a new place")
    [again] = os.listdir(line)
    assert again != gone
    await holder.release(held)  # handed to the waiter, which is in line again
    with pytest.raises(LockTimeout):  # handed over, or already taken by the waiter: never ours again
        await holder.acquire("x", ttl=None, timeout=0, worker_id=None)
    theirs = await task
    assert theirs.token == held.token + 1
    await waiter.release(theirs)
    await holder.close()
    await waiter.close()
