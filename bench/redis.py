"""Benchmark: workhive on Redis against raw redis-py and the Python Redis queues, in one run.

    python bench/redis.py            # default counts, a few minutes
    python bench/redis.py --quick    # smaller counts, a smoke check

Everything runs against the same server (``WORKHIVE_REDIS_URL``, default
redis://127.0.0.1:6379/0) at the same moment, each under its own keys,
deleted afterwards. Printed, each with its ratio to a baseline measured here:

* raw redis-py (asyncio + hiredis): a Lua lease claim (pop, bump the token,
  set the owner, ZADD the deadline from TIME) and a Lua fenced complete, per
  item from one coroutine and from 8, and batched 100 per script call: the
  baseline for the same shape of work.
* workhive through the public ``Pool`` API: claim + complete per item (1 and
  8 coroutines), ``complete_and_claim``, ``claim_many(100)`` +
  ``complete_many``, ``push`` and ``push_many``.
* ``workhive work`` end to end (``run_fleet``, 2 processes, no-op handler,
  process start-up included) against raw batched claim+complete (measured
  twice, the faster counts), and with a 1 ms handler at total concurrency 4,
  16, 64 and 256 (``bench/support/fleets.py``) against the handler's bound;
  beside each, the fleet's fixed cost (the same fleet draining 100 jobs:
  start-up and exit) and the steady rate (the end-to-end time less it);
  and against huey (RedisHuey, 8 threads), bullmq
  (one Worker, concurrency 50), arq tuned (max_jobs 50, 10 ms poll) and RQ
  (2 SimpleWorkers) draining the same number of no-op jobs.
* Idle pickup latency (push -> handler start, p50/p95) of each, idle.

The peers are bench-only dependencies (``make bench`` installs them); a
missing one is reported and skipped. Not a test: nothing asserts a time.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# This file is named redis.py: keep its directory off the path, or `import redis` finds it.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
PEERS = os.path.join(HERE, "peers")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import redis as redis_py  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402

sys.path.append(HERE)  # now that `redis` is the package: bench/support is importable
from support.fleets import Drain, drain_with_work, sweep_lines, work_sweep  # noqa: E402
from support.loops import claim_complete_loop  # noqa: E402
from support.peers import peer, peers_line  # noqa: E402
from support.procs import env_with_path, wait_for_lines  # noqa: E402

import workhive  # noqa: E402

REDIS_URL = os.environ.get("WORKHIVE_REDIS_URL", "redis://127.0.0.1:6379/0")
RESULT = {"ok": True}
RUN = uuid.uuid4().hex[:8]

RAW_CLAIM = """
local id = redis.call('LPOP', KEYS[1])
if not id then return false end
local item = KEYS[3] .. id
local token = redis.call('HINCRBY', item, 'tk', 1)
local t = redis.call('TIME')
local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[2])
redis.call('HSET', item, 'st', 'claimed', 'cb', ARGV[1], 'le', deadline)
redis.call('ZADD', KEYS[2], deadline, id)
return {id, token, redis.call('HGET', item, 'p')}
"""
RAW_CLAIM_MANY = """
local out = {}
for _ = 1, tonumber(ARGV[3]) do
  local id = redis.call('LPOP', KEYS[1])
  if not id then break end
  local item = KEYS[3] .. id
  local token = redis.call('HINCRBY', item, 'tk', 1)
  local t = redis.call('TIME')
  local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[2])
  redis.call('HSET', item, 'st', 'claimed', 'cb', ARGV[1], 'le', deadline)
  redis.call('ZADD', KEYS[2], deadline, id)
  out[#out + 1] = id
  out[#out + 1] = token
end
return out
"""
RAW_COMPLETE = """
local out = {}
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
for i = 1, #ARGV, 3 do
  local item = KEYS[2] .. ARGV[i]
  local f = redis.call('HMGET', item, 'st', 'tk', 'le')
  if f[1] == 'claimed' and f[2] == ARGV[i + 1] and tonumber(f[3]) > now then
    redis.call('HSET', item, 'st', 'done', 'rs', ARGV[i + 2])
    redis.call('ZREM', KEYS[1], ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


def delete_matching(*patterns: str) -> None:
    client = redis_py.Redis.from_url(REDIS_URL)
    try:
        for pattern in patterns:
            keys = list(client.scan_iter(match=pattern, count=2000))
            for start in range(0, len(keys), 1000):
                client.delete(*keys[start : start + 1000])
    finally:
        client.close()


# -- raw redis-py: the baseline -------------------------------------------------------
async def raw_fill(r: Any, base: str, n: int) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.hset(f"{base}i:{i}", mapping={"p": f'{{"n":{i}}}', "st": "pending", "tk": 0})
        if i % 1000 == 999:
            await pipe.execute()
            pipe = r.pipeline(transaction=False)
    await pipe.execute()
    for start in range(0, n, 10_000):
        await r.rpush(f"{base}ready", *range(start, min(n, start + 10_000)))


async def raw_rates(n: int, n_batch: int) -> tuple[float, float, float]:
    r = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    claim, claim_many, complete = (r.register_script(s) for s in (RAW_CLAIM, RAW_CLAIM_MANY, RAW_COMPLETE))
    result = '{"ok":true}'

    async def per_item(base: str, worker: str) -> int:
        keys = (f"{base}ready", f"{base}leases", f"{base}i:")
        done = 0
        while True:
            got = await claim(keys=keys, args=(worker, 60))
            if not got:
                return done
            await complete(keys=(keys[1], keys[2]), args=(got[0], got[1], result))
            done += 1

    try:
        base = f"{{bench-raw-{RUN}}}:one:"
        await raw_fill(r, base, n)
        started = time.perf_counter()
        one = await per_item(base, "w") / (time.perf_counter() - started)
        base = f"{{bench-raw-{RUN}}}:eight:"
        await raw_fill(r, base, n)
        started = time.perf_counter()
        eight = sum(await asyncio.gather(*(per_item(base, f"w{i}") for i in range(8)))) / (
            time.perf_counter() - started
        )
        base = f"{{bench-raw-{RUN}}}:batch:"
        await raw_fill(r, base, n_batch)
        keys = (f"{base}ready", f"{base}leases", f"{base}i:")
        done = 0
        started = time.perf_counter()
        while True:
            got = await claim_many(keys=keys, args=("w", 60, 100))
            if not got:
                break
            args: list[Any] = []
            for i in range(0, len(got), 2):
                args += (got[i], got[i + 1], result)
            await complete(keys=(keys[1], keys[2]), args=args)
            done += len(got) // 2
        batched = done / (time.perf_counter() - started)
        return one, eight, batched
    finally:
        await r.aclose()
        delete_matching(f"{{bench-raw-{RUN}}}*")


# -- workhive through the public API ---------------------------------------------------
def wh_url(name: str) -> str:
    return f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}prefix=bench-{name}-{RUN}"


async def wh_fill(url: str, n: int) -> None:
    async with workhive.open(url) as hive:
        for start in range(0, n, 10_000):
            await hive.pool("bench").push_many({"n": i} for i in range(start, min(n, start + 10_000)))


async def wh_rates(n: int, n_batch: int, n_push: int, n_push_many: int) -> dict[str, float]:
    rates: dict[str, float] = {}
    for label, tasks, fused in (("one", 1, False), ("eight", 8, False), ("fused", 1, True), ("fused8", 8, True)):
        url = wh_url(label)
        await wh_fill(url, n)
        async with workhive.open(url) as hive:
            pool = hive.pool("bench")
            await pool.stats()
            started = time.perf_counter()
            done = sum(await asyncio.gather(*(claim_complete_loop(pool, f"w{i}", RESULT, fused) for i in range(tasks))))
            rates[label] = done / (time.perf_counter() - started)
    url = wh_url("batch")
    await wh_fill(url, n_batch)
    async with workhive.open(url) as hive:
        pool = hive.pool("bench")
        done = 0
        started = time.perf_counter()
        while items := await pool.claim_many(100, "w"):
            await pool.complete_many([(i, RESULT) for i in items])
            done += len(items)
        rates["batch"] = done / (time.perf_counter() - started)
    async with workhive.open(wh_url("push")) as hive:
        pool = hive.pool("push")
        started = time.perf_counter()
        for i in range(n_push):
            await pool.push({"n": i})
        rates["push"] = n_push / (time.perf_counter() - started)
        started = time.perf_counter()
        for start in range(0, n_push_many, 10_000):
            await pool.push_many([{"n": i} for i in range(start, start + 10_000)])
        rates["push_many"] = n_push_many / (time.perf_counter() - started)
    return rates


# -- pickup latency helpers -------------------------------------------------------------
def env(**extra: str) -> dict[str, str]:
    return env_with_path(PEERS, BENCH_REDIS_URL=REDIS_URL, **extra)


def latencies(push_one: Callable[[int], None], stamps: Path, samples: int) -> list[float]:
    out = []
    for i in range(samples):
        time.sleep(0.1)  # idle again
        t0 = time.time()
        push_one(i)
        line = wait_for_lines(stamps, i + 1)[i]
        out.append(float(line.split()[1]) - t0)
    return out


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- workhive work, end to end --------------------------------------------------------------
def bench_fleet(tmp: Path, jobs: int, samples: int) -> tuple[Drain, list[float]]:
    url = wh_url("fleet")
    drain = drain_with_work(url, "bench", jobs, handler="noop", processes=2)
    sys.path.insert(0, PEERS)
    os.environ["PYTHONPATH"] = env()["PYTHONPATH"]
    stamps = tmp / "workhive-stamps.txt"
    script = (
        "from workhive.runtime import FleetOptions, run_fleet\n"
        f"run_fleet(FleetOptions(pool='latency', handler='redis_tasks:wh_stamp', storage={url!r}, processes=2, "
        "progress='none'))\n"
    )
    fleet = subprocess.Popen([sys.executable, "-c", script], env=env(BENCH_STAMP_FILE=str(stamps)))
    loop = asyncio.new_event_loop()
    hive = workhive.open(url)
    loop.run_until_complete(hive.open())
    try:
        time.sleep(2.0)  # processes up and idle
        lat = latencies(lambda i: loop.run_until_complete(hive.pool("latency").push({"i": i})), stamps, samples)
    finally:
        loop.run_until_complete(hive.close())
        loop.close()
        stop(fleet)
    return drain, lat


# -- the peers ---------------------------------------------------------------------------
def bench_huey(tmp: Path, jobs: int, samples: int) -> tuple[float, list[float]] | str:
    try:
        import huey  # noqa: F401
    except ImportError as exc:
        return f"not installed ({exc})"
    queue = f"bench-huey-{RUN}"
    stamps = tmp / "huey-stamps.txt"
    e = env(BENCH_HUEY="1", BENCH_QUEUE=queue, BENCH_STAMP_FILE=str(stamps))
    os.environ.update(BENCH_HUEY="1", BENCH_QUEUE=queue, BENCH_STAMP_FILE=str(stamps), BENCH_REDIS_URL=REDIS_URL)
    sys.path.insert(0, PEERS)
    import importlib

    import redis_tasks

    tasks = importlib.reload(redis_tasks)
    try:
        for _ in range(jobs):
            tasks.huey_noop()
        cmd = [sys.executable, "-m", "huey.bin.huey_consumer", "redis_tasks.huey", "-w", "8", "-k", "thread", "-q"]
        started = time.perf_counter()
        consumer = subprocess.Popen(cmd, env=e)
        try:
            while tasks.huey.pending_count() > 0:
                time.sleep(0.002)
            rate = jobs / (time.perf_counter() - started)
            lat = latencies(lambda i: tasks.huey_stamp(i), stamps, samples)
        finally:
            stop(consumer, signal.SIGINT)
        return rate, lat
    finally:
        delete_matching(f"huey.*{queue}*")


def bench_bullmq(jobs: int, samples: int) -> tuple[float, list[float]] | str:
    try:
        from bullmq import Queue, Worker
    except ImportError as exc:
        return f"not installed ({exc})"
    name = f"bench-bullmq-{RUN}"

    async def run() -> tuple[float, list[float]]:
        queue = Queue(name, {"connection": REDIS_URL})
        done = 0
        finished = asyncio.Event()
        stamps: dict[int, float] = {}

        arrived: dict[int, asyncio.Event] = {}

        async def process(job: Any, token: str) -> None:
            nonlocal done
            if "i" in job.data:
                stamps[job.data["i"]] = time.time()
                arrived[job.data["i"]].set()
            done += 1
            if done == jobs:
                finished.set()

        opts = {"removeOnComplete": True}
        for start in range(0, jobs, 1000):
            await queue.addBulk(
                [{"name": "noop", "data": {}, "opts": opts} for _ in range(start, min(jobs, start + 1000))]
            )
        started = time.perf_counter()
        worker = Worker(name, process, {"connection": REDIS_URL, "concurrency": 50})
        await asyncio.wait_for(finished.wait(), 600)
        rate = jobs / (time.perf_counter() - started)
        lat = []
        for i in range(samples):
            await asyncio.sleep(0.1)
            arrived[i] = asyncio.Event()
            t0 = time.time()
            await queue.add("stamp", {"i": i}, opts)
            await asyncio.wait_for(arrived[i].wait(), 30)
            lat.append(stamps[i] - t0)
        await worker.close()
        await queue.obliterate({"force": True})
        await queue.close()
        return rate, lat

    try:
        return asyncio.run(run())
    finally:
        delete_matching(f"bull:{name}*")


ARQ_STAMPS: dict[int, float] = {}
ARQ_ARRIVED: dict[int, asyncio.Event] = {}


async def arq_noop(ctx: Any) -> None:
    return None


async def arq_stamp(ctx: Any, i: int) -> None:
    ARQ_STAMPS[i] = time.time()
    ARQ_ARRIVED[i].set()


def bench_arq(jobs: int, samples: int) -> tuple[float, list[float]] | str:
    try:
        from arq import create_pool
        from arq.connections import RedisSettings
        from arq.worker import Worker
    except ImportError as exc:
        return f"not installed ({exc})"
    name = f"bench-arq-{RUN}"
    stamps = ARQ_STAMPS

    async def run() -> tuple[float, list[float]]:
        settings = RedisSettings.from_dsn(REDIS_URL)
        pool = await create_pool(settings, default_queue_name=name)
        for _ in range(jobs):
            await pool.enqueue_job("arq_noop")
        common = {"functions": [arq_noop, arq_stamp], "redis_settings": settings, "queue_name": name,
                  "max_jobs": 50, "poll_delay": 0.01, "keep_result": 0, "handle_signals": False}  # fmt: skip
        started = time.perf_counter()
        await Worker(burst=True, **common).async_run()  # type: ignore[arg-type]
        rate = jobs / (time.perf_counter() - started)
        worker = Worker(**common)  # type: ignore[arg-type]
        task = asyncio.ensure_future(worker.async_run())
        lat = []
        await asyncio.sleep(0.5)
        for i in range(samples):
            await asyncio.sleep(0.1)
            ARQ_ARRIVED[i] = asyncio.Event()
            t0 = time.time()
            await pool.enqueue_job("arq_stamp", i)
            await asyncio.wait_for(ARQ_ARRIVED[i].wait(), 30)
            lat.append(stamps[i] - t0)
        task.cancel()
        for step in (task, worker.close()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await step
        await pool.aclose()
        return rate, lat

    try:
        return asyncio.run(run())
    finally:
        delete_matching(f"arq:*{name}*", f"{name}*", "arq:job:*", "arq:in-progress:*", "arq:retry:*")


def bench_rq(tmp: Path, jobs: int, samples: int) -> tuple[float, list[float]] | str:
    try:
        from rq import Queue
    except ImportError as exc:
        return f"not installed ({exc})"
    name = f"bench-rq-{RUN}"
    conn = redis_py.Redis.from_url(REDIS_URL)
    stamps = tmp / "rq-stamps.txt"
    sys.path.insert(0, PEERS)
    import redis_tasks

    try:
        queue = Queue(name, connection=conn)
        for _ in range(jobs):
            queue.enqueue(redis_tasks.rq_noop, result_ttl=0)
        cmd = [sys.executable, "-m", "rq.cli", "worker", "--worker-class", "rq.SimpleWorker", "--burst", "-q",
               "-u", REDIS_URL, name]  # fmt: skip
        started = time.perf_counter()
        procs = [subprocess.Popen(cmd, env=env()) for _ in range(2)]
        for p in procs:
            p.wait(timeout=600)
        rate = jobs / (time.perf_counter() - started)
        live = [subprocess.Popen(cmd[:6] + cmd[7:], env=env(BENCH_STAMP_FILE=str(stamps))) for _ in range(2)]
        try:
            time.sleep(2.0)
            lat = latencies(lambda i: queue.enqueue(redis_tasks.rq_stamp, i, result_ttl=0), stamps, samples)
        finally:
            for p in live:
                stop(p, signal.SIGINT)
        return rate, lat
    finally:
        conn.close()
        delete_matching(f"rq:*{name}*", "rq:job:*")


def line(label: str, result: tuple[float, list[float]] | str, fleet: float) -> str:
    if isinstance(result, str):
        return f"{label}: {result}"
    rate, lat = result
    return (
        f"{label}: {rate:,.0f} jobs/s, pickup p50 {pct(lat, 0.5):.2f} ms p95 {pct(lat, 0.95):.2f} ms; "
        f"workhive work = {fleet / rate:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts (smoke check)")
    parser.add_argument("--skip-sweep", action="store_true", help="leave out the 1 ms concurrency sweep")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    n, n_batch, n_push, n_push_many = (int(x * scale) for x in (10_000, 50_000, 3_000, 100_000))
    n_fleet, n_huey, n_bull, n_arq, n_rq = (int(x * scale) for x in (30_000, 20_000, 10_000, 10_000, 2_000))
    samples = max(10, int(40 * scale))
    info = redis_py.Redis.from_url(REDIS_URL).info("server")
    load = os.getloadavg()[0]
    print(f"python {sys.version.split()[0]}, redis-server {info['redis_version']}, redis-py {redis_py.__version__}, "
          f"{os.cpu_count()} CPUs, load {load:.1f}", flush=True)  # fmt: skip
    print(peers_line("huey", "bullmq", "arq", "rq"), flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="workhive-bench-redis-") as d:
            tmp = Path(d)
            print("measuring: raw redis-py", flush=True)
            raw_one, raw_eight, raw_batch = asyncio.run(raw_rates(n, n_batch))
            print("measuring: workhive API", flush=True)
            wh = asyncio.run(wh_rates(n, n_batch, n_push, n_push_many))
            print("measuring: workhive work", flush=True)
            drain, fleet_lat = bench_fleet(tmp, n_fleet, samples)
            fleet = drain.rate
            _, _, raw_batch_now = asyncio.run(raw_rates(n // 10, n_batch))
            sweep = [] if args.skip_sweep else work_sweep(lambda c: wh_url(f"sweep{c}"))
            print("measuring: peers", flush=True)
            peers = {
                f"{peer('huey')} RedisHuey, 8 threads": bench_huey(tmp, n_huey, samples),
                f"{peer('bullmq')}, one Worker, concurrency 50": bench_bullmq(n_bull, samples),
                f"{peer('arq')} tuned (max_jobs 50, 10 ms poll)": bench_arq(n_arq, samples),
                f"{peer('rq')} SimpleWorker x2": bench_rq(tmp, n_rq, samples),
            }
            raw_last, _, _ = asyncio.run(raw_rates(n // 2, 100))
    finally:
        delete_matching(f"{{bench-*-{RUN}}}*", f"{{bench-*-{RUN}/*")
    raw = max(raw_one, raw_last)
    print(f"raw redis-py Lua lease claim+complete per item, 1 coroutine: {raw:,.0f} items/s "
          f"(runs: {raw_one:,.0f}, {raw_last:,.0f}); 8 coroutines: {raw_eight:,.0f}/s; "
          f"batches of 100: {raw_batch:,.0f}/s")  # fmt: skip
    print(f"workhive per item (claim + complete), 1 coroutine: {wh['one']:,.0f} items/s = {wh['one'] / raw:.2f}x raw; "
          f"8 coroutines: {wh['eight']:,.0f}/s = {wh['eight'] / raw_eight:.2f}x raw with 8")  # fmt: skip
    print(f"workhive per item (complete_and_claim), 1 coroutine: {wh['fused']:,.0f} items/s = "
          f"{wh['fused'] / raw:.2f}x raw; 8 coroutines: {wh['fused8']:,.0f}/s = {wh['fused8'] / raw_eight:.2f}x raw "
          "with 8")  # fmt: skip
    print(f"workhive claim_many(100) + complete_many: {wh['batch']:,.0f} items/s = {wh['batch'] / raw_batch:.2f}x raw "
          "batched")  # fmt: skip
    print(f"workhive push (1 per call): {wh['push']:,.0f} items/s; push_many (10,000 per call): "
          f"{wh['push_many']:,.0f} items/s")  # fmt: skip
    raw_batched = max(raw_batch, raw_batch_now)
    print(f"workhive work end to end (2 processes, no-op handler, start-up included): {fleet:,.0f} jobs/s "
          f"= {fleet / raw_batched:.2f}x raw batches of 100 (runs {raw_batch:,.0f}, {raw_batch_now:,.0f}), "
          f"pickup p50 {pct(fleet_lat, 0.5):.2f} ms p95 {pct(fleet_lat, 0.95):.2f} ms")  # fmt: skip
    print(f"  of which {drain.describe()} = {drain.steady / raw_batched:.2f}x raw batches of 100 "
          "(start-up and exit: the same fleet draining 100 jobs)")  # fmt: skip
    for text in sweep_lines(sweep):
        print(text)
    for label, result in peers.items():
        print(line(label, result, fleet))


if __name__ == "__main__":
    main()
