"""Benchmark: workhive on PostgreSQL against raw asyncpg, pgqueuer and procrastinate, in one run.

    python bench/postgres.py               # default counts
    python bench/postgres.py --quick       # smaller counts, a smoke check
    WORKHIVE_POSTGRES_URL=postgresql://user@host/db python bench/postgres.py

Everything runs against the same server at the same moment, each system in a
schema of its own (created and dropped here). Printed, each with its ratio to
the baseline measured in this run:

* raw asyncpg (the baseline): the same lease-and-token table shape as
  workhive's, a claim with ``FOR UPDATE SKIP LOCKED`` and a fenced complete
  per item (8 and 32 coroutines, each on its own connection); fused (complete
  the previous item and claim the next in one statement, 16 coroutines);
  batches of 100 (4 coroutines); push with one ``unnest`` insert and with COPY.
* workhive through the public ``Pool`` API: per item at 8 and 32 coroutines,
  ``complete_and_claim`` at 16, ``claim_many(100)`` + ``complete_many``, push
  one at a time and ``push_many``.
* workhive per item with many client processes: 8 processes x 8 coroutines
  (``claim`` then ``complete``), against raw asyncpg running workhive's own
  claim and complete statements (``workhive_postgres.sqlfiles``) in 8 processes
  x 8 connections: what the client costs per item when the clients share the
  machine with the server. Two rounds, launch order swapped.
* ``workhive work`` end to end (``run_fleet``: worker processes spawned,
  registered, heartbeating, a no-op handler) from start until the pool drained,
  with ``work``'s defaults (``--work-*`` to change them), against raw asyncpg's
  batches of 100: ``--work-rounds`` drains of each, in turn, their medians
  compared (each round printed); and ``work`` with a 1 ms handler at total concurrency 4, 16,
  64 and 256 (``bench/support/fleets.py``), against the handler's bound. Beside
  each end-to-end rate: the fleet's fixed cost (the same fleet draining 100
  jobs: start-up and exit) and the steady rate (the end-to-end time less it),
  since start-up is a good part of a drain of a few seconds.
* pgqueuer (batch 10, its default, and batch 100) and procrastinate
  (concurrency 8) draining the same number of no-op jobs; their batched enqueue.
* idle pickup latency p50/p95 for each: with the system idle, push one job and
  time push → handler start.

pgqueuer and procrastinate are bench-only peers (``make bench`` installs them);
without them their lines say so. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from support.fleets import Drain, drain_with_work, sweep_lines, work_sweep
from support.loops import claim_complete_loop
from support.peers import peers_line
from support.procs import env_with_path, wait_for_lines

HERE = Path(__file__).resolve().parent
SERVER = os.environ.get("WORKHIVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TAG = uuid.uuid4().hex[:8]
LINES: list[tuple[str, float, str]] = []


def emit(label: str, value: float, unit: str, base: float | None = None) -> None:
    ratio = f"  ({value / base:.2f}x raw)" if base else ""
    print(f"{label:<58} {value:>10,.0f} {unit}{ratio}", flush=True)


def emit_latency(label: str, samples: list[float]) -> None:
    if not samples:
        print(f"{label:<58} (no samples)")
        return
    ordered = sorted(samples)
    p50 = statistics.median(ordered) * 1000
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000
    print(f"{label:<58} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms", flush=True)


async def admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(SERVER)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def schema_url(schema: str, **options: Any) -> str:
    query = "&".join([f"schema={schema}", *(f"{k}={v}" for k, v in options.items())])
    return f"{SERVER}?{query}"


# -- raw asyncpg ------------------------------------------------------------------
RAW_TABLE = """
CREATE TABLE jobs (
    id bigserial PRIMARY KEY, pool text NOT NULL, payload text NOT NULL, state text NOT NULL,
    priority int NOT NULL DEFAULT 0, attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 5,
    token bigint NOT NULL DEFAULT 0, created_at float8 NOT NULL, available_at float8 NOT NULL,
    claimed_by text, lease_expires_at float8, lease_seconds float8, result text, finished_at float8);
