"""Wall-clock steps for the fault suite's SQLite fleets, without touching the machine's clock.

Python imports ``sitecustomize`` at start-up from the first directory on its path
that has one; the suite puts this directory on the fleet's PYTHONPATH (the
supervisor passes it on to every worker process). When
``WORKHIVE_FAULTS_CLOCK_FILE`` names a file, ``time.time`` and ``time.time_ns``
return the real wall clock plus the seconds written in that file, read again
at most every ``RECHECK`` seconds: the nemesis steps the clock of every process
of the fleet, in either direction, by rewriting one file. The monotonic clocks
are left alone, as a real step leaves them.
"""

from __future__ import annotations

import os
import time

RECHECK = 0.02


def _install(path: str) -> None:
    real_time, real_time_ns, monotonic = time.time, time.time_ns, time.monotonic
    state = {"shift": 0.0, "read_at": -1.0}

    def shift() -> float:
        now = monotonic()
        if now - state["read_at"] >= RECHECK:
            state["read_at"] = now
            try:
                with open(path) as f:
                    state["shift"] = float(f.read().strip() or 0.0)
            except (OSError, ValueError):
                pass  # mid-rewrite or gone: keep the last step
        return state["shift"]

    def stepped_time() -> float:
        return real_time() + shift()

    def stepped_time_ns() -> int:
        return real_time_ns() + int(shift() * 1e9)

    time.time = stepped_time
    time.time_ns = stepped_time_ns


if os.environ.get("WORKHIVE_FAULTS_CLOCK_FILE"):
    _install(os.environ["WORKHIVE_FAULTS_CLOCK_FILE"])
