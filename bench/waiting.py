# ruff: noqa: E402  (the imports follow the sys.path fix below)
"""Benchmark: a fleet that waits (issue 31), on SQLite, PostgreSQL and Redis, beside arq and a bare loop.

    python bench/waiting.py                       # 50,000 items, 10 s each, 4 x 2,500 in flight: ~2 min an engine
    python bench/waiting.py --quick               # 4,000 items, 2 s each, 4 x 250 in flight: a smoke check
    python bench/waiting.py --engines redis --no-scaling

Each item's handler awaits ``asyncio.sleep(SLEEP)``, a simulated LLM call. The
ideal rate is the items in flight over the sleep (10,000 / 10 s = 1,000/s).
Printed per engine, each fleet run in a subprocess of its own (so its CPU and
peak RSS are its own), all in one run at the same moment:

* throughput, and its ratio to the ideal;
* storage operations per item: every call the worker processes make to their
  backend (a ``claim`` of 500 items is one; ``WORKHIVE_COUNT_STORAGE_CALLS``,
  ``workhive.runtime.call_counts``), split into claims, extends (heartbeats),
  acks, registry writes and the rest; registry rows written (registrations);
* supervisor and worker CPU seconds per 1,000 items (``getrusage``);
* extra RSS per item in flight: the worker processes' peak RSS minus that of
  the same fleet holding 25 items per process, over the difference in items;
* arq 0.25 (``max_jobs`` = the same in flight, as many processes) on Redis:
  the same figures, its Redis round trips counted in its processes;
* a bare asyncio loop over the engine's own backend statements (no runtime:
  ``claim``/``complete`` of the storage plugin, all items in flight in one
  process): the limit;
* throughput of a no-op fleet at concurrency 16, 64 and 256 (2 processes,
  200,000 items a run: a few seconds each, so the ratios are not start-up's),
  three runs each in turn (every other round backwards), and the ratios of
  the medians to 16: more in flight must never mean less work done.

Before any fleet starts, the checkout's packages are compiled to ``.pyc``
(``support.compiled``), so that worker processes start as an installed
workhive's do (pip compiles a wheel at install; an editable checkout under
``PYTHONDONTWRITEBYTECODE`` would compile from source in every process); the
header line says so, and start-up seconds are printed as before.

The machine may be shared: the load (``uptime``) is printed beside the figures.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import os
import sys

# bench/redis.py would shadow the redis package: keep this directory off the path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SUPPORT = HERE / "support"
sys.path.insert(0, str(HERE.parent))  # the checkout: bench.support.compiled, not bench/ itself (see above)
from bench.support.compiled import compile_checkout
from bench.support.peers import peer, peers_line

POSTGRES = os.environ.get("WORKHIVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("WORKHIVE_REDIS_URL", "redis://127.0.0.1:6379/0")
RUN = uuid.uuid4().hex[:8]

CLAIMS = {"claim", "complete_and_claim"}
EXTENDS = {"heartbeat", "extend"}
ACKS = {"complete", "fail", "release"}
REGISTRY = {"register_worker", "set_worker_status", "deregister", "release_by_worker"}


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


# -- engines -------------------------------------------------------------------------------
def engine_url(engine: str, name: str, tmp: Path) -> str:
    if engine == "sqlite":
        return f"sqlite:///{tmp / name}.db"
    if engine == "postgres":
        return f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}schema=bench_wait_{name}_{RUN}"
    if engine == "redis":
        return f"{REDIS}{'&' if '?' in REDIS else '?'}prefix=bench-wait-{name}-{RUN}"
    raise SystemExit(f"unknown engine {engine!r}: sqlite, postgres or redis")


async def drop(engine: str, name: str) -> None:
    """Drop what a run left on a shared server (its own schema or keys)."""
    if engine == "postgres":
        import asyncpg

        conn = await asyncpg.connect(POSTGRES)
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS bench_wait_{name}_{RUN} CASCADE")
        finally:
            await conn.close()
    elif engine == "redis":
        import redis.asyncio as aioredis

        r = aioredis.from_url(REDIS)
        try:
            batch: list[Any] = []
            async for key in r.scan_iter(match=f"*bench-wait-{name}-{RUN}*", count=5000):
                batch.append(key)
                if len(batch) >= 1000:
                    await r.unlink(*batch)
                    batch.clear()
            if batch:
                await r.unlink(*batch)
        finally:
            await r.aclose()


async def fill(url: str, n: int) -> None:
    import workhive

    async with workhive.open(url) as hive:
        for start in range(0, n, 5000):
            await hive.pool("bench").push_many([{"n": i} for i in range(start, min(n, start + 5000))])


# -- one fleet run, in a subprocess ----------------------------------------------------------
def one_fleet(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in the subprocess: ``run_fleet`` until the pool drains; what it cost."""
    from workhive.runtime import FleetOptions, run_fleet

    cpu0 = time.process_time()
    started = time.perf_counter()
    wall0 = time.time()
    report = run_fleet(
        FleetOptions(
            pool="bench",
            handler=spec["handler"],
            storage=spec["url"],
            processes=spec["processes"],
            concurrency=spec["concurrency"],
            until_empty=True,
            progress="none",
            lease=60.0,
            heartbeat=10.0,
            allow_large_fleet=True,
        )
    )
    elapsed = time.perf_counter() - started
    wall1 = time.time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    starts = [float(p.read_text()) for p in Path(os.environ["BENCH_STARTS_DIR"]).iterdir()]
    return {
        "startup": (min(starts) - wall0) if starts else 0.0,
        "after_startup": wall1 - min(starts) if starts else elapsed,
        "done": report.done,
        "elapsed": elapsed,
        "supervisor_cpu": time.process_time() - cpu0,
        "worker_cpu": children.ru_utime + children.ru_stime,
        "peak_rss_kb": children.ru_maxrss,
        "exit": report.exit_code,
        "reason": report.reason,
    }