CREATE INDEX jobs_ready ON jobs (pool, priority DESC, available_at, id) WHERE state = 'pending';
CREATE INDEX jobs_leases ON jobs (pool, lease_expires_at) WHERE state = 'claimed';
"""
NOW = "extract(epoch FROM statement_timestamp())::float8"
RAW_PICK = f"""SELECT id FROM jobs WHERE pool = 'bench' AND state = 'pending' AND available_at <= {NOW}
    ORDER BY priority DESC, available_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"""
RAW_CLAIM = f"""UPDATE jobs SET state = 'claimed', claimed_by = $1, attempts = attempts + 1, token = token + 1,
    lease_seconds = 60, lease_expires_at = {NOW} + 60
    WHERE id IN ({RAW_PICK}) RETURNING id, token, payload"""
RAW_COMPLETE = f"""UPDATE jobs SET state = 'done', result = $3, finished_at = {NOW}, lease_expires_at = NULL
    WHERE id = $1 AND token = $2 AND state = 'claimed' AND lease_expires_at > {NOW}"""
RAW_COMPLETE_MANY = f"""UPDATE jobs SET state = 'done', result = a.r, finished_at = {NOW}, lease_expires_at = NULL
    FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS a (id, token, r)
    WHERE jobs.id = a.id AND jobs.token = a.token AND jobs.state = 'claimed' AND jobs.lease_expires_at > {NOW}"""
RAW_FUSED = f"""WITH done AS (
        UPDATE jobs SET state = 'done', result = $4, finished_at = {NOW}, lease_expires_at = NULL
        WHERE id = $2 AND token = $3 AND state = 'claimed' AND lease_expires_at > {NOW} RETURNING id)
    UPDATE jobs SET state = 'claimed', claimed_by = $1, attempts = attempts + 1, token = token + 1,
        lease_seconds = 60, lease_expires_at = {NOW} + 60
    WHERE id IN (SELECT id FROM jobs WHERE pool = 'bench' AND state = 'pending' AND available_at <= {NOW}
                 AND EXISTS (SELECT FROM done)
                 ORDER BY priority DESC, available_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id, token, payload"""
RAW_PUSH = f"""INSERT INTO jobs (pool, payload, state, created_at, available_at)
    SELECT 'bench', p, 'pending', {NOW}, {NOW} FROM unnest($1::text[]) AS p RETURNING id"""


async def raw_pool(schema: str, size: int) -> Any:
    import asyncpg

    return await asyncpg.create_pool(SERVER, min_size=size, max_size=size, server_settings={"search_path": schema})


async def raw_fill(pool: Any, n: int) -> None:
    async with pool.acquire() as conn:
        for start in range(0, n, 10_000):
            await conn.fetch(RAW_PUSH, [f'{{"n":{i}}}' for i in range(start, min(n, start + 10_000))])


async def run_coroutines(n: int, body: Callable[[int], Awaitable[int]]) -> int:
    return sum(await asyncio.gather(*(body(i) for i in range(n))))


async def raw_per_item(pool: Any, coroutines: int) -> int:
    async def one(i: int) -> int:
        done = 0
        async with pool.acquire() as conn:
            while True:
                rows = await conn.fetch(RAW_CLAIM, f"raw{i}", 1)
                if not rows:
                    return done
                await conn.execute(RAW_COMPLETE, rows[0][0], rows[0][1], '{"ok":true}')
                done += 1

    return await run_coroutines(coroutines, one)


async def raw_fused(pool: Any, coroutines: int) -> int:
    async def one(i: int) -> int:
        done = 0
        async with pool.acquire() as conn:
            rows = await conn.fetch(RAW_CLAIM, f"raw{i}", 1)
            while rows:
                nxt = await conn.fetch(RAW_FUSED, f"raw{i}", rows[0][0], rows[0][1], '{"ok":true}')
                done += 1
                rows = nxt
        return done

    return await run_coroutines(coroutines, one)


async def raw_batched(pool: Any, coroutines: int, batch: int) -> int:
    async def one(i: int) -> int:
        done = 0
        async with pool.acquire() as conn:
            while True:
                rows = await conn.fetch(RAW_CLAIM, f"raw{i}", batch)
                if not rows:
                    return done
                await conn.execute(
                    RAW_COMPLETE_MANY, [r[0] for r in rows], [r[1] for r in rows], ['{"ok":true}'] * len(rows)
                )
                done += len(rows)

    return await run_coroutines(coroutines, one)


async def timed(fn: Callable[[], Awaitable[int]]) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = await fn()
    return n, n / (time.perf_counter() - t0)


async def bench_raw(n_item: int, n_batch: int, n_push: int) -> dict[str, float]:
    schema = f"bench_raw_{TAG}"
    out: dict[str, float] = {}
    try:
        for key, coroutines, runner, n in (
            ("per8", 8, raw_per_item, n_item),
            ("per32", 32, raw_per_item, n_item),
            ("fused16", 16, raw_fused, n_item),
            ("batch100", 4, None, n_batch),
        ):
            await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
            pool = await raw_pool(schema, coroutines)
            try:
                async with pool.acquire() as conn:
                    await conn.execute(RAW_TABLE)
                await raw_fill(pool, n)
                if runner is None:
                    done, rate = await timed(lambda p=pool, c=coroutines: raw_batched(p, c, 100))
                else:
                    done, rate = await timed(lambda p=pool, c=coroutines, r=runner: r(p, c))
                assert done == n, (key, done, n)
                out[key] = rate
            finally:
                await pool.close()
        # push: one unnest insert, and COPY
        await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
        pool = await raw_pool(schema, 1)
        try:
            async with pool.acquire() as conn:
                await conn.execute(RAW_TABLE)
                payloads = [f'{{"n":{i}}}' for i in range(n_push)]
                t0 = time.perf_counter()
                await conn.fetch(RAW_PUSH, payloads)
                out["push_unnest"] = n_push / (time.perf_counter() - t0)
                now = time.time()
                records = [("bench", p, "pending", now, now) for p in payloads]
                t0 = time.perf_counter()
                await conn.copy_records_to_table(
                    "jobs", records=records, columns=["pool", "payload", "state", "created_at", "available_at"]
                )
                out["push_copy"] = n_push / (time.perf_counter() - t0)
        finally:
            await pool.close()
    finally:
        await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return out


async def bench_raw_batched(n: int) -> float:
    """Raw asyncpg batches of 100 with 4 coroutines alone (items/s): ``work``'s baseline, measured again."""
    schema = f"bench_rawb_{TAG}"
    await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    try:
        pool = await raw_pool(schema, 4)
        try:
            async with pool.acquire() as conn:
                await conn.execute(RAW_TABLE)
            await raw_fill(pool, n)
            done, rate = await timed(lambda: raw_batched(pool, 4, 100))
            assert done == n, (done, n)
            return rate
        finally:
            await pool.close()
    finally:
        await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


# -- workhive through the API -----------------------------------------------------
async def bench_workhive_api(n_item: int, n_batch: int, n_push: int) -> dict[str, float]:
    import workhive

    schema = f"bench_wh_{TAG}"
    url = schema_url(schema, pool_size=32)
    out: dict[str, float] = {}
    try:
        async with workhive.open(url) as hive:

            async def per_item(coroutines: int, fused: bool) -> int:
                pool = hive.pool(f"per{coroutines}{'f' if fused else ''}")

                async def one(i: int) -> int:
                    return await claim_complete_loop(pool, f"w{i}", {"ok": True}, fused)

                return await run_coroutines(coroutines, one)

            async def batched(coroutines: int) -> int:
                pool = hive.pool("batch")

                async def one(i: int) -> int:
                    done = 0
                    while True:
                        items = await pool.claim_many(100, f"b{i}")
                        if not items:
                            return done
                        await pool.complete_many([(item, {"ok": True}) for item in items])
                        done += len(items)

                return await run_coroutines(coroutines, one)

            for key, coroutines, fused in (("per8", 8, False), ("per32", 32, False), ("fused16", 16, True)):
                name = f"per{coroutines}{'f' if fused else ''}"
                for start in range(0, n_item, 10_000):
                    await hive.pool(name).push_many([{"n": i} for i in range(start, min(n_item, start + 10_000))])
                done, rate = await timed(lambda c=coroutines, f=fused: per_item(c, f))
                assert done == n_item, (key, done)
                out[key] = rate
            for start in range(0, n_batch, 10_000):
                await hive.pool("batch").push_many([{"n": i} for i in range(start, min(n_batch, start + 10_000))])
            done, out["batch100"] = await timed(lambda: batched(4))
            assert done == n_batch, done
            single = hive.pool("push1")
            n_single = max(500, n_push // 50)
            t0 = time.perf_counter()
            for i in range(n_single):
                await single.push({"n": i})
            out["push1"] = n_single / (time.perf_counter() - t0)
            data = [{"n": i} for i in range(n_push)]
            t0 = time.perf_counter()
            await hive.pool("pushmany").push_many(data)
            out["push_many"] = n_push / (time.perf_counter() - t0)
    finally:
        await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return out


# -- per item with many client processes: workhive against raw asyncpg on its own statements ---------
async def _fill_schema(schema: str, pool: str, n: int) -> None:
    import workhive

    async with workhive.open(schema_url(schema)) as hive:
        for start in range(0, n, 10_000):
            await hive.pool(pool).push_many([{"n": i} for i in range(start, min(n, start + 10_000))])


async def _raw_side(schema: str, pool: str, worker: str, coroutines: int, go: Any) -> int:
    """Raw asyncpg running workhive's claim and complete statements, one connection per coroutine."""
    import asyncpg

    from workhive_postgres.backend import MARKS_EVERY, MARKS_LAG, SWEEP_EVERY
    from workhive_postgres.sqlfiles import statements, with_limit

    q = statements(schema)
    claim, complete, marks = with_limit(q["claim"], 1), q["complete_one"], q["advance_marks"]
    result = '{"ok":true}'
    conns = [await asyncpg.connect(SERVER) for _ in range(coroutines)]
    next_marks = [0.0]  # per process, as workhive moves its claim marks

    async def one(conn: Any, name: str) -> int:
        done = 0
        while True:
            now = time.monotonic()
            if now >= next_marks[0]:
                next_marks[0] = now + MARKS_EVERY
                await conn.fetchval(marks, 0.0, pool, MARKS_EVERY, MARKS_LAG, SWEEP_EVERY)
            rows = await conn.fetch(claim, 0.0, pool, name, 60.0)
            if not rows:
                return done
            row = rows[0]
            if not row[12]:  # a spent lease the claim poisoned instead of taking
                continue
            await conn.fetchval(complete, 0.0, pool, row[0], row[5], result)
            done += 1

    try:
        for conn in conns:
            await conn.fetchval(q["now"], 0.0)  # connected and warm before the clock starts
        go()
        return sum(await asyncio.gather(*(one(c, f"{worker}-{i}") for i, c in enumerate(conns))))
    finally:
        for conn in conns:
            await conn.close()


async def _workhive_side(schema: str, pool: str, worker: str, coroutines: int, go: Any) -> int:
    import workhive

    async with workhive.open(schema_url(schema, pool_size=coroutines)) as hive:
        p = hive.pool(pool)
        await p.stats()  # connected, schema checked, before the clock starts
        go()
        loops = (claim_complete_loop(p, f"{worker}-{i}", {"ok": True}, False) for i in range(coroutines))
        return sum(await asyncio.gather(*loops))


def _procs_child(mode: str, schema: str, worker: str, coroutines: int, ready: Any, go: Any, out: Any) -> None:
    def wait_for_go() -> None:
        ready.put(worker)
        go.wait()

    side = _raw_side if mode == "raw" else _workhive_side
    done = asyncio.run(side(schema, "procs", worker, coroutines, wait_for_go))
    out.put((done, time.time()))


def procs_rate(mode: str, n: int, procs: int, coroutines: int) -> float:
    """Items/s of ``procs`` processes x ``coroutines`` draining ``n`` items, per item, in a schema of its own."""
    schema = f"bench_{mode}_procs_{TAG}"
    asyncio.run(admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
    try:
        asyncio.run(_fill_schema(schema, "procs", n))
        ctx = mp.get_context("spawn")
        ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        children = [
            ctx.Process(target=_procs_child, args=(mode, schema, f"p{i}", coroutines, ready, go, out))
            for i in range(procs)
        ]
        for child in children:
            child.start()
        for _ in children:
            ready.get(timeout=300)
        started = time.time()
        go.set()
        results = [out.get(timeout=600) for _ in children]
        for child in children:
            child.join(timeout=30)
        done = sum(r[0] for r in results)
        assert done == n, (mode, done, n)
        return done / (max(r[1] for r in results) - started)
    finally:
        asyncio.run(admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))


def bench_procs(n: int, procs: int = 8, coroutines: int = 8, rounds: int = 2) -> list[tuple[float, float]]:
    """(raw, workhive) items/s per round; the launch order swaps between rounds."""
    out = []
    for round_ in range(rounds):
        order = ("raw", "workhive") if round_ % 2 == 0 else ("workhive", "raw")
        rates = {mode: procs_rate(mode, n, procs, coroutines) for mode in order}
        out.append((rates["raw"], rates["workhive"]))
    return out


# -- workhive work, end to end -----------------------------------------------------
def bench_work_drain(jobs: int, processes: int, concurrency: int, batch: int) -> Drain:
    """``workhive work`` draining ``jobs`` no-op items end to end, in a schema of its own."""
    schema = f"bench_work_{TAG}"
    try:
        return drain_with_work(
            schema_url(schema), "bench", jobs, handler="noop", processes=processes, concurrency=concurrency,
            batch=batch,
        )  # fmt: skip
    finally:
        asyncio.run(admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))


def work_against_raw(
    rounds: int, jobs: int, processes: int, concurrency: int, batch: int
) -> tuple[list[Drain], list[float]]:
    """``rounds`` drains of ``workhive work`` and as many of raw batches of 100, in turn: (drains, raw rates).

    Raw runs first in every other round (raw, work, work, raw, ...): a machine whose speed drifts
    through the rounds then favours neither side. On this 2-core VM one raw run drained 33k items/s
    and the next 54k with nothing else running: a single pair said more of the host than of workhive.
    """
    drains: list[Drain] = []
    raws: list[float] = []
    for n in range(rounds):
        for side in ("raw", "work") if n % 2 == 0 else ("work", "raw"):
            if side == "raw":
                raws.append(asyncio.run(bench_raw_batched(jobs)))
            else:
                drains.append(bench_work_drain(jobs, processes, concurrency, batch))
    return drains, raws


def bench_work_latency(samples: int, tmp: Path) -> list[float]:
    """Idle pickup of ``workhive work``: push one item to an idle fleet, time push -> handler start."""
    import workhive

    schema = f"bench_work_{TAG}"
    url = schema_url(schema)
    try:
        sys.path.insert(0, str(HERE))

        stamp_file = tmp / "workhive-stamps.txt"
        script = (
            "from workhive.runtime import FleetOptions, run_fleet\n"
            f"run_fleet(FleetOptions(pool='latency', handler='worker:stamp', storage={url!r}, processes=1, "
            "progress='none'))\n"
        )
        fleet = subprocess.Popen(
            [sys.executable, "-c", script], env=env_with_path(HERE, BENCH_STAMP_FILE=str(stamp_file))
        )
        latencies: list[float] = []

        async def measure() -> None:
            async with workhive.open(url) as hive:
                pool = hive.pool("latency")
                await pool.push({"i": -1})  # the fleet is up once it ran this one
                await asyncio.to_thread(wait_for_lines, stamp_file, 1, 60.0)
                for i in range(samples):
                    await asyncio.sleep(0.1)  # idle again
                    t0 = time.time()
                    await pool.push({"i": i})
                    line = (await asyncio.to_thread(wait_for_lines, stamp_file, i + 2))[i + 1]
                    latencies.append(float(line.split()[1]) - t0)

        try:
            asyncio.run(measure())
        finally:
            fleet.send_signal(signal.SIGTERM)
            try:
                fleet.wait(30)
            except subprocess.TimeoutExpired:
                fleet.kill()
        return latencies
    finally:
        asyncio.run(admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))


