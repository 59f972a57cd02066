"""Benchmark of the memory backend through the public ``Pool`` API.

Prints push rates (single and batched), claim+complete rates (single and
batched), the cost of one claim at 1k and at 1M pending items with their
ratio, and a baseline measured in the same run: a bare ``heapq`` + ``dict``
loop doing the same claim+complete bookkeeping, so the numbers mean something
on any machine.

    python bench/memory.py            # about 30-40 s
    python bench/memory.py --quick    # smaller sizes, a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import time
from typing import Any

import workhive
from workhive import Job, Pool

PLUGINS = workhive.PluginManager()


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>12,.0f} /s"


def hive() -> workhive.Hive:
    return workhive.open("memory://", manager=PLUGINS)


ROUNDS = 3  # every rate is the best of this many rounds: the machine may be shared


async def bench_push(n: int) -> tuple[float, float]:
    single = many = 0.0
    batch = [{"i": i} for i in range(n)]
    for _ in range(ROUNDS):
        async with hive() as h:
            pool = h.pool("push")
            start = time.perf_counter()
            for i in range(n):
                await pool.push(i)
            single = max(single, n / (time.perf_counter() - start))
            start = time.perf_counter()
            for k in range(0, n, 1000):
                await pool.push_many(batch[k : k + 1000])
            many = max(many, n / (time.perf_counter() - start))
    return single, many


async def bench_claim_complete(n: int) -> float:
    best = 0.0
    for _ in range(ROUNDS):
        async with hive() as h:
            pool = h.pool("work")
            await pool.push_many(range(n))
            start = time.perf_counter()
            for _ in range(n):
                item = await pool.claim("w1")
                await pool.complete(item)  # type: ignore[arg-type]
            best = max(best, n / (time.perf_counter() - start))
    return best


async def bench_claim_many(n: int, batch: int = 100) -> float:
    best = 0.0
    for _ in range(ROUNDS):
        async with hive() as h:
            pool = h.pool("work")
            await pool.push_many(range(n))
            start = time.perf_counter()
            for _ in range(n // batch):
                items = await pool.claim_many(batch, "w1")
                await pool.complete_many([(item, None) for item in items])
            best = max(best, n / (time.perf_counter() - start))
    return best


async def claim_cost(pending: int, per_round: int = 2000, rounds: int = 5) -> float:
    """µs per claim with ``pending`` items waiting (the best of ``rounds`` rounds)."""
    async with hive() as h:
        pool: Pool = h.pool("deep")
        for k in range(0, pending, 50_000):
            await pool.push_many(range(min(50_000, pending - k)))
        best = float("inf")
        for _ in range(rounds):
            # Top up so each round starts at pending + per_round and ends at pending.
            await pool.push_many([Job(i) for i in range(per_round)])
            start = time.perf_counter()
            claimed = [await pool.claim("w1") for _ in range(per_round)]
            best = min(best, (time.perf_counter() - start) / per_round)
            await pool.complete_many([(item, None) for item in claimed if item is not None])
        return best * 1e6


def raw_heapq_claim_complete(n: int) -> float:
    """The floor: the same bookkeeping with a bare heap and dict, no facade, no records."""
    return max(_raw_round(n) for _ in range(ROUNDS))


def _raw_round(n: int) -> float:
    now = time.time()
    heap: list[tuple[int, float, int, str]] = [(0, now, i, str(i)) for i in range(n)]
    heapq.heapify(heap)
    items: dict[str, list[Any]] = {str(i): ["pending", 0, 0, None] for i in range(n)}  # state, attempts, token, lease
    leases: list[tuple[float, int, str]] = []
    start = time.perf_counter()
    for seq in range(n):
        # claim
        item_id = heapq.heappop(heap)[3]
        rec = items[item_id]
        rec[0] = "claimed"
        rec[1] += 1
        rec[2] += 1
        rec[3] = time.time() + 60.0
        heapq.heappush(leases, (rec[3], seq, item_id))
        token = rec[2]
        # complete
        rec = items[item_id]
        if rec[0] == "claimed" and rec[2] == token and rec[3] > time.time():
            rec[0] = "done"
            rec[3] = None
    return n / (time.perf_counter() - start)


async def main(quick: bool) -> None:
    n = 10_000 if quick else 50_000
    deep = 100_000 if quick else 1_000_000
    gc.collect()
    print(
        f"workhive memory backend benchmark: rates over {n:,} items (best of {ROUNDS} rounds); "
        f"claim cost at 1k and {deep:,} pending"
    )
    single, many = await bench_push(n)
    print(f"  push (one at a time)          {single:>12,.0f} /s")
    print(f"  push_many (batches of 1000)   {many:>12,.0f} /s")
    cc = await bench_claim_complete(n)
    print(f"  claim + complete, per item    {cc:>12,.0f} /s")
    cm = await bench_claim_many(n)
    print(f"  claim_many + complete_many    {cm:>12,.0f} /s   (batches of 100)")
    small = await claim_cost(1_000)
    large = await claim_cost(deep)
    label = "1M" if deep == 1_000_000 else f"{deep // 1000}k"
    print(f"  claim cost at 1k pending      {small:>12.2f} µs")
    print(f"  claim cost at {label:<3} pending     {large:>12.2f} µs")
    print(f"  claim cost ratio {label}/1k        {large / small:>12.2f}")
    raw = raw_heapq_claim_complete(n)
    print(f"  raw heapq+dict claim+complete {raw:>12,.0f} /s   (baseline, same run)")
    print(f"  workhive / raw heapq = {cc / raw:.2f}   (claim+complete through Pool vs the bare loop)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes for a smoke run")
    asyncio.run(main(parser.parse_args().quick))
