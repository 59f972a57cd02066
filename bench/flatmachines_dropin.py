"""Benchmark: flatmachines' own SQLite work backend against workhive-flatmachines on workhive-sqlite.

    python bench/flatmachines_dropin.py            # 8 processes, 4,000 items each way
    python bench/flatmachines_dropin.py --quick    # 4 processes, 400 items: a smoke check

Both sides run the same loop through the installed flatmachines' ``WorkPool``
protocol (1.0.0 or 4.2.1, the current release: the line names it) —
``claim(worker_id)`` then ``complete(item.id, result)`` until ``claim``
returns None — in N processes started together on one file, and print,
measured in this run:

* items/s: items completed over the time from the first claim to the last
  completion (every process's own clock readings, ``time.monotonic``, which
  all processes on one machine share);
* duplicates: claims beyond the first of an item (the same job handed to two
  workers) and items never completed;
* share of work per process, largest first;
* the adapter's items/s as a ratio to the native backend's.

Needs ``pip install flatmachines==4.2.1 -e integrations/flatmachines`` (or
``flatmachines==1.0.0``; ``make bench`` installs one of them). Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sqlite3
import sys
import tempfile
import time
from typing import Any

RESULT = {"ok": True}


def _native_pool(path: str) -> Any:
    from flatmachines.distributed import SQLiteWorkBackend

    return SQLiteWorkBackend(db_path=path).pool("bench")


def _adapter_pool(url: str) -> Any:
    from workhive_flatmachines import WorkhiveWorkBackend

    return WorkhiveWorkBackend(url).pool("bench")


async def _drain(pool: Any, worker_id: str, ready: Any) -> dict[str, Any]:
    claimed: list[int] = []
    errors = 0
    await pool.size()  # connected (the hive opened) before the clock starts
    # Every process imported, connected and waiting: all start claiming together.
    await asyncio.get_running_loop().run_in_executor(None, ready.wait)
    first = time.monotonic()
    while True:
        try:
            item = await pool.claim(worker_id)
        except sqlite3.OperationalError:  # flatmachines: "database is locked" under contention
            errors += 1
            continue
        if item is None:
            break
        claimed.append(item.data["n"])
        try:
            await pool.complete(item.id, RESULT)
        except Exception:  # a duplicate's completion may find the item gone (KeyError) or refused (LeaseLost)
            errors += 1
    return {"claimed": claimed, "errors": errors, "first": first, "last": time.monotonic()}


def _worker(kind: str, where: str, worker_id: str, ready: Any, out: Any) -> None:
    pool = _native_pool(where) if kind == "native" else _adapter_pool(where)
    out.put(asyncio.run(_drain(pool, worker_id, ready)))


async def _seed_adapter(url: str, n: int) -> None:
    import workhive

    async with workhive.open(url) as hive:
        await hive.pool("bench").push_many(workhive.Job({"n": i}, max_attempts=3) for i in range(n))


async def _seed_native(path: str, n: int) -> None:
    pool = _native_pool(path)
    for i in range(n):
        await pool.push({"n": i})


async def _left_adapter(url: str) -> int:
    import workhive

    async with workhive.open(url) as hive:
        stats = await hive.pool("bench").stats()
        return stats.total - stats.done


def _left_native(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM work_pool").fetchone()[0])


def run(kind: str, where: str, procs: int, n: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")  # a clean interpreter per worker, as separate machines would have
    ready, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(kind, where, f"w{i}", ready, out)) for i in range(procs)]
    for w in workers:
        w.start()
    results = [out.get(timeout=900) for _ in workers]
    for w in workers:
        w.join(timeout=120)
    elapsed = max(r["last"] for r in results) - min(r["first"] for r in results)
    claims = [len(r["claimed"]) for r in results]
    distinct = len({n for r in results for n in r["claimed"]})
    left = _left_native(where) if kind == "native" else asyncio.run(_left_adapter(where))
    return {
        "rate": (n - left) / elapsed if elapsed > 0 else float("inf"),
        "elapsed": elapsed,
        "completed": n - left,
        "duplicates": sum(claims) - distinct,
        "left": left,
        "errors": sum(r["errors"] for r in results),
        "shares": sorted((100 * c / max(1, sum(claims)) for c in claims), reverse=True),
    }


def line(label: str, procs: int, r: dict[str, Any], ratio: str = "") -> str:
    shares = " ".join(f"{s:.1f}" for s in r["shares"])
    return (
        f"{label} {procs} procs: {r['completed']:,} items in {r['elapsed']:.1f} s = {r['rate']:,.0f} items/s{ratio}; "
        f"duplicates {r['duplicates']}, never completed {r['left']}, errors {r['errors']}; "
        f"share per process % {shares}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 processes, 400 items")
    args = parser.parse_args()
    procs, n = (4, 400) if args.quick else (8, 4000)
    try:
        import flatmachines  # noqa: F401

        import workhive_flatmachines  # noqa: F401
    except ImportError as exc:
        print(f"skipped: {exc}; pip install flatmachines==4.2.1 -e integrations/flatmachines")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        native_db, adapter_url = f"{tmp}/flatmachines.sqlite", f"sqlite:///{tmp}/hive.db"
        asyncio.run(_seed_native(native_db, n))
        asyncio.run(_seed_adapter(adapter_url, n))
        native = run("native", native_db, procs, n)
        adapter = run("adapter", adapter_url, procs, n)
    from importlib.metadata import version

    print(line(f"flatmachines {version('flatmachines')} SQLiteWorkBackend   ", procs, native))
    ratio = f" = {adapter['rate'] / native['rate']:.1f}x native" if native["rate"] else ""
    print(line("workhive-flatmachines on workhive-sqlite", procs, adapter, ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
