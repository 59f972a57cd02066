"""No-op and time-stamping jobs for bench/redis.py, in the form each queue imports them.

Worker processes import this module (``PYTHONPATH`` points here): workhive
fleets as ``redis_tasks:noop``, huey's consumer as ``redis_tasks.huey``, RQ
workers by function path. Nothing here runs on import unless the bench set
the environment for it.
"""

from __future__ import annotations

import os
import time
from typing import Any

STAMP_FILE = os.environ.get("BENCH_STAMP_FILE")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("BENCH_QUEUE", "bench")


def stamp(i: int) -> None:
    """Record when job ``i``'s handler started (pickup latency)."""
    assert STAMP_FILE is not None
    with open(STAMP_FILE, "a") as f:
        f.write(f"{i} {time.time()}\n")


# -- workhive ---------------------------------------------------------------------
def noop(ctx: Any) -> None:
    return None


def wh_stamp(ctx: Any) -> None:
    stamp(ctx.data["i"])


# -- RQ ---------------------------------------------------------------------------
def rq_noop() -> None:
    return None


def rq_stamp(i: int) -> None:
    stamp(i)


# -- huey (its consumer imports ``redis_tasks.huey``) --------------------------------
if os.environ.get("BENCH_HUEY"):
    from huey import RedisHuey

    huey = RedisHuey(QUEUE, url=REDIS_URL, results=False, blocking=True)

    @huey.task()
    def huey_noop() -> None:
        return None

    @huey.task()
    def huey_stamp(i: int) -> None:
        stamp(i)
