"""``runtime.key_slots``: at most N calls in flight per key across the fleet, a dead holder's slot comes back.

No timing: tasks meet at events, calls to the lock provider are counted, and a
child process is SIGKILLed while it holds a slot (the kernel frees its flock).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import workhive
from workhive.budgets import Budget
from workhive.credentials import Credential, CredentialPool
from workhive.errors import LockTimeout
from workhive.locks import HeldLock
from workhive.models import WorkItem
from workhive.runtime import events as ev
from workhive.runtime.handler import Handler
from workhive.runtime.key_slots import KeySlots, build_slots, slot_lock_name
from workhive.runtime.keys import Keys
from workhive.runtime.options import FleetOptions
from workhive_fcntl_locks import FcntlLocks
from workhive_memory.locks import MemoryLocks

SECRET = "sk-slots-test-secret"


def capped(limit: int, name: str = "KEY_A") -> Credential:
    return Credential(name, SECRET + name, budget=Budget(concurrency=limit))


class CountingLocks:
    """A lock provider that counts acquire attempts (the round trips a waiter costs)."""

    def __init__(self, inner: MemoryLocks) -> None:
        self.inner = inner
        self.acquires = 0

    async def acquire(self, name: str, *, ttl: float | None, timeout: float | None, worker_id: str | None) -> HeldLock:
        self.acquires += 1
        return await self.inner.acquire(name, ttl=ttl, timeout=timeout, worker_id=worker_id)

    async def release(self, lock: HeldLock) -> None:
        await self.inner.release(lock)


@pytest.mark.asyncio
async def test_never_more_than_the_limit_in_flight_across_processes_sharing_the_locks() -> None:
    # Two KeySlots on one shared memory:// store stand for two processes of a fleet.
    store = f"memory://slots-{os.getpid()}-a"
    fleet = [KeySlots(MemoryLocks(store), [capped(3)]), KeySlots(MemoryLocks(store), [capped(3)])]
    in_flight, peak, calls = 0, 0, 0
    go, full = asyncio.Event(), asyncio.Event()

    async def call(slots: KeySlots) -> None:
        nonlocal in_flight, peak, calls
        slot = await slots.take(capped(3))
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 3:
            full.set()
        await go.wait()
        in_flight -= 1
        calls += 1
        await slots.give_back(slot)

    tasks = [asyncio.create_task(call(fleet[i % 2])) for i in range(12)]
    await asyncio.wait_for(full.wait(), 60)
    for _ in range(50):  # let every other task try: none may get in
        await asyncio.sleep(0)
    assert in_flight == 3
    go.set()
    await asyncio.gather(*tasks)
    assert (peak, calls) == (3, 12)


@pytest.mark.asyncio
async def test_a_waiter_blocks_in_the_provider_instead_of_polling_and_a_process_never_asks_past_its_share() -> None:
    locks = CountingLocks(MemoryLocks(f"memory://slots-{os.getpid()}-b"))
    slots = KeySlots(locks, [capped(2)], wait_slice=3600.0)  # type: ignore[arg-type]
    held = [await slots.take(capped(2)), await slots.take(capped(2))]
    before = locks.acquires
    other = KeySlots(locks, [capped(2)], wait_slice=3600.0)  # type: ignore[arg-type]
    waiter = asyncio.create_task(other.take(capped(2)))
    local = asyncio.create_task(slots.take(capped(2)))  # this process already holds its 2: waits locally
    for _ in range(200):
        await asyncio.sleep(0)
    assert not waiter.done() and not local.done()
    assert locks.acquires - before == 2 + 1, "each slot tried once, then one blocking wait; nothing from `local`"
    for slot in held:
        await slots.give_back(slot)
    got = await asyncio.wait_for(waiter, 60)
    assert got is not None and slot_lock_name(capped(2), got.index) == got.held.name
    local_slot = await asyncio.wait_for(local, 60)
    await slots.give_back(local_slot)
    await other.give_back(got)
    await other.give_back(got)  # twice: a no-op, the local share is not inflated
    assert other._gates["KEY_A"]._value == 2  # type: ignore[attr-defined]


def test_keys_without_a_concurrency_limit_need_no_slots() -> None:
    async def main() -> None:
        async with workhive.open("memory://") as hive:
            assert build_slots([Credential("K", "sk-k", budget=Budget(rpm=60))], hive) is None
            slots = build_slots([capped(1), Credential("K", "sk-k")], hive)
            assert slots is not None and slots.limit(capped(1)) == 1
            assert await slots.take(Credential("K", "sk-k")) is None

    asyncio.run(main())


@pytest.fixture
def item() -> Iterator[WorkItem]:
    async def claim() -> WorkItem:
        async with workhive.open("memory://") as hive:
            await hive.pool("jobs").push({"x": 1})
            claimed = await hive.pool("jobs").claim("w1")
            assert claimed is not None
            return claimed

    yield asyncio.run(claim())


def handle(ctx: object) -> None:
    return None


@pytest.mark.asyncio
async def test_a_worker_holds_the_keys_slot_for_its_call_and_gives_it_back_with_the_key(item: WorkItem) -> None:
    credential = capped(1)
    pool = CredentialPool([credential])
    keys = Keys(
        pool,
        None,
        handler=Handler(spec="tests:handle", function=handle, is_async=False),
        options=FleetOptions(pool="jobs", handler="tests:handle"),
        emit=ev.ListSink(),
        sleep=asyncio.sleep,
        stopping=lambda: False,
    )
    store = f"memory://slots-{os.getpid()}-c"
    keys.slots = KeySlots(MemoryLocks(store), [credential])
    other_process = KeySlots(MemoryLocks(store), [credential], wait_slice=3600.0)
    key = await keys.take(item)
    assert key.slot is not None
    blocked = asyncio.create_task(other_process.take(credential))
    for _ in range(50):
        await asyncio.sleep(0)
    assert not blocked.done(), "the fleet's one slot is held by the call"
    async with key:
        pass
    assert key.slot is None
    await other_process.give_back(await asyncio.wait_for(blocked, 60))


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from workhive.budgets import Budget
    from workhive.credentials import Credential
    from workhive.runtime.key_slots import KeySlots
    from workhive_fcntl_locks import FcntlLocks

    async def main():
        key = Credential("KEY_A", sys.argv[2], budget=Budget(concurrency=2))
        slots = KeySlots(FcntlLocks("fcntl:///" + sys.argv[1]), [key])
        await slots.take(key)
        await slots.take(key)
        print("holding", flush=True)
        await asyncio.Event().wait()  # "mid-call" until killed

    asyncio.run(main())
    """
)


