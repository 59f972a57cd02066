"""A separate process for the multi-process tests: ``python lock_worker.py MODE LOCKDIR ...``.

Modes:
  stress LOCKDIR SHARED LOG N   take lock "shared" N times; inside, claim SHARED, check nobody else
                                did, append "<token> <pid>" to LOG; print "violations <count>" at the end
  clean LOCKDIR STOPFILE        call clean() in a loop (random pauses) until STOPFILE exists
  hold LOCKDIR NAME             take NAME, print "held <token>", then sleep until killed
  take LOCKDIR NAME N           take NAME N times (waiting as long as it takes), printing "got <token>"
                                while holding it each time, then "done"
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

from workhive_fcntl_locks import FcntlLocks


async def stress(lockdir: str, shared: str, log: str, n: int) -> None:
    locks = FcntlLocks(lockdir)
    me = str(os.getpid()).encode()
    violations = 0
    log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    shared_fd = os.open(shared, os.O_RDWR | os.O_CREAT)
    for _ in range(n):
        held = await locks.acquire("shared", ttl=30, timeout=120, worker_id=f"stress-{os.getpid()}")
        # Inside: the shared file must be free, we mark it ours, yield, and it must still be ours.
        if os.pread(shared_fd, 64, 0).strip(b"\0 ") not in (b"", b"free"):
            violations += 1
        os.pwrite(shared_fd, me.ljust(16), 0)
        os.write(log_fd, b"%d %s\n" % (held.token, me))
        if random.random() < 0.3:
            await asyncio.sleep(0)
        if os.pread(shared_fd, 16, 0).strip() != me:
            violations += 1
        os.pwrite(shared_fd, b"free".ljust(16), 0)
        await locks.release(held)
        if random.random() < 0.5:  # let the others in now and then
            await asyncio.sleep(random.random() * 0.002)
    print(f"violations {violations}", flush=True)


async def clean(lockdir: str, stopfile: str) -> None:
    locks = FcntlLocks(lockdir)
    cleaned = 0
    while not os.path.exists(stopfile):  # noqa: ASYNC240 - a stat per loop is the point
        cleaned += len(await locks.clean())
        await asyncio.sleep(random.random() * 0.003)
    print(f"cleaned {cleaned}", flush=True)


async def hold(lockdir: str, name: str) -> None:
    locks = FcntlLocks(lockdir)
    held = await locks.acquire(name, ttl=1, timeout=10, worker_id="doomed")
    print(f"held {held.token}", flush=True)
    await asyncio.sleep(3600)


async def take(lockdir: str, name: str, n: int) -> None:
    locks = FcntlLocks(lockdir)
    for _ in range(n):
        held = await locks.acquire(name, ttl=None, timeout=600, worker_id=f"take-{os.getpid()}")
        print(f"got {held.token}", flush=True)
        await locks.release(held)
    print("done", flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "stress":
        asyncio.run(stress(args[0], args[1], args[2], int(args[3])))
    elif mode == "clean":
        asyncio.run(clean(args[0], args[1]))
    elif mode == "hold":
        asyncio.run(hold(args[0], args[1]))
    elif mode == "take":
        asyncio.run(take(args[0], args[1], int(args[2])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
