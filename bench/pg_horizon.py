"""Benchmark: claim latency on PostgreSQL while an idle transaction holds the vacuum horizon.

    python bench/pg_horizon.py                  # clean 60 s, pinned 180 s, released 60 s
    python bench/pg_horizon.py --pinned 600     # hold the horizon for ten minutes
    python bench/pg_horizon.py --quick          # 10 s / 30 s / 10 s, a smoke check
    WORKHIVE_POSTGRES_URL=postgresql://user@host/db python bench/pg_horizon.py

Two hives drain side by side, at the same moment, on the same server, each in a
schema of its own (created and dropped here):

* ``marks``: workhive-postgres as shipped (schema version 5: each priority band
  of a pool is claimed from its mark, past the dead entries the horizon keeps);
* ``v3`` (the baseline): the same storage running the version-3 claim and
  next-due statements (below, verbatim), which read every band from the bottom.

A producer pushes a FIXED rate of items into each (``--rate``, in batches every
50 ms) and ``--claimers`` coroutines per hive claim and complete them one at a
time through the public ``Pool`` API, waiting for work when none is due. The
phases: clean; pinned, while one more connection sits idle in
``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT txid_current()`` (its snapshot
and its transaction id hold the horizon for the whole database); released,
after it commits. Printed per phase, and per ``--window`` inside the pinned
phase: the latency of claims that took an item (p50/p99, milliseconds), items
done per second, and the ratios pinned/clean and v3/marks measured in this run.
Latencies include the client's share (asyncio, asyncpg) on a shared machine:
compare the ratios, not the milliseconds. A second table shows the server's
side alone: twice a second a probe runs one claim under EXPLAIN (ANALYZE,
BUFFERS) in a transaction it rolls back (execution time, buffers touched).
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

SERVER = os.environ.get("WORKHIVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TAG = uuid.uuid4().hex[:8]

# The version-3 claim (migration 0003, queries.sql before version 5): one scan of the
# pool's entries in items_claimable from the bottom, every band at once.
V3_CLAIM = """UPDATE @hive.items SET
    state = CASE WHEN state = 'pending' OR attempts < max_attempts THEN 'claimed' ELSE 'poisoned' END,
    available_at = CASE WHEN state = 'claimed' AND attempts < max_attempts THEN lease_expires_at ELSE available_at END,
    claimed_by = CASE WHEN state = 'pending' OR attempts < max_attempts THEN $3::text ELSE claimed_by END,
    attempts = CASE WHEN state = 'pending' OR attempts < max_attempts THEN attempts + 1 ELSE attempts END,
    token = CASE WHEN state = 'pending' OR attempts < max_attempts THEN token + 1 ELSE token END,
    lease_seconds = CASE WHEN state = 'pending' OR attempts < max_attempts THEN $4::float8 END,
    lease_expires_at = CASE WHEN state = 'pending' OR attempts < max_attempts THEN @hive.now_s($1) + $4::float8 END,
    error = CASE WHEN state = 'pending' OR attempts < max_attempts THEN error
        ELSE 'lease expired after attempt ' || attempts || ' of ' || max_attempts
            || ' (worker ' || coalesce(claimed_by, '?') || ' stopped heartbeating or crashed)' END,
    finished_at = CASE WHEN state = 'pending' OR attempts < max_attempts THEN finished_at ELSE @hive.now_s($1) END
WHERE id = ANY (ARRAY (
    SELECT id FROM @hive.items
    WHERE pool = $2 AND state IN ('pending', 'claimed')
        AND (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END) <= @hive.now_s($1)
    ORDER BY priority DESC, (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END), id
    LIMIT $5 FOR UPDATE SKIP LOCKED))
RETURNING id, payload, priority, attempts, max_attempts, token, created_at, available_at, lease_expires_at,
    dedup_key, error, releases, state = 'claimed' AS taken"""
V3_NEXT_DUE = """SELECT least(
    (SELECT min(available_at) FROM @hive.items WHERE pool = $2 AND state = 'pending'),
    (SELECT min(lease_expires_at) FROM @hive.items WHERE pool = $2 AND state = 'claimed')
) - @hive.now_s($1)"""


def in_schema(statement: str, schema: str) -> str:
    """``statement`` with the hive's objects named in ``schema`` (as ``sqlfiles.statements`` fills them)."""
    return statement.replace("@hive.", f'"{schema}".')


class Samples:
    """Claim latencies and completions, stamped with when they happened."""

    def __init__(self) -> None:
        self.claims: list[tuple[float, float]] = []  # (monotonic end, seconds)
        self.done: list[float] = []
        self.server: list[tuple[float, float, int]] = []  # (monotonic, execution seconds, buffers)

    def between(self, start: float, end: float) -> tuple[list[float], int]:
        return [s for t, s in self.claims if start <= t < end], sum(1 for t in self.done if start <= t < end)