def test_a_holder_sigkilled_mid_call_gives_its_slots_back(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "locks"), SECRET + "KEY_A"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "holding"

        async def take_both(when_killed: bool) -> None:
            slots = KeySlots(FcntlLocks(f"fcntl:///{tmp_path / 'locks'}"), [capped(2)], wait_slice=0.05)
            if not when_killed:
                locks = FcntlLocks(f"fcntl:///{tmp_path / 'locks'}")
                for index in (0, 1):  # both slots are held by the live child
                    with pytest.raises(LockTimeout):
                        await locks.acquire(slot_lock_name(capped(2), index), ttl=None, timeout=0, worker_id=None)
                return
            first = await asyncio.wait_for(slots.take(capped(2)), 60)
            second = await asyncio.wait_for(slots.take(capped(2)), 60)
            assert first is not None and second is not None and {first.index, second.index} == {0, 1}

        asyncio.run(take_both(False))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        asyncio.run(take_both(True))
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=60)


@pytest.mark.asyncio
async def test_a_worker_cancelled_while_it_waits_for_its_reserved_time_gives_the_slot_and_the_key_back(
    item: WorkItem,
) -> None:
    from workhive.budgets import FleetBudgets

    credential = Credential("KEY_A", SECRET, budget=Budget(rpm=60, concurrency=2))
    pool = CredentialPool([credential])
    sleeping = asyncio.Event()

    async def sleep_until_cancelled(seconds: float) -> None:
        sleeping.set()
        await asyncio.Event().wait()

    async with workhive.open("memory://") as hive:
        keys = Keys(
            pool,
            FleetBudgets(hive.storage, None, [credential]),  # type: ignore[arg-type]
            handler=Handler(spec="tests:handle", function=handle, is_async=False),
            options=FleetOptions(pool="jobs", handler="tests:handle"),
            emit=ev.ListSink(),
            sleep=sleep_until_cancelled,
            stopping=lambda: False,
        )
        store = f"memory://slots-{os.getpid()}-d"
        keys.slots = KeySlots(MemoryLocks(store), [credential])
        first = await keys.take(item)  # goes at once: the second waits a minute's sixtieth for its slot
        second = asyncio.create_task(keys.take(item))
        await asyncio.wait_for(sleeping.wait(), 60)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        assert [s.in_flight for s in pool.snapshot()] == [1], "the waiting worker's key went back"
        probe = KeySlots(MemoryLocks(store), [credential], wait_slice=3600.0)
        assert await probe._try(credential, 1 - first.slot.index, timeout=0) is not None, "and its slot"  # type: ignore[union-attr]
        async with first:
            pass


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres", "redis"])
def test_every_engines_lock_provider_keeps_the_limit_between_two_hives(kind: str, tmp_path: Path) -> None:
    """The slots are the locks a fleet on that engine uses (sqlite: flock on one machine), two hives
    on one store standing for two processes."""
    from workhive.testing.services import isolated_store

    async def run(url: str) -> tuple[int, int]:
        locks = f"fcntl:///{tmp_path / 'locks'}" if kind == "sqlite" else None
        in_flight, peak, done = 0, 0, 0
        full, go = asyncio.Event(), asyncio.Event()
        async with workhive.open(url, locks=locks) as one, workhive.open(url, locks=locks) as two:
            fleet = [KeySlots(hive.locks(), [capped(2)], wait_slice=0.2) for hive in (one, two)]

            async def call(slots: KeySlots) -> None:
                nonlocal in_flight, peak, done
                slot = await slots.take(capped(2))
                in_flight += 1
                peak = max(peak, in_flight)
                if in_flight == 2:
                    full.set()
                await go.wait()
                in_flight -= 1
                done += 1
                await slots.give_back(slot)

            tasks = [asyncio.create_task(call(fleet[i % 2])) for i in range(6)]
            await asyncio.wait_for(full.wait(), 60)
            for index in (0, 1):  # both slots are fleet-wide locks, held: the other four wait
                with pytest.raises(LockTimeout):
                    await one.locks().acquire(slot_lock_name(capped(2), index), ttl=None, timeout=0, worker_id=None)
            assert in_flight == 2
            go.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 120)
        return peak, done

    with isolated_store(kind, tmp_path) as url:
        assert asyncio.run(run(url)) == (2, 6)
