"""Benchmark: workhive on SQLite against raw sqlite3 and flatmachines, in one run.

    python bench/sqlite.py            # default run, about two minutes with the sweep
    python bench/sqlite.py --quick    # smaller counts, for a smoke check

Every rate is measured on this machine in this run, and printed with its ratio
to the baseline measured here too:

* raw sqlite3: the same claim + complete per item (one ``UPDATE … RETURNING``
  to claim, one ``UPDATE`` to complete, autocommit), same pragmas (WAL,
  synchronous=NORMAL), one process, no asyncio: what SQLite itself can do.
* raw sqlite3 as above plus an index of held leases (reference only): the
  index workhive keeps so expired leases are found in O(log n); it makes each
  claim and completion write more pages under the write lock, which with
  several processes is what bounds the rate.
* workhive per item, 1, 4 and 16 processes (total items/s across processes),
  through the public ``Pool`` API: ``pool.claim`` then ``pool.complete``, the
  unfused loop most users write.
* the same with ``complete_and_claim``: each item still claimed with its own
  lease and token, but its completion and the next claim share one
  transaction (one commit per item instead of two). For reference, raw
  sqlite3 doing the same fusion (``BEGIN IMMEDIATE``, complete, claim,
  ``COMMIT``) is measured too; the baseline above stays the unfused loop.
* workhive batched: ``claim_many(100)`` + ``complete_many``.
* push (one item per call) and ``push_many``.
* ``workhive work`` with a 1 ms handler at total concurrency 4, 16, 64 and 256
  (``bench/support/fleets.py``, as bench/postgres and bench/redis run it), each
  against the handler's bound, and the rates at 64 and 256 over the rate at 16:
  more concurrency must not mean less work done.
* flatmachines' ``SQLiteWorkBackend``, the release ``make bench`` installs
  (pinned in ``bench/requirements.txt``; the line names the release found, and
  says so if it is missing).

Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sqlite3
import sys
import tempfile
import time
from typing import Any

from support.fleets import sweep_lines, work_sweep
from support.loops import claim_complete_loop
from support.peers import peer, peers_line

import workhive

RESULT = {"ok": True}


# -- raw sqlite3 baseline -------------------------------------------------------
def raw_sqlite3(path: str, n: int, fused: bool = False, lease_index: bool = False) -> float:
    """Seconds to claim and complete ``n`` items; ``lease_index`` adds an index of held leases, as workhive keeps."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute(
        """CREATE TABLE jobs (id INTEGER PRIMARY KEY, pool TEXT NOT NULL, payload TEXT NOT NULL, state TEXT NOT NULL,
        priority INTEGER NOT NULL, available_at REAL NOT NULL, claimed_by TEXT, token INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0, lease_expires_at REAL, result TEXT, finished_at REAL)"""
    )
    conn.execute("CREATE INDEX ready ON jobs (pool, priority DESC, available_at, id) WHERE state = 'pending'")
    if lease_index:
        # What finds expired leases in O(log n); every claim and completion also updates it.
        conn.execute("CREATE INDEX leases ON jobs (pool, lease_expires_at) WHERE state = 'claimed'")
    now = time.time()
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO jobs (pool, payload, state, priority, available_at) VALUES ('bench', ?, 'pending', 0, ?)",
        ((f'{{"n":{i}}}', now) for i in range(n)),
    )
    conn.execute("COMMIT")
    claim = """UPDATE jobs SET state = 'claimed', claimed_by = ?, token = token + 1, attempts = attempts + 1,
        lease_expires_at = ?
        WHERE id = (SELECT id FROM jobs WHERE pool = 'bench' AND state = 'pending' AND available_at <= ?
                    ORDER BY priority DESC, available_at, id LIMIT 1)
        RETURNING id, token, payload"""
    complete = """UPDATE jobs SET state = 'done', result = ?, finished_at = ?
        WHERE id = ? AND token = ? AND state = 'claimed' AND lease_expires_at > ?"""
    done = 0
    started = time.perf_counter()
    if fused:
        # One write transaction per item: complete the held item and claim the next.
        t = time.time()
        row = conn.execute(claim, ("raw", t + 60, t)).fetchone()
        while row is not None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(complete, ('{"ok":true}', time.time(), row[0], row[1], time.time()))
            t = time.time()
            row = conn.execute(claim, ("raw", t + 60, t)).fetchone()
            conn.execute("COMMIT")
            done += 1
        elapsed = time.perf_counter() - started
        conn.close()
        assert done == n, (done, n)
        return elapsed
    while True:
        t = time.time()
        row = conn.execute(claim, ("raw", t + 60, t)).fetchone()
        if row is None:
            break
        conn.execute(complete, ('{"ok":true}', time.time(), row[0], row[1], time.time()))
        done += 1
    elapsed = time.perf_counter() - started
    conn.close()
    assert done == n, (done, n)
    return elapsed