async def producer(pool: Any, rate: float, stop: asyncio.Event) -> None:
    # Fixed rate against the clock: each tick pushes what is owed since the start, so a
    # slow push is made up by the next one instead of lowering the rate.
    tick = 0.05
    start = time.monotonic()
    pushed = 0
    while not stop.is_set():
        owed = int(rate * (time.monotonic() - start)) - pushed
        if owed > 0:
            await pool.push_many([{"n": pushed + i} for i in range(owed)])
            pushed += owed
        await asyncio.sleep(tick - (time.monotonic() - start) % tick)


async def claimer(pool: Any, worker: str, samples: Samples, stop: asyncio.Event) -> None:
    while not stop.is_set():
        began = time.monotonic()
        item = await pool.claim(worker, lease=60)
        ended = time.monotonic()
        if item is None:
            await pool.wait_for_work(0.5)
            continue
        samples.claims.append((ended, ended - began))
        await pool.complete(item, "ok")
        samples.done.append(time.monotonic())


async def probe(schema: str, statement: str, params: tuple[Any, ...], samples: Samples, stop: asyncio.Event) -> None:
    """Twice a second, one claim on the server alone: EXPLAIN ANALYZE's execution time and buffers, rolled back."""
    import asyncpg

    conn = await asyncpg.connect(SERVER, server_settings={"search_path": schema})
    try:
        while not stop.is_set():
            await asyncio.sleep(0.5)
            transaction = conn.transaction()
            await transaction.start()
            try:
                found = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, *params)
            finally:
                await transaction.rollback()
            top = (json.loads(found) if isinstance(found, str) else found)[0]
            buffers = int(top["Plan"]["Shared Hit Blocks"]) + int(top["Plan"]["Shared Read Blocks"])
            samples.server.append((time.monotonic(), float(top["Execution Time"]) / 1000, buffers))
    finally:
        await conn.close()