def run_fleet_subprocess(
    url: str, handler: str, processes: int, concurrency: int, sleep: float, count_dir: Path | None
) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUPPORT), env.get("PYTHONPATH", "")]))
    env["BENCH_SLEEP"] = str(sleep)
    env["BENCH_STARTS_DIR"] = tempfile.mkdtemp(prefix="bench-waiting-starts-")
    if count_dir is not None:
        env["WORKHIVE_COUNT_STORAGE_CALLS"] = str(count_dir)
    spec = {"url": url, "handler": handler, "processes": processes, "concurrency": concurrency}
    out = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(spec)], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"fleet run failed ({out.returncode}): {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if count_dir is not None:
        counts: Counter[str] = Counter()
        for path in count_dir.glob("*.json"):
            counts.update(json.loads(path.read_text()))
        result["counts"] = dict(counts)
    return result


def ops_line(counts: dict[str, int], items: int) -> str:
    def per(names: set[str]) -> float:
        return sum(v for k, v in counts.items() if k in names) / items

    known = CLAIMS | EXTENDS | ACKS | REGISTRY
    total = sum(counts.values()) / items
    other = sum(v for k, v in counts.items() if k not in known)
    others = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k not in known)
    return (
        f"{total:.3f} storage ops/item (claims {per(CLAIMS):.3f}, extends {per(EXTENDS):.3f}, acks {per(ACKS):.3f}, "
        f"registry {per(REGISTRY):.4f}, other {other / items:.4f}: {others})"
    )


