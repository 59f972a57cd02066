"""Lock throughput: workhive fcntl locks against py-filelock and bare flock(2), in one run.

    python bench/locks.py [--seconds 2] [--processes 4]

Uncontended: one process takes and releases one lock name in a loop
(acquire + release per second). Contended: N processes hammer one name for
the same duration (total acquisitions per second across them), each taking
the lock again as soon as it released it; the spread (most acquisitions of one
process over the fewest) shows whether a waiter starves behind such a
neighbour (1.0x is perfectly even). py-filelock
is the baseline (``pip install filelock``; bench only); bare ``flock`` —
open, lock, unlock, close — shows the floor the system call sets.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

try:
    import filelock
except ImportError:  # pragma: no cover - the bench says what to install
    sys.exit("bench/locks.py needs py-filelock as its baseline: pip install filelock")

from workhive_fcntl_locks import FcntlLocks


def rate(loop_once: Callable[[int], int], seconds: float) -> float:
    """Calls per second of ``loop_once(batch)`` (which returns how many it did) over ``seconds``."""
    loop_once(200)  # warm up
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        done += loop_once(500)
    return done / elapsed


def workhive_uncontended(directory: str, seconds: float) -> float:
    locks = FcntlLocks(directory)

    async def batch(n: int) -> int:
        for _ in range(n):
            held = await locks.acquire("bench", ttl=None, timeout=0, worker_id=None)
            await locks.release(held)
        return n

    loop = asyncio.new_event_loop()
    try:
        return rate(lambda n: loop.run_until_complete(batch(n)), seconds)
    finally:
        loop.close()


def filelock_uncontended(directory: str, seconds: float) -> float:
    lock = filelock.FileLock(os.path.join(directory, "bench.filelock"))

    def batch(n: int) -> int:
        for _ in range(n):
            with lock.acquire(timeout=0):
                pass
        return n

    return rate(batch, seconds)


def flock_uncontended(directory: str, seconds: float) -> float:
    path = os.path.join(directory, "bench.flock")

    def batch(n: int) -> int:
        for _ in range(n):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return n

    return rate(batch, seconds)


def _contender(kind: str, directory: str, ready: Any, go: Any, seconds: float, out: Any) -> None:
    count = 0
    if kind == "workhive":
        locks = FcntlLocks(directory)

        async def run() -> int:
            n = 0
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                held = await locks.acquire("contended", ttl=None, timeout=None, worker_id=None)
                await locks.release(held)
                n += 1
            return n

        ready.put(os.getpid())
        go.wait()
        count = asyncio.run(run())
    else:
        lock = filelock.FileLock(os.path.join(directory, "contended.filelock"))
        ready.put(os.getpid())
        go.wait()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            with lock.acquire(poll_interval=0.001):
                count += 1
    out.put(count)


def contended(kind: str, directory: str, processes: int, seconds: float) -> tuple[float, list[int]]:
    """Total acquisitions per second of ``processes`` processes on one name, started together."""
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_contender, args=(kind, directory, ready, go, seconds, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    for _ in procs:  # every process imported and ready before the clock runs
        ready.get(timeout=120)
    go.set()
    counts = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return sum(counts) / seconds, sorted(counts)


def spread(counts: list[int]) -> float:
    """Fairness of a contended run: most acquisitions of one process over the fewest (1.0 = even)."""
    return max(counts) / max(min(counts), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each measurement")
    parser.add_argument("--processes", type=int, default=4, help="processes in the contended runs")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="workhive-bench-locks-") as directory:
        print(f"uncontended acquire+release, {args.seconds:g}s each (filelock {filelock.__version__})")
        base = filelock_uncontended(directory, args.seconds)
        ours = workhive_uncontended(os.path.join(directory, "workhive"), args.seconds)
        bare = flock_uncontended(directory, args.seconds)
        print(f"  py-filelock:         {base:>10,.0f}/s = 1.0x filelock")
        print(f"  workhive fcntl:      {ours:>10,.0f}/s = {ours / base:.1f}x filelock")
        print(f"  bare fcntl.flock:    {bare:>10,.0f}/s = {bare / base:.1f}x filelock")

        print(f"contended: {args.processes} processes on one name, {args.seconds:g}s")
        theirs_c, theirs_counts = contended("filelock", directory, args.processes, args.seconds)
        ours_c, ours_counts = contended("workhive", os.path.join(directory, "workhive"), args.processes, args.seconds)
        print(
            f"  py-filelock:         {theirs_c:>10,.0f}/s total = 1.0x filelock, "
            f"spread {spread(theirs_counts):.2f}x (per process {theirs_counts})"
        )
        print(
            f"  workhive fcntl:      {ours_c:>10,.0f}/s total = {ours_c / theirs_c:.1f}x filelock, "
            f"spread {spread(ours_counts):.2f}x (per process {ours_counts})"
        )


if __name__ == "__main__":
    main()