def server_row(label: str, samples: dict[str, Samples], start: float, end: float) -> None:
    cells = []
    p50s = {}
    for name in ("marks", "v3"):
        seen = [(t, b) for at, t, b in samples[name].server if start <= at < end]
        if not seen:
            cells.append(f"{'-':>7} {'-':>8} {'-':>8}")
            continue
        p50s[name] = statistics.median(t for t, _ in seen) * 1000
        buffers = statistics.median(b for _, b in seen)
        cells.append(f"{p50s[name]:7.2f} {pct([t for t, _ in seen], 0.99):8.2f} {buffers:8.0f}")
    ratio = f"  v3/marks p50 {p50s['v3'] / p50s['marks']:5.2f}x" if len(p50s) == 2 and p50s["marks"] else ""
    print(f"{label:<24} {cells[0]}   {cells[1]}{ratio}", flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def row(label: str, spans: dict[str, tuple[list[float], int]], seconds: float) -> dict[str, float]:
    cells = []
    p50s = {}
    for name in ("marks", "v3"):
        lat, done = spans[name]
        if lat:
            p50s[name] = statistics.median(lat) * 1000
            cells.append(f"{p50s[name]:7.2f} {pct(lat, 0.99):8.2f} {done / seconds:6.0f}/s")
        else:
            cells.append(f"{'-':>7} {'-':>8} {done / seconds:6.0f}/s")
    ratio = f"  v3/marks p50 {p50s['v3'] / p50s['marks']:5.2f}x" if len(p50s) == 2 else ""
    print(f"{label:<24} {cells[0]}   {cells[1]}{ratio}", flush=True)
    return p50s


async def run(args: argparse.Namespace) -> None:
    import asyncpg

    import workhive
    from workhive_postgres import PostgresStorage
    from workhive_postgres.sqlfiles import statements, with_limit

    schemas = {name: f"bench_horizon_{name}_{TAG}" for name in ("marks", "v3")}
    size = args.claimers + 2
    hives = {name: workhive.open(f"{SERVER}?schema={schema}&pool_size={size}") for name, schema in schemas.items()}
    pin = await asyncpg.connect(SERVER)
    try:
        for hive in hives.values():
            await hive.open()
        v3 = hives["v3"].storage
        assert isinstance(v3, PostgresStorage)
        # The baseline runs the version-3 statements on the same code and schema (a private
        # table of statements: the shared one stays as shipped) and never moves a mark.
        v3._q = {
            **statements(schemas["v3"]),
            "claim": in_schema(V3_CLAIM, schemas["v3"]),
            "next_due": in_schema(V3_NEXT_DUE, schemas["v3"]),
        }
        v3.marks_every = float("inf")
        samples = {name: Samples() for name in hives}
        stop = asyncio.Event()
        tasks = []
        for name, hive in hives.items():
            pool = hive.pool("jobs")
            tasks.append(asyncio.create_task(producer(pool, args.rate, stop)))
            tasks += [
                asyncio.create_task(claimer(pool, f"{name}-{i}", samples[name], stop)) for i in range(args.claimers)
            ]
        probes = {
            "marks": (with_limit(statements(schemas["marks"])["claim"], 1), (0.0, "jobs", "probe", 60.0)),
            "v3": (in_schema(V3_CLAIM, schemas["v3"]), (0.0, "jobs", "probe", 60.0, 1)),
        }
        for name, (statement, params) in probes.items():
            tasks.append(asyncio.create_task(probe(schemas[name], statement, params, samples[name], stop)))
        print(
            f"fixed rate {args.rate:g} items/s per hive, {args.claimers} claimers each; "
            f"phases: clean {args.clean:g} s, pinned {args.pinned:g} s, released {args.released:g} s",
            flush=True,
        )
        print(f"{'':<24} {'marks p50':>7} {'p99 ms':>8} {'done':>8}   {'v3 p50':>7} {'p99 ms':>8} {'done':>8}")
        t0 = time.monotonic()
        await asyncio.sleep(args.clean)
        t1 = time.monotonic()
        await pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await pin.fetchval("SELECT txid_current()")
        await asyncio.sleep(args.pinned)
        t2 = time.monotonic()
        await pin.execute("COMMIT")
        await asyncio.sleep(args.released)
        t3 = time.monotonic()
        stop.set()
        await asyncio.gather(*tasks)

        def spans(start: float, end: float) -> dict[str, tuple[list[float], int]]:
            return {name: s.between(start, end) for name, s in samples.items()}

        clean = row("clean", spans(t0 + min(5.0, args.clean / 4), t1), t1 - t0 - min(5.0, args.clean / 4))
        last: dict[str, float] = {}
        start = t1
        while start < t2 - args.window / 2:
            end = t2 if t2 - (start + args.window) < args.window / 2 else start + args.window
            last = row(f"pinned {start - t1:4.0f}-{end - t1:4.0f} s", spans(start, end), end - start)
            start = end
        pinned = row("pinned (whole)", spans(t1, t2), t2 - t1)
        row("released 0-10 s", spans(t2, t2 + 10), 10)
        row("released (whole)", spans(t2, t3), t3 - t2)
        print(
            "server side, one claim alone twice a second (EXPLAIN ANALYZE):\n"
            f"{'':<24} {'marks p50':>7} {'p99 ms':>8} {'buffers':>8}   {'v3 p50':>7} {'p99 ms':>8} {'buffers':>8}"
        )
        server_row("clean", samples, t0 + min(5.0, args.clean / 4), t1)
        start = t1
        while start < t2 - args.window / 2:
            end = t2 if t2 - (start + args.window) < args.window / 2 else start + args.window
            server_row(f"pinned {start - t1:4.0f}-{end - t1:4.0f} s", samples, start, end)
            start = end
        server_row("released 0-10 s", samples, t2, t2 + 10)
        server_row("released (whole)", samples, t2, t3)
        for name in ("marks", "v3"):
            if name in clean and name in last and name in pinned:
                print(
                    f"{name}: pinned p50 / clean p50 {pinned[name] / clean[name]:5.2f}x, "
                    f"last pinned window p50 / clean p50 {last[name] / clean[name]:5.2f}x",
                    flush=True,
                )
    finally:
        await pin.close()
        for hive in hives.values():
            await hive.close()
        admin = await asyncpg.connect(SERVER)
        try:
            for schema in schemas.values():
                await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await admin.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="items pushed per second into each hive")
    parser.add_argument("--claimers", type=int, default=16, help="claiming coroutines per hive")
    parser.add_argument("--clean", type=float, default=60.0, help="seconds before the horizon is held")
    parser.add_argument("--pinned", type=float, default=180.0, help="seconds the idle transaction holds it")
    parser.add_argument("--released", type=float, default=60.0, help="seconds after it ends")
    parser.add_argument("--window", type=float, default=30.0, help="seconds per line inside the pinned phase")
    parser.add_argument("--quick", action="store_true", help="10 s / 30 s / 10 s, windows of 10 s")
    args = parser.parse_args()
    if args.quick:
        args.clean, args.pinned, args.released, args.window = 10.0, 30.0, 10.0, 10.0
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