def waiting_engine(engine: str, tmp: Path, items: int, processes: int, concurrency: int, sleep: float) -> float:
    """The waiting fleet and its 25-per-process twin on one engine; returns its worker CPU per 1,000 items."""
    ideal = processes * concurrency / sleep
    name = f"{engine}_fleet"
    url = engine_url(engine, name, tmp)
    asyncio.run(fill(url, items))
    count_dir = tmp / f"counts-{engine}"
    try:
        big = run_fleet_subprocess(url, "waiting_handlers:wait", processes, concurrency, sleep, count_dir)
    finally:
        asyncio.run(drop(engine, name))
    small_items = processes * 25 * 2
    name_small = f"{engine}_small"
    url_small = engine_url(engine, name_small, tmp)
    asyncio.run(fill(url_small, small_items))
    try:
        small = run_fleet_subprocess(url_small, "waiting_handlers:wait", processes, 25, sleep, None)
    finally:
        asyncio.run(drop(engine, name_small))
    rate = big["done"] / big["elapsed"]
    counts = big["counts"]
    extra_kb = (big["peak_rss_kb"] - small["peak_rss_kb"]) / (concurrency - 25)
    worker_cpu = big["worker_cpu"] * 1000 / big["done"]
    steady = big["done"] / big["after_startup"]
    print(
        f"  workhive  {big['done']:,} items in {big['elapsed']:.1f} s: {rate:,.0f}/s = {rate / ideal:.3f}x ideal; "
        f"from the first call ({big['startup']:.1f} s of start-up before it) {steady:,.0f}/s = {steady / ideal:.3f}x"
    )
    print(f"            {ops_line(counts, big['done'])}")
    print(
        f"            registry rows written {counts.get('register_worker', 0)} "
        f"(status writes {counts.get('set_worker_status', 0)}, heartbeats {counts.get('heartbeat', 0)})"
    )
    print(
        f"            CPU per 1,000 items: supervisor {big['supervisor_cpu'] * 1000 / big['done']:.3f} s, "
        f"workers {worker_cpu:.3f} s"
    )
    print(
        f"            peak RSS per process {big['peak_rss_kb'] / 1024:.1f} MB at {concurrency} in flight, "
        f"{small['peak_rss_kb'] / 1024:.1f} MB at 25: {extra_kb:.2f} KB per item in flight"
    )
    return worker_cpu


# -- arq -------------------------------------------------------------------------------------
ARQ_WORKER = """
import asyncio, json, os, resource, sys, time
from collections import Counter
import redis.asyncio.client as client
calls = Counter()
execute = client.Redis.execute_command
async def counted(self, *args, **kwargs):
    calls["command"] += 1
    return await execute(self, *args, **kwargs)
client.Redis.execute_command = counted
pipeline_execute = client.Pipeline.execute
async def counted_pipeline(self, *args, **kwargs):
    calls["pipeline"] += 1
    return await pipeline_execute(self, *args, **kwargs)
client.Pipeline.execute = counted_pipeline
from arq.connections import RedisSettings
from arq.worker import Worker
import waiting_handlers
async def main():  # arq's Worker takes the running loop when it is made
    settings = RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])
    w = Worker(functions=[waiting_handlers.arq_wait], redis_settings=settings,
               queue_name=os.environ["BENCH_QUEUE"], max_jobs=int(os.environ["BENCH_MAX_JOBS"]), burst=True,
               keep_result=0, handle_signals=False, poll_delay=0.5)
    run = asyncio.ensure_future(w.async_run())
    # arq is slow here: it is measured over what it did within the deadline (its cancellation is not waited for)
    await asyncio.wait({run}, timeout=float(os.environ["BENCH_DEADLINE"]))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"calls": dict(calls), "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss,
                      "done": w.jobs_complete}), flush=True)
    os._exit(0)
asyncio.run(main())
"""


