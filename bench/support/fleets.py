"""``workhive work`` rows the engine benches share: drain a pool end to end, and the concurrency sweep.

Each runs ``run_fleet`` (what ``workhive work`` runs) against whatever runtime
is in the tree, from process start until the pool is empty, and returns
jobs per second. The handlers are ``support.handlers``'s, imported by the
worker processes by module name (``handlers:noop``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from support.handlers import HANDLER_SECONDS

__all__ = ["SWEEP", "drain_with_work", "sweep_lines", "work_sweep"]

HERE = Path(__file__).resolve().parent
#: Total handlers in flight in the sweep's rows (split over the processes).
SWEEP = (4, 16, 64, 256)


def _importable() -> None:
    """Put ``bench/support`` first on this process's and its children's import path."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(HERE) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), *paths]))


async def _fill(url: str, pool: str, jobs: int) -> None:
    import workhive

    async with workhive.open(url) as hive:
        for start in range(0, jobs, 10_000):
            await hive.pool(pool).push_many([{"i": i} for i in range(start, min(jobs, start + 10_000))])


def drain_with_work(
    url: str, pool: str, jobs: int, *, handler: str = "noop", processes: int = 2, concurrency: int = 1, batch: int = 1
) -> float:
    """Push ``jobs`` items into ``pool``, then time ``run_fleet(until_empty=True)`` draining them: jobs/s.

    Process start-up is inside the time, as a user of ``workhive work`` sees it.
    """
    from workhive.runtime import FleetOptions, run_fleet

    _importable()
    asyncio.run(_fill(url, pool, jobs))
    started = time.perf_counter()
    report = run_fleet(
        FleetOptions(
            pool=pool, handler=f"handlers:{handler}", storage=url, processes=processes, concurrency=concurrency,
            batch=batch, until_empty=True, progress="none",
        )
    )  # fmt: skip
    rate = jobs / (time.perf_counter() - started)
    assert report.done == jobs, report
    return rate


def work_sweep(url_for: Callable[[int], str], processes: int = 2) -> list[tuple[int, float]]:
    """``workhive work`` with a 1 ms handler at each total concurrency of ``SWEEP``: (concurrency, jobs/s).

    ``url_for(c)`` is the storage URL for the run at concurrency ``c`` (a schema or
    key prefix of its own). Each run drains enough jobs for about a second of
    handler time at full concurrency, and at least 2,000.
    """
    out = []
    for total in SWEEP:
        procs = min(processes, total)
        jobs = max(2_000, min(20_000, int(total / HANDLER_SECONDS)))
        rate = drain_with_work(
            url_for(total), "sweep", jobs, handler="sleep_1ms", processes=procs, concurrency=total // procs
        )
        out.append((total, rate))
    return out


def sweep_lines(results: list[tuple[int, float]], processes: int = 2) -> list[str]:
    """One line per sweep row: the rate, and its share of the handler's bound (concurrency / 1 ms)."""
    lines = []
    for total, rate in results:
        procs = min(processes, total)
        bound = total / HANDLER_SECONDS
        lines.append(
            f"workhive work, 1 ms handler, concurrency {total:>3} ({procs} proc x {total // procs}): "
            f"{rate:>8,.0f} jobs/s = {rate / bound:.3f}x the handler bound ({bound:,.0f}/s)"
        )
    return lines
