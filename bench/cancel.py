"""How long a cancellation takes to reach a running handler, against the heartbeat interval.

``Pool.cancel`` marks a claimed item CANCELLED in storage; the worker process
learns it at its next heartbeat and cancels the handler's task (async) or turns
``ctx.cancelled`` true (sync). So the latency from ``cancel()`` returning to the
handler seeing it should be at most one heartbeat interval (plus one read), and
about half of one on average, since cancels land at a random phase of the beat.

For each engine (SQLite in a temporary file, PostgreSQL in a schema of its own,
Redis under a prefix of its own, all removed afterwards) one worker process's
runtime (the code of ``workhive work``'s children, run in this process) works
one pool; each sample pushes an item whose handler waits forever, waits for it
to start, sleeps a random fraction of a beat, cancels it and times until the
handler saw the cancellation. The baseline is the heartbeat interval of the same
run: each line prints the latencies and their ratio to it (target: max <= 1).

    .venv/bin/python bench/cancel.py [--samples 12] [--heartbeat 1.0]

Not a test: nothing is asserted. A server that is not running is reported and skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

# bench/ holds redis.py and postgres.py: run as a script, this directory would shadow the drivers.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import workhive  # noqa: E402
from workhive.runtime.handler import Handler  # noqa: E402
from workhive.runtime.options import FleetOptions  # noqa: E402
from workhive.runtime.process import ProcessRuntime  # noqa: E402

PG = os.environ.get("WORKHIVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("WORKHIVE_REDIS_URL", "redis://127.0.0.1:6379/0")

#: item id -> set when its handler started (a threading.Event: the sync probe runs in a thread)
started: dict[str, threading.Event] = {}
#: item id -> when its handler saw the cancellation (time.monotonic), and set then
seen_at: dict[str, float] = {}
stopped: dict[str, threading.Event] = {}


async def probe_async(ctx: Any) -> None:
    started[ctx.item_id].set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        seen_at[ctx.item_id] = time.monotonic()
        stopped[ctx.item_id].set()
        raise


def probe_sync(ctx: Any) -> None:
    started[ctx.item_id].set()
    if ctx.wait_cancelled(600.0):
        seen_at[ctx.item_id] = time.monotonic()
        stopped[ctx.item_id].set()


async def measure(url: str, kind: str, samples: int, heartbeat: float) -> list[float]:
    is_async = kind == "async"
    function = probe_async if is_async else probe_sync
    handler = Handler(spec=f"bench.cancel:probe_{kind}", function=function, is_async=is_async)
    latencies: list[float] = []
    started.clear()  # item ids start over in every new store
    stopped.clear()
    seen_at.clear()
    async with workhive.open(url) as hive:
        pool = hive.pool("cancel-bench")
        options = FleetOptions(pool=pool.name, handler=handler.spec, storage=url, heartbeat=heartbeat, lease=60.0)
        runtime = ProcessRuntime(options, hive=hive, handler=handler)
        task = asyncio.create_task(runtime.run())
        try:
            for _ in range(samples):
                item_id = await pool.push("wait")
                started[item_id], stopped[item_id] = threading.Event(), threading.Event()
                await asyncio.to_thread(started[item_id].wait, 120)
                await asyncio.sleep(random.uniform(0, heartbeat))  # a random phase of the beat
                t0 = time.monotonic()
                await pool.cancel([item_id])
                await asyncio.to_thread(stopped[item_id].wait, 120)  # the handler stamped seen_at first
                latencies.append(seen_at[item_id] - t0)
        finally:
            runtime.request_stop()
            await task
    return latencies


async def postgres_url() -> tuple[str, Any]:
    import asyncpg

    schema = f"bench_cancel_{uuid.uuid4().hex[:8]}"

    async def drop() -> None:
        conn = await asyncpg.connect(PG)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    conn = await asyncpg.connect(PG, timeout=5)
    await conn.close()
    return f"{PG}?schema={schema}", drop


async def redis_url() -> tuple[str, Any]:
    import redis.asyncio as aioredis

    prefix = f"bench-cancel-{uuid.uuid4().hex[:8]}"
    client = aioredis.from_url(REDIS)
    await client.ping()

    async def drop() -> None:
        for pattern in (f"{{{prefix}}}*", f"{{{prefix}/*"):
            async for key in client.scan_iter(match=pattern, count=1000):
                await client.delete(key)
        await client.aclose()

    return f"{REDIS}?prefix={prefix}", drop


def line(engine: str, kind: str, samples: list[float], heartbeat: float) -> str:
    p50 = statistics.median(samples)
    worst = max(samples)
    return (
        f"cancel -> {kind:<5} handler  {engine:<10} heartbeat {heartbeat * 1000:6.0f} ms  "
        f"p50 {p50 * 1000:7.1f} ms ({p50 / heartbeat:4.2f}x)  max {worst * 1000:7.1f} ms ({worst / heartbeat:4.2f}x)  "
        f"n={len(samples)}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=12)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="workhive-bench-cancel-") as tmp:
        engines: list[tuple[str, Any]] = [("sqlite", None), ("postgres", postgres_url), ("redis", redis_url)]
        for engine, make in engines:
            for kind in ("async", "sync"):
                drop = None
                try:
                    if make is None:
                        url = f"sqlite:////{tmp.lstrip('/')}/{kind}.db"
                    else:
                        url, drop = await make()
                except Exception as exc:  # a server that is not there: say so, go on
                    print(f"cancel -> {kind:<5} handler  {engine:<10} skipped: {type(exc).__name__}: {exc}")
                    continue
                try:
                    samples = await measure(url, kind, args.samples, args.heartbeat)
                finally:
                    if drop is not None:
                        await drop()
                print(line(engine, kind, samples, args.heartbeat), flush=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
