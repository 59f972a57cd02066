"""Worker processes for the fleet tests (spawned: they import this module by name)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import workhive
from workhive.errors import LeaseLost, OutcomeUnknown


def drain(url: str, name: str, coroutines: int, lease: float, out: Any) -> None:
    """Drain pool 'jobs' with ``coroutines`` loops of complete_and_claim; report every accepted completion."""

    async def main() -> list[tuple[str, int]]:
        accepted: list[tuple[str, int]] = []
        async with workhive.open(url, lease=lease) as hive:
            pool = hive.pool("jobs")

            async def claim(worker: str) -> Any:
                try:
                    return await pool.claim(worker)
                except OutcomeUnknown:
                    # The server killed the connection while the claim was in flight (claims are not
                    # run again): an item it took comes back when its lease ends, like a lost claim.
                    return None

            async def loop(i: int) -> None:
                worker = f"{name}-{i}"
                item = await claim(worker)
                while True:
                    if item is None:
                        # Lost claims come back after their lease: wait for the pool to empty for good.
                        stats = await pool.stats()
                        if stats.pending + stats.delayed + stats.claimed == 0:
                            return
                        await pool.wait_for_work(0.2)
                        item = await claim(worker)
                        continue
                    current = item
                    try:
                        item = await pool.complete_and_claim(current, {"by": worker}, worker)
                        accepted.append((current.id, current.token))
                    except LeaseLost:
                        item = None

            await asyncio.gather(*(loop(i) for i in range(coroutines)))
        return accepted

    out.put((name, os.getpid(), asyncio.run(main())))


def hold_then_wait(url: str, ready: Any) -> None:
    """Claim three items and take a lock, report them, then wait to be killed."""

    async def main() -> None:
        from workhive_postgres import PostgresLocks

        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            items = await pool.claim_many(3, "doomed", lease=3.0)
            locks = PostgresLocks(url)
            held = await locks.acquire("repo", ttl=60.0, timeout=10.0, worker_id="doomed")
            ready.put(([(i.id, i.token) for i in items], held.token, os.getpid()))
            await asyncio.sleep(3600)

    asyncio.run(main())