def bench_arq(items: int, processes: int, concurrency: int, sleep: float, deadline: float) -> float | None:
    try:
        from arq import create_pool
        from arq.connections import RedisSettings
    except ImportError as exc:
        print(f"  arq       not installed ({exc}); `make bench` installs it")
        return None
    queue = f"bench-wait-arq-{RUN}"
    ideal = processes * concurrency / sleep

    async def enqueue() -> None:
        pool = await create_pool(RedisSettings.from_dsn(REDIS), default_queue_name=queue)
        for start in range(0, items, 50):  # arq's pool allows a few dozen connections at once
            await asyncio.gather(
                # ids under the queue's name, so that what is left (arq:job:<id>) is found and deleted afterwards
                *(pool.enqueue_job("arq_wait", _job_id=f"{queue}-{i}") for i in range(start, min(items, start + 50)))
            )
        await pool.aclose()

    async def clean() -> None:
        import redis.asyncio as aioredis

        r = aioredis.from_url(REDIS)
        keys = [key async for key in r.scan_iter(match=f"*{queue}*", count=5000)]
        for start in range(0, len(keys), 1000):
            await r.unlink(*keys[start : start + 1000])
        await r.aclose()

    asyncio.run(enqueue())
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUPPORT), env.get("PYTHONPATH", "")]))
    env.update(BENCH_SLEEP=str(sleep), BENCH_REDIS_URL=REDIS, BENCH_QUEUE=queue, BENCH_MAX_JOBS=str(concurrency))
    env["BENCH_DEADLINE"] = str(deadline)
    started = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", ARQ_WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    results = [json.loads(p.communicate()[0].decode().strip().splitlines()[-1]) for p in procs]
    elapsed = time.perf_counter() - started
    asyncio.run(clean())
    done = sum(r["done"] for r in results)
    calls = sum(sum(r["calls"].values()) for r in results)
    cpu = sum(r["cpu"] for r in results)
    rate = done / elapsed
    cut = f" (stopped at the {deadline:g} s deadline, {items - done:,} left)" if done < items else ""
    print(f"  {peer('arq')} {done:,} items in {elapsed:.1f} s{cut}: {rate:,.0f}/s = {rate / ideal:.3f}x ideal")
    print(f"            {calls / max(1, done):.3f} Redis round trips/item (commands and pipelines, counted in arq)")
    print(
        f"            CPU per 1,000 items: workers {cpu * 1000 / max(1, done):.3f} s; "
        f"peak RSS per process {max(r['rss'] for r in results) / 1024:.1f} MB at max_jobs {concurrency}"
    )
    return cpu * 1000 / max(1, done)


# -- the bare loop ---------------------------------------------------------------------------
async def bare_loop(url: str, items: int, in_flight: int, sleep: float) -> tuple[float, int]:
    """Claim up to ``in_flight`` through the backend, a task per item, acks batched: the limit of the runtime."""
    import workhive
    from workhive.models import Ack

    async with workhive.open(url) as hive:
        backend = hive.storage
        worker = f"bare-{RUN}"
        acks: list[Ack] = []
        running = 0
        done = 0
        calls = 0
        freed = asyncio.Event()

        async def one(item: Any) -> None:
            nonlocal running
            await asyncio.sleep(sleep)
            acks.append(Ack(item.id, item.token, None))
            running -= 1
            freed.set()

        tasks = set()
        started = time.perf_counter()
        while done < items:
            if running < in_flight:
                claimed = await backend.claim("bench", worker, min(1000, in_flight - running), 60.0)
                calls += 1
                for item in claimed:
                    running += 1
                    task = asyncio.ensure_future(one(item))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            freed.clear()
            try:
                await asyncio.wait_for(freed.wait(), 0.05)
            except asyncio.TimeoutError:
                pass
            if acks:
                batch, acks[:] = list(acks), []
                await backend.complete("bench", batch)
                calls += 1
                done += len(batch)
        return done / (time.perf_counter() - started), calls


def bench_bare(engine: str, tmp: Path, items: int, in_flight: int, sleep: float) -> None:
    name = f"{engine}_bare"
    url = engine_url(engine, name, tmp)
    asyncio.run(fill(url, items))
    try:
        cpu0 = time.process_time()
        rate, calls = asyncio.run(bare_loop(url, items, in_flight, sleep))
        cpu = time.process_time() - cpu0
    finally:
        asyncio.run(drop(engine, name))
    ideal = in_flight / sleep
    print(
        f"  bare loop {rate:,.0f}/s = {rate / ideal:.3f}x ideal, {calls / items:.3f} storage ops/item, "
        f"CPU {cpu * 1000 / items:.3f} s per 1,000 items (one process, {in_flight} in flight, no runtime)"
    )


# -- concurrency scaling ---------------------------------------------------------------------
SCALING = (16, 64, 256)