# -- workhive --------------------------------------------------------------------
async def fill(url: str, n: int) -> None:
    async with workhive.open(url) as hive:
        pool = hive.pool("bench")
        for start in range(0, n, 10_000):
            await pool.push_many({"n": i} for i in range(start, min(n, start + 10_000)))


async def drain_per_item(url: str, worker: str, fused: bool = False) -> int:
    async with workhive.open(url) as hive:
        return await claim_complete_loop(hive.pool("bench"), worker, RESULT, fused)


async def drain_batched(url: str, worker: str, batch: int) -> int:
    async with workhive.open(url) as hive:
        pool = hive.pool("bench")
        done = 0
        while True:
            items = await pool.claim_many(batch, worker)
            if not items:
                return done
            await pool.complete_many([(item, RESULT) for item in items])
            done += len(items)


def _proc_worker(url: str, worker: str, fused: bool, ready: Any, go: Any, out: Any) -> None:
    async def run() -> tuple[int, float]:
        async with workhive.open(url) as hive:
            pool = hive.pool("bench")
            await pool.stats()  # connection and schema check done before the clock starts
            ready.put(worker)
            go.wait()
            done = await claim_complete_loop(pool, worker, RESULT, fused)
            return done, time.time()

    out.put(asyncio.run(run()))


def workhive_processes(url: str, n_procs: int, fused: bool = False) -> tuple[int, float]:
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_proc_worker, args=(url, f"p{i}", fused, ready, go, out)) for i in range(n_procs)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=300)
    started = time.time()
    go.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    total = sum(r[0] for r in results)
    return total, max(r[1] for r in results) - started


async def push_rates(url: str, n_single: int, n_many: int) -> tuple[float, float]:
    async with workhive.open(url) as hive:
        pool = hive.pool("push")
        started = time.perf_counter()
        for i in range(n_single):
            await pool.push({"n": i})
        single = time.perf_counter() - started
        batch = 10_000
        started = time.perf_counter()
        for start in range(0, n_many, batch):
            await pool.push_many([{"n": i} for i in range(start, start + batch)])
        many = time.perf_counter() - started
        return single, many


async def breakdown(url: str, n: int) -> None:
    """Where one per-item claim+complete spends its time: SQL, hand-offs to the thread, the rest."""
    from workhive_sqlite import backend, ops

    in_sql = [0.0]
    to_thread = [0]
    originals = {name: getattr(ops.Operations, name) for name in ("claim", "complete")}
    call = backend.SqliteStorage._call

    def timing(op: Any) -> Any:
        def timed(self: Any, *args: Any) -> Any:
            started = time.perf_counter()
            try:
                return op(self, *args)
            finally:
                in_sql[0] += time.perf_counter() - started

        return timed

    async def counted(self: Any, fn: Any, *args: Any) -> Any:
        to_thread[0] += 1
        return await call(self, fn, *args)

    for name, op in originals.items():
        setattr(ops.Operations, name, timing(op))
    backend.SqliteStorage._call = counted  # type: ignore[method-assign]
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("bench")
            await pool.push_many(range(n))
            in_sql[0], to_thread[0] = 0.0, 0
            started = time.perf_counter()
            for _ in range(n):
                item = await pool.claim("w")
                assert item is not None
                await pool.complete(item, RESULT)
            total = time.perf_counter() - started
    finally:
        for name, op in originals.items():
            setattr(ops.Operations, name, op)
        backend.SqliteStorage._call = call  # type: ignore[method-assign]
    per = 1e6 / n
    print(
        f"  per item (claim+complete, 1 proc): {total * per:.0f} us = SQL {in_sql[0] * per:.0f} us "
        f"+ facade/event loop {max(0.0, total - in_sql[0]) * per:.0f} us; "
        f"{to_thread[0]} calls of {2 * n} went to the thread (checkpoints, a locked database)",
        flush=True,
    )