# -- pgqueuer ----------------------------------------------------------------------
async def bench_pgqueuer(jobs: int, samples: int) -> dict[str, Any] | str:
    schema = f"bench_pgq_{TAG}"
    os.environ["PGQUEUER_SCHEMA"] = schema
    try:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries
        from pgqueuer.types import QueueExecutionMode
    except ImportError as exc:
        return f"not installed ({exc.name}); pip install pgqueuer"
    out: dict[str, Any] = {}
    await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    conn = await asyncpg.connect(SERVER)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        await queries.install()
        for batch in (10, 100):
            t0 = time.perf_counter()
            for start in range(0, jobs, 1000):
                size = min(jobs, start + 1000) - start
                await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
            out["enqueue"] = max(out.get("enqueue", 0.0), jobs / (time.perf_counter() - t0))
            qm = QueueManager(Queries(AsyncpgDriver(conn)))
            done = 0

            @qm.entrypoint("noop")
            async def noop(job: Any) -> None:
                nonlocal done
                done += 1

            t0 = time.perf_counter()
            await qm.run(batch_size=batch, mode=QueueExecutionMode.drain, dequeue_timeout=_td(1))
            out[f"batch{batch}"] = done / (time.perf_counter() - t0)

        # pickup latency: an idle queue manager in this process
        qm = QueueManager(Queries(AsyncpgDriver(conn)))
        started: dict[int, float] = {}
        got = asyncio.Event()

        @qm.entrypoint("stamp")
        async def stamp(job: Any) -> None:
            started[int(job.payload)] = time.time()
            got.set()

        enqueue_conn = await asyncpg.connect(SERVER)
        enqueuer = Queries.from_asyncpg_connection(enqueue_conn)
        runner = asyncio.create_task(qm.run(batch_size=10, dequeue_timeout=_td(30)))
        latencies = []
        try:
            await asyncio.sleep(1.0)
            for i in range(samples):
                await asyncio.sleep(0.1)
                got.clear()
                t0 = time.time()
                await enqueuer.enqueue("stamp", str(i).encode())
                await asyncio.wait_for(got.wait(), 30)
                latencies.append(started[i] - t0)
        finally:
            qm.shutdown.set()
            await asyncio.wait_for(runner, 30)
            await enqueue_conn.close()
        out["latency"] = latencies
    finally:
        await conn.close()
        await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return out