def scaling(engine: str, tmp: Path, items: int, rounds: int) -> None:
    """The no-op fleet at each concurrency, ``rounds`` times in turn (16, 64, 256, 256, 64, …); the medians compared.

    On this 2-core machine one fleet drained 41k items/s in one run and 53k in the next, with
    the same claims and completions, and its workers and supervisor spending a quarter more
    CPU on them (the host, not the fleet): a single run's ratio said more of the machine than
    of concurrency. Interleaved rounds meet the same spells; each run is printed.

    A no-op handler costs nothing, so the fleet is CPU-bound at every concurrency: this line says
    the rate holds as concurrency grows (more workers do not race each other for rows), within the
    runs' spread. The 1 ms sweeps of bench/sqlite, bench/postgres and bench/redis, whose handler
    waits, say whether concurrency raises it.
    """
    runs: dict[int, list[tuple[float, float]]] = {c: [] for c in SCALING}
    for n in range(rounds):
        # Every other round backwards (16, 64, 256, 256, 64, 16, …): a machine slowing or speeding up
        # through the rounds then favours no concurrency.
        for concurrency in SCALING if n % 2 == 0 else SCALING[::-1]:
            name = f"{engine}_c{concurrency}"
            url = engine_url(engine, name, tmp)
            asyncio.run(fill(url, items))
            try:
                result = run_fleet_subprocess(url, "waiting_handlers:noop", 2, concurrency, 0.0, None)
            finally:
                asyncio.run(drop(engine, name))
            runs[concurrency].append((result["done"] / result["elapsed"], result["done"] / result["after_startup"]))
    for n, label in enumerate(("start-up included", "from the first call")):
        median = {c: statistics.median(r[n] for r in found) for c, found in runs.items()}
        each = "; ".join(f"{c}: " + ", ".join(f"{r[n]:,.0f}" for r in found) for c, found in runs.items())
        print(
            f"  no-op fleet, 2 processes, {items:,} items ({label}), median of {rounds}: "
            + ", ".join(f"concurrency {c} {r:,.0f}/s" for c, r in median.items())
            + f"; 64/16 = {median[64] / median[16]:.2f}, 256/16 = {median[256] / median[16]:.2f}  (runs {each})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="sqlite,postgres,redis")
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--sleep", type=float, default=10.0)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2500)
    # A no-op fleet drains 40-60k items/s here: 20,000 was under half a second a run, start-up a
    # good part of it, and the ratios between runs moved 10-20% from noise alone.
    parser.add_argument("--scaling-items", type=int, default=200_000)
    parser.add_argument("--scaling-rounds", type=int, default=3, help="runs at each concurrency, in turn")
    parser.add_argument("--no-scaling", action="store_true")
    parser.add_argument("--scaling-only", action="store_true", help="only the no-op fleet at concurrency 16/64/256")
    parser.add_argument("--arq-deadline", type=float, default=120.0, help="seconds arq's workers run at most")
    parser.add_argument("--no-peers", action="store_true", help="skip arq and the bare loop")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_fleet(json.loads(args.one))))
        return
    if args.quick:
        args.items, args.sleep, args.concurrency, args.scaling_items, args.scaling_rounds = 4000, 2.0, 250, 4000, 1
    total = args.processes * args.concurrency
    print(
        f"waiting fleet: {args.items:,} items of asyncio.sleep({args.sleep:g}), {args.processes} processes x "
        f"{args.concurrency:,} in flight; ideal {total / args.sleep:,.0f}/s; {compile_checkout()}; {load()}"
    )
    print(peers_line("arq"), flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for engine in args.engines.split(","):
            print(f"{engine}:")
            if not args.scaling_only:
                waiting_engine(engine, tmp, args.items, args.processes, args.concurrency, args.sleep)
            if not (args.no_peers or args.scaling_only):
                if engine == "redis":
                    bench_arq(args.items, args.processes, args.concurrency, args.sleep, args.arq_deadline)
                bench_bare(engine, tmp, min(args.items, 2 * total), total, args.sleep)
            if not args.no_scaling:
                scaling(engine, tmp, args.scaling_items, args.scaling_rounds)
            print(f"  ({load()})")


if __name__ == "__main__":
    main()