# -- flatmachines ----------------------------------------------------------------
def flatmachines_rate(path: str, n: int, budget: float) -> tuple[int, float] | str:
    try:
        from flatmachines.distributed import create_work_backend  # type: ignore[import-not-found]
    except ImportError as exc:
        return f"not installed ({exc}); `make bench` installs it"

    async def run() -> tuple[int, float]:
        backend = create_work_backend("sqlite", db_path=path)
        pool = backend.pool("bench")
        for i in range(n):
            await pool.push({"n": i})
        done = 0
        started = time.perf_counter()
        while time.perf_counter() - started < budget:
            item = await pool.claim("fm")
            if item is None:
                break
            await pool.complete(item.id, RESULT)
            done += 1
        return done, time.perf_counter() - started

    try:
        return asyncio.run(run())
    except Exception as exc:  # report and go on: the comparison is optional
        return f"could not be driven: {type(exc).__name__}: {exc}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts (smoke check)")
    parser.add_argument("--profile", action="store_true", help="also break one per-item claim+complete down")
    parser.add_argument("--skip-sweep", action="store_true", help="leave out the 1 ms concurrency sweep of `work`")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    n_raw, n_one, n_four, n_batch = (int(n * scale) for n in (20_000, 10_000, 24_000, 50_000))
    n_push, n_push_many, n_fm = (int(n * scale) for n in (3_000, 200_000, 1_000))

    with tempfile.TemporaryDirectory(prefix="workhive-bench-") as tmp:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, load {load:.1f}"
        )
        print(peers_line("flatmachines"), flush=True)
        print("measuring...", flush=True)
        # The baseline runs at the start and again at the end and the faster run counts,
        # so a machine that got busier mid-run cannot flatter the ratios.
        raw_first = n_raw / raw_sqlite3(f"{tmp}/raw1.db", n_raw)
        raw_leases_first = n_raw / raw_sqlite3(f"{tmp}/raw-leases1.db", n_raw, lease_index=True)

        url = f"sqlite:///{tmp}/one.db"
        asyncio.run(fill(url, n_one))
        started = time.perf_counter()
        one = asyncio.run(drain_per_item(url, "w1")) / (time.perf_counter() - started)

        url = f"sqlite:///{tmp}/four.db"
        asyncio.run(fill(url, n_four))
        done, elapsed = workhive_processes(url, 4)
        four = done / elapsed

        url = f"sqlite:///{tmp}/sixteen.db"
        asyncio.run(fill(url, n_four))
        done, elapsed = workhive_processes(url, 16)
        sixteen = done / elapsed

        url = f"sqlite:///{tmp}/one-fused.db"
        asyncio.run(fill(url, n_one))
        started = time.perf_counter()
        one_fused = asyncio.run(drain_per_item(url, "w1", fused=True)) / (time.perf_counter() - started)

        url = f"sqlite:///{tmp}/four-fused.db"
        asyncio.run(fill(url, n_four))
        done, elapsed = workhive_processes(url, 4, fused=True)
        four_fused = done / elapsed

        url = f"sqlite:///{tmp}/batch.db"
        asyncio.run(fill(url, n_batch))
        started = time.perf_counter()
        batched = asyncio.run(drain_batched(url, "w1", 100)) / (time.perf_counter() - started)

        single, many = asyncio.run(push_rates(f"sqlite:///{tmp}/push.db", n_push, n_push_many))
        fm = flatmachines_rate(f"{tmp}/flatmachines.sqlite", n_fm, 10.0 * scale)

        raw_last = n_raw / raw_sqlite3(f"{tmp}/raw2.db", n_raw)
        raw = max(raw_first, raw_last)
        raw_fused = n_raw / raw_sqlite3(f"{tmp}/raw-fused.db", n_raw, fused=True)
        # The reference with the lease index is measured at both ends too, the faster counts.
        raw_leases_last = n_raw / raw_sqlite3(f"{tmp}/raw-leases2.db", n_raw, lease_index=True)
        raw_leases = max(raw_leases_first, raw_leases_last)

        print(
            f"raw sqlite3 per-item claim+complete (1 proc): {raw:,.0f} items/s "
            f"(runs: {raw_first:,.0f}, {raw_last:,.0f})"
        )
        print(
            f"raw sqlite3 per-item with an index of held leases too (1 proc, reference only): {raw_leases:,.0f} "
            f"items/s (runs: {raw_leases_first:,.0f}, {raw_leases_last:,.0f}) = {raw_leases / raw:.2f}x the baseline; "
            f"workhive 4 procs = {four / raw_leases:.2f}x, "
            f"16 procs = {sixteen / raw_leases:.2f}x it"
        )
        print(f"workhive 1 proc per-item: {one:,.0f} items/s = {one / raw:.2f}x raw sqlite3")
        print(f"workhive 4 procs per-item: {four:,.0f} items/s = {four / raw:.2f}x raw sqlite3")
        print(f"workhive 16 procs per-item: {sixteen:,.0f} items/s = {sixteen / raw:.2f}x raw sqlite3")
        fm_rate_or_none = None if isinstance(fm, str) else fm[0] / fm[1]
        for label, rate in (("1 proc", one_fused), ("4 procs", four_fused)):
            versus_fm = "n/a" if fm_rate_or_none is None else f"{rate / fm_rate_or_none:.1f}x"
            print(
                f"workhive {label} per-item (complete_and_claim): {rate:,.0f} items/s = {rate / raw:.2f}x raw sqlite3, "
                f"{versus_fm} flatmachines, {rate / raw_fused:.2f}x raw sqlite3 fused the same way"
            )
        print(
            f"raw sqlite3 per-item complete+claim fused in one transaction (1 proc, reference only): "
            f"{raw_fused:,.0f} items/s = {raw_fused / raw:.2f}x the unfused baseline"
        )
        print(
            f"workhive claim_many(100)+complete_many (1 proc): {batched:,.0f} items/s "
            f"= {batched / raw:.2f}x raw sqlite3 per-item"
        )
        print(f"workhive push (1 item per call): {n_push / single:,.0f} items/s")
        print(
            f"workhive push_many (10,000 per call): {n_push_many / many:,.0f} items/s "
            f"= {single / n_push * n_push_many / many:.1f}x single push"
        )
        if not args.skip_sweep:
            for text in sweep_lines(work_sweep(lambda c: f"sqlite:///{tmp}/sweep{c}.db")):
                print(text, flush=True)
        if isinstance(fm, str):
            print(f"flatmachines SQLite backend: {fm}")
        else:
            fm_rate = fm[0] / fm[1]
            print(
                f"{peer('flatmachines')} SQLite per-item claim+complete (1 proc, {n_fm:,} items): "
                f"{fm_rate:,.0f} items/s = {fm_rate / raw:.3f}x raw sqlite3; workhive 1 proc = {one / fm_rate:.1f}x, "
                f"4 procs = {four / fm_rate:.1f}x flatmachines"
            )
        if args.profile:
            asyncio.run(breakdown(f"sqlite:///{tmp}/profile.db", n_one // 2))


if __name__ == "__main__":
    main()
