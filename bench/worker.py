"""Benchmark: the fleet runtime on the SQLite default against huey's SQLite consumer, in one run.

    python bench/worker.py [--jobs 20000] [--latency-samples 50]

Throughput: push N no-op jobs (``push_many``), then time ``run_fleet`` with
``processes=2, until_empty=True`` from start (process spawn included) until it
returns. huey: enqueue the same N no-op tasks into ``SqliteHuey``, then time
``huey_consumer -k process -w 2`` from launch until its queue is empty
(measured by polling ``pending_count()``, which slightly favours huey: its
last tasks may still be running). huey is given a 10-50 ms poll interval
(``-d 0.01 -m 0.05``) instead of its default backoff to 10 s, so that the
pickup latencies compare like for like. Pickup latency: with each system
running idle, push one job at a time and measure push → handler start (both
on this machine's clock); p50/p95 over ``--latency-samples``.

huey is a bench-only dependency (``pip install huey``); without it the
workhive lines are printed alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from support.compiled import compile_checkout
from support.peers import peers_line
from support.procs import env_with_path, wait_for_lines

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"  # huey's tasks (see peers/huey_tasks.py for why they are not here)
STAMP_FILE = os.environ.get("BENCH_STAMP_FILE")


# -- handlers (imported by worker processes as ``worker:noop``) --------------------
def noop(ctx: Any) -> None:
    return None


def stamp(ctx: Any) -> None:
    """Record when the handler started, for pickup latency."""
    assert STAMP_FILE is not None
    with open(STAMP_FILE, "a") as f:
        f.write(f"{ctx.data['i']} {time.time()}\n")


def _latencies(push_one, stamp_file: Path, samples: int) -> list[float]:
    out = []
    for i in range(samples):
        time.sleep(0.1)  # let the worker go idle again
        t0 = time.time()
        push_one(i)
        line = wait_for_lines(stamp_file, i + 1)[i]
        out.append(float(line.split()[1]) - t0)
    return out


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


# -- workhive ------------------------------------------------------------------
def bench_workhive(tmp: Path, jobs: int, samples: int) -> tuple[float, list[float]]:
    import workhive
    from workhive.runtime import FleetOptions, run_fleet

    url = f"sqlite:///{tmp / 'workhive.db'}"

    async def push_all() -> None:
        async with workhive.open(url) as hive:
            await hive.pool("bench").push_many([{"i": i} for i in range(jobs)])

    asyncio.run(push_all())
    sys.path.insert(0, str(HERE))
    t0 = time.perf_counter()
    report = run_fleet(
        FleetOptions(pool="bench", handler="worker:noop", storage=url, processes=2, until_empty=True, progress="none")
    )
    rate = jobs / (time.perf_counter() - t0)
    assert report.done == jobs, report

    # pickup latency: an idle fleet (its own script, so signals stay its own)
    stamp_file = tmp / "workhive-stamps.txt"
    script = (
        "import sys\nfrom workhive.runtime import FleetOptions, run_fleet\n"
        f"run_fleet(FleetOptions(pool='latency', handler='worker:stamp', storage={url!r}, processes=2, "
        "progress='none'))\n"
    )
    fleet = subprocess.Popen([sys.executable, "-c", script], env=env_with_path(HERE, BENCH_STAMP_FILE=str(stamp_file)))

    async def push_one_async(hive: Any, i: int) -> None:
        await hive.pool("latency").push({"i": i})

    loop = asyncio.new_event_loop()
    hive = workhive.open(url)
    loop.run_until_complete(hive.open())
    try:
        time.sleep(1.5)  # processes up and idle
        lat = _latencies(lambda i: loop.run_until_complete(push_one_async(hive, i)), stamp_file, samples)
    finally:
        loop.run_until_complete(hive.close())
        loop.close()
        fleet.send_signal(signal.SIGTERM)
        fleet.wait(timeout=30)
    return rate, lat


# -- huey ----------------------------------------------------------------------
def bench_huey(tmp: Path, jobs: int, samples: int) -> tuple[float, list[float]] | None:
    try:
        import huey  # noqa: F401
    except ImportError:
        return None
    db = tmp / "huey.db"
    stamp_file = tmp / "huey-stamps.txt"
    env = env_with_path(PEERS, BENCH_HUEY_DB=str(db), BENCH_STAMP_FILE=str(stamp_file))
    os.environ.update(BENCH_HUEY_DB=str(db), BENCH_STAMP_FILE=str(stamp_file))
    from huey import SqliteHuey

    queue = SqliteHuey(filename=str(db), results=False)
    sys.path.insert(0, str(PEERS))
    import huey_tasks  # the module the consumer imports, with its tasks now that BENCH_HUEY_DB is set

    for _ in range(jobs):
        huey_tasks.huey_noop()
    consumer_cmd = [
        sys.executable, "-m", "huey.bin.huey_consumer", "huey_tasks.huey",
        "-k", "process", "-w", "2", "-d", "0.01", "-m", "0.05", "-n", "-q",
    ]  # fmt: skip
    t0 = time.perf_counter()
    consumer = subprocess.Popen(consumer_cmd, env=env, cwd=tmp)
    try:
        while queue.pending_count() > 0:
            time.sleep(0.005)
        rate = jobs / (time.perf_counter() - t0)
        lat = _latencies(lambda i: huey_tasks.huey_stamp(i), stamp_file, samples)
    finally:
        consumer.send_signal(signal.SIGINT)
        try:
            consumer.wait(timeout=15)
        except subprocess.TimeoutExpired:
            consumer.kill()
    return rate, lat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--latency-samples", type=int, default=50)
    args = parser.parse_args()
    print(peers_line("huey"), flush=True)
    print(f"({compile_checkout()})", flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rate, lat = bench_workhive(tmp, args.jobs, args.latency_samples)
        theirs = bench_huey(tmp, args.jobs, args.latency_samples)
    line = f"workhive sqlite 2 procs: {rate:,.0f} jobs/s"
    if theirs is not None:
        line += f" = {rate / theirs[0]:.2f}x huey ({theirs[0]:,.0f} jobs/s, SqliteHuey consumer -k process -w 2)"
    print(line)
    print(f"workhive pickup latency idle: p50 {_pct(lat, 0.5):.1f} ms, p95 {_pct(lat, 0.95):.1f} ms ({len(lat)} items)")
    if theirs is not None:
        print(
            f"huey pickup latency idle (-d 0.01 -m 0.05): p50 {_pct(theirs[1], 0.5):.1f} ms, "
            f"p95 {_pct(theirs[1], 0.95):.1f} ms"
        )


if __name__ == "__main__":
    main()
