"""No-op and time-stamping tasks for bench/worker.py, as huey's consumer imports them.

The consumer runs with ``PYTHONPATH`` pointing here and imports
``huey_tasks.huey``. They live apart from the bench scripts because bench/
holds ``redis.py``: with bench/ on the import path, huey's own
``from redis import ...`` would load that script instead of redis-py, and the
script takes its directory off ``sys.path`` (it does so to import redis-py
itself), after which the consumer cannot import its tasks. Nothing here runs on
import unless ``BENCH_HUEY_DB`` is set.
"""

from __future__ import annotations

import os
import time

STAMP_FILE = os.environ.get("BENCH_STAMP_FILE")
HUEY_DB = os.environ.get("BENCH_HUEY_DB")

if HUEY_DB:
    from huey import SqliteHuey

    huey = SqliteHuey(filename=HUEY_DB, results=False)

    @huey.task()
    def huey_noop() -> None:
        return None

    @huey.task()
    def huey_stamp(i: int) -> None:
        assert STAMP_FILE is not None
        with open(STAMP_FILE, "a") as f:
            f.write(f"{i} {time.time()}\n")