def _td(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


# -- procrastinate -----------------------------------------------------------------
async def bench_procrastinate(jobs: int, samples: int) -> dict[str, Any] | str:
    try:
        import procrastinate
    except ImportError as exc:
        return f"not installed ({exc.name}); pip install procrastinate"
    schema = f"bench_proc_{TAG}"
    await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    out: dict[str, Any] = {}
    started: dict[int, float] = {}
    got = asyncio.Event()
    connector = procrastinate.PsycopgConnector(
        conninfo=SERVER, kwargs={"options": f"-c search_path={schema}"}, min_size=2, max_size=12
    )
    app = procrastinate.App(connector=connector)

    @app.task(name="noop")
    async def noop() -> None:
        return None

    @app.task(name="stamp")
    async def stamp(i: int) -> None:
        started[i] = time.time()
        got.set()

    try:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            t0 = time.perf_counter()
            for start in range(0, jobs, 1000):
                await noop.batch_defer_async(*({} for _ in range(start, min(jobs, start + 1000))))
            out["enqueue"] = jobs / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            await app.run_worker_async(concurrency=8, wait=False, install_signal_handlers=False)
            out["drain8"] = jobs / (time.perf_counter() - t0)
            worker = asyncio.create_task(
                app.run_worker_async(concurrency=1, wait=True, install_signal_handlers=False, queues=["default"])
            )
            latencies = []
            try:
                await asyncio.sleep(1.0)
                for i in range(samples):
                    await asyncio.sleep(0.1)
                    got.clear()
                    t0 = time.time()
                    await stamp.defer_async(i=i)
                    await asyncio.wait_for(got.wait(), 30)
                    latencies.append(started[i] - t0)
            finally:
                worker.cancel()
                try:
                    await asyncio.wait_for(worker, 30)
                except (asyncio.CancelledError, Exception):
                    pass
            out["latency"] = latencies
    finally:
        await admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return out


# -- the run ---------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke check")
    parser.add_argument("--latency-samples", type=int, default=30)
    # `workhive work`'s own defaults on a 2-core machine: a process per core, one worker each,
    # claims growing while handlers are quick (batch 1 = adaptive). More workers per process
    # only add claimers racing for the same rows: 2 x 4 with batches of 100 drained slower.
    parser.add_argument("--work-processes", type=int, default=2)
    parser.add_argument("--work-concurrency", type=int, default=1)
    parser.add_argument("--work-batch", type=int, default=1, help="items per claim; 1 = adaptive (the default)")
    parser.add_argument("--work-rounds", type=int, default=3, help="drains of `work` and of raw batches, in turn")
    parser.add_argument("--skip-procs", action="store_true", help="leave out the 8 processes x 8 rows")
    parser.add_argument("--skip-sweep", action="store_true", help="leave out the 1 ms concurrency sweep")
    args = parser.parse_args()
    # Every system drains the same number of jobs: a fixed start-up cost (spawning worker
    # processes, a queue manager's first poll) weighs the same in each rate.
    n_item, n_batch, n_push, n_work = (2_000, 5_000, 20_000, 5_000) if args.quick else (10_000, 50_000, 100_000, 50_000)
    samples = 10 if args.quick else args.latency_samples
    print(
        f"PostgreSQL at {SERVER.rsplit('@', 1)[-1]}; one run, same server, same moment; "
        f"each drain is {n_work:,} no-op jobs; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    print(peers_line("asyncpg", "pgqueuer", "procrastinate"), flush=True)

    raw = asyncio.run(bench_raw(n_item, n_batch, n_push))
    emit("raw asyncpg per item, 8 coroutines (baseline)", raw["per8"], "items/s")
    emit("raw asyncpg per item, 32 coroutines", raw["per32"], "items/s")
    emit("raw asyncpg fused complete+claim, 16 coroutines", raw["fused16"], "items/s")
    emit("raw asyncpg batches of 100, 4 coroutines", raw["batch100"], "items/s")
    emit("raw asyncpg push, one unnest insert", raw["push_unnest"], "items/s")
    emit("raw asyncpg push, COPY", raw["push_copy"], "items/s")

    wh = asyncio.run(bench_workhive_api(n_item, n_batch, n_push))
    emit("workhive per item, 8 coroutines", wh["per8"], "items/s", raw["per8"])
    emit("workhive per item, 32 coroutines", wh["per32"], "items/s", raw["per32"])
    emit("workhive complete_and_claim, 16 coroutines", wh["fused16"], "items/s", raw["fused16"])
    emit("workhive claim_many(100) + complete_many, 4 coroutines", wh["batch100"], "items/s", raw["batch100"])
    emit("workhive push, one item per call", wh["push1"], "items/s")
    emit("workhive push_many", wh["push_many"], "items/s", raw["push_unnest"])

    drains, raws = work_against_raw(
        args.work_rounds, n_work, args.work_processes, args.work_concurrency, args.work_batch
    )
    with tempfile.TemporaryDirectory() as tmp:
        work_latency = bench_work_latency(samples, Path(tmp))
    batch = "adaptive batch" if args.work_batch == 1 else f"batch {args.work_batch}"
    label = f"workhive work end to end, no-op ({args.work_processes} proc x {args.work_concurrency}, {batch})"
    work_rate = statistics.median(d.rate for d in drains)
    emit(label + f", median of {len(drains)}", work_rate, "jobs/s")
    raw_batch = statistics.median(raws)
    steady = statistics.median(d.steady for d in drains)
    fixed = statistics.median(d.fixed for d in drains)
    print(
        f"  of which start-up and exit {fixed:.2f} s, steady {steady:,.0f} jobs/s (medians; start-up and exit: "
        "the same fleet draining 100 jobs)",
        flush=True,
    )
    runs = ", ".join(f"{d.rate:,.0f} / {r:,.0f}" for d, r in zip(drains, raws))
    print(
        f"workhive work no-op / raw asyncpg batches of 100, medians of {len(drains)} rounds in turn "
        f"({raw_batch:,.0f} raw): {work_rate / raw_batch:.2f}x end to end, {steady / raw_batch:.2f}x steady "
        f"(each round, work / raw: {runs})",
        flush=True,
    )
    if not args.skip_sweep:
        sweep = work_sweep(lambda c: schema_url(f"bench_sweep{c}_{TAG}"))
        for c, _ in sweep:
            asyncio.run(admin(f"DROP SCHEMA IF EXISTS bench_sweep{c}_{TAG} CASCADE"))
        for text in sweep_lines(sweep):
            print(text, flush=True)
    if not args.skip_procs:
        n_procs = 4_000 if args.quick else 24_000
        for round_, (raw_rate, wh_rate) in enumerate(bench_procs(n_procs), 1):
            print(
                f"8 proc x 8 per item, round {round_}: raw asyncpg on workhive's statements {raw_rate:,.0f} items/s, "
                f"workhive claim+complete {wh_rate:,.0f} items/s = {wh_rate / raw_rate:.2f}x raw",
                flush=True,
            )

    pgq = asyncio.run(bench_pgqueuer(n_work, samples))
    if isinstance(pgq, str):
        print(f"pgqueuer: {pgq}")
    else:
        emit("pgqueuer drain, batch 10 (its default)", pgq["batch10"], "jobs/s")
        emit("pgqueuer drain, batch 100", pgq["batch100"], "jobs/s")
        emit("pgqueuer batched enqueue", pgq["enqueue"], "jobs/s")
    proc = asyncio.run(bench_procrastinate(n_work, samples))
    if isinstance(proc, str):
        print(f"procrastinate: {proc}")
    else:
        emit("procrastinate drain, concurrency 8", proc["drain8"], "jobs/s")
        emit("procrastinate batch defer", proc["enqueue"], "jobs/s")

    emit_latency("idle pickup: workhive work", work_latency)
    if not isinstance(pgq, str):
        emit_latency("idle pickup: pgqueuer", pgq["latency"])
    if not isinstance(proc, str):
        emit_latency("idle pickup: procrastinate", proc["latency"])

    print(f"ratios in this run (load now {os.getloadavg()[0]:.1f}):")
    print(f"  workhive per item / raw asyncpg, 8 coroutines: {wh['per8'] / raw['per8']:.2f}")
    if not isinstance(pgq, str):
        print(f"  workhive work / pgqueuer batch 100: {work_rate / pgq['batch100']:.2f}")
    if not isinstance(proc, str):
        print(f"  workhive work / procrastinate: {work_rate / proc['drain8']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
