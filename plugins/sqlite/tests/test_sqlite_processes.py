"""Many processes on one file: exactly-once completion, crash recovery, long writers, cross-process wake-ups."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import signal
from collections import Counter
from pathlib import Path

import attrs
import pytest
import sqlite_workers as mp_workers

import workhive
from workhive.errors import LeaseLost
from workhive.models import ItemState

CTX = mp.get_context("spawn")


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/hive.db"


async def _fill(url: str, n: int) -> list[str]:
    async with workhive.open(url) as hive:
        return await hive.pool("jobs").push_many({"n": i} for i in range(n))


@pytest.mark.asyncio
async def test_eight_processes_drain_5000_items_exactly_once(tmp_path: Path) -> None:
    url = _url(tmp_path)
    ids = await _fill(url, 5000)
    start, out = CTX.Event(), CTX.Queue()
    # Half claim one at a time, half in batches: both paths race for the same rows.
    procs = [CTX.Process(target=mp_workers.drain, args=(url, f"w{i}", 1 if i % 2 else 7, start, out)) for i in range(8)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0

    claims = [c for _, cs, _ in results for c in cs]
    completions = [c for _, _, done in results for c in done]
    # Leases are long, so every claim must be the only one its item ever got:
    # a second claim would mean two live leases on one item.
    assert sorted(i for i, _ in claims) == sorted(ids)
    assert {token for _, token in claims} == {1}
    assert Counter(i for i, _ in completions) == Counter(ids)
    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        stats = await pool.stats()
        assert (stats.done, stats.pending, stats.claimed, stats.poisoned) == (5000, 0, 0, 0)
        done = await pool.items(ItemState.DONE, limit=5000)
        assert {d.attempts for d in done} == {1}
        by_worker = {w: {i for i, _ in done_items} for w, _, done_items in results}
        assert all(d.result == {"by": d.claimed_by} and d.id in by_worker[d.claimed_by] for d in done)


@pytest.mark.asyncio
async def test_a_killed_workers_claims_come_back_after_the_lease(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _fill(url, 5)
    out = CTX.Queue()
    victim = CTX.Process(target=mp_workers.claim_and_hang, args=(url, 3, 1.0, out))
    victim.start()
    held = out.get(timeout=60)
    assert len(held) == 3
    mp_workers.kill(victim.pid or 0)
    victim.join(timeout=30)
    assert victim.exitcode == -signal.SIGKILL

    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        finished: dict[str, int] = {}
        deadline = asyncio.get_running_loop().time() + 60  # the 1 s leases expire well before
        while asyncio.get_running_loop().time() < deadline:
            for item in await pool.claim_many(5, "survivor"):
                await pool.complete(item, "rescued")
                finished[item.id] = item.token
            if len(finished) == 5:
                break
            await pool.wait_for_work(0.1)
        assert len(finished) == 5
        for item_id, token in held:
            assert finished[item_id] == token + 1
            # The dead worker's claim, presented late with its saved token, is refused.
            stale = attrs.evolve(await pool.get(item_id), token=token)
            with pytest.raises(LeaseLost):
                await pool.complete(stale, "from beyond")
            again = await pool.get(item_id)
            assert (again.state, again.result, again.attempts) == (ItemState.DONE, "rescued", 2)


@pytest.mark.asyncio
async def test_workers_wait_out_a_long_write_transaction(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _fill(url, 50)
    ready = CTX.Event()
    holder = CTX.Process(target=mp_workers.hold_write_lock, args=(str(tmp_path / "hive.db"), 1.5, ready))
    holder.start()
    try:
        assert ready.wait(60)
        # However slowly a loaded machine runs the holder, the workers wait for it (2 minutes per try).
        async with workhive.open(f"{url}?busy_timeout=120000") as hive:
            pool = hive.pool("jobs")

            async def worker(name: str) -> int:
                done = 0
                while item := await pool.claim(name):
                    await pool.complete(item)
                    done += 1
                return done

            counts = await asyncio.gather(*(worker(f"w{i}") for i in range(4)))
            assert sum(counts) == 50
            await pool.push_many(["after", "the", "wait"])
            stats = await pool.stats()
            assert (stats.done, stats.pending) == (50, 3)
    finally:
        holder.join(timeout=30)
    assert holder.exitcode == 0


@pytest.mark.asyncio
async def test_wait_for_work_wakes_on_a_push_from_another_process(tmp_path: Path) -> None:
    url = _url(tmp_path)
    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        await pool.push("warm-up")
        warm = await pool.claim("me")
        assert warm is not None
        await pool.complete(warm)
        producer = CTX.Process(target=mp_workers.push_later, args=(url, 0.5))
        producer.start()
        try:
            # A generous timeout: if only the timeout ended the wait there'd be nothing to claim
            # sooner than the producer pushed; waking is what the assertion below relies on.
            await asyncio.wait_for(pool.wait_for_work(120.0), timeout=60)
            producer.join(timeout=30)
            assert await pool.claim("me") is not None
        finally:
            producer.join(timeout=30)
