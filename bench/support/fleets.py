"""``workhive work`` rows the engine benches share: drain a pool end to end, and the concurrency sweep.

Each runs ``run_fleet`` (what ``workhive work`` runs) against whatever runtime
is in the tree, from process start until the pool is empty: the end-to-end
rate, as a user of ``workhive work`` sees it. Beside it, so that nothing is
hidden either way: the fixed cost of a fleet (the same fleet draining
``FIXED_JOBS`` jobs: worker processes spawned, imports, registration, the first
claim, and the exit), and the steady rate, the jobs over the end-to-end time
minus that fixed cost. A drain of a few seconds is start-up for a good part
(about 1.5 s on the loaded 2-core machine): the end-to-end rate of the same
fleet grows with the backlog, the steady one does not. The handlers are
``support.handlers``'s, imported by the worker processes by module name
(``handlers:noop``). Before the first fleet, the checkout is compiled to
``.pyc`` (``support.compiled``): worker processes start as an installed
workhive's do, and the output says so.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from support.compiled import compile_checkout
from support.handlers import HANDLER_SECONDS

__all__ = ["FIXED_JOBS", "SWEEP", "Drain", "drain_with_work", "sweep_lines", "work_sweep"]

HERE = Path(__file__).resolve().parent
#: Total handlers in flight in the sweep's rows (split over the processes).
SWEEP = (4, 16, 64, 256)
#: The jobs of the run that measures a fleet's fixed cost (start-up and exit): a few claims' worth.
FIXED_JOBS = 100


class Drain(NamedTuple):
    """One ``workhive work`` drain: ``jobs`` in ``seconds`` end to end; ``fixed``: seconds of a ``FIXED_JOBS`` drain."""

    jobs: int
    seconds: float
    fixed: float

    @property
    def rate(self) -> float:
        """Jobs per second end to end, start-up and exit included."""
        return self.jobs / self.seconds

    @property
    def steady(self) -> float:
        """Jobs per second once the fleet is up: the end-to-end time less the fixed cost."""
        return self.jobs / max(1e-9, self.seconds - self.fixed)

    def describe(self) -> str:
        return f"start-up and exit {self.fixed:.2f} s, steady {self.steady:,.0f} jobs/s"


_compiled = False


def _importable() -> None:
    """Put ``bench/support`` first on this process's and its children's import path; compile workhive once."""
    global _compiled
    if not _compiled:
        print(f"  ({compile_checkout()})", flush=True)
        _compiled = True
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


def _timed_fleet(url: str, pool: str, jobs: int, handler: str, processes: int, concurrency: int, batch: int) -> float:
    """Push ``jobs`` items into ``pool``, then time ``run_fleet(until_empty=True)`` draining them: seconds."""
    from workhive.runtime import FleetOptions, run_fleet

    asyncio.run(_fill(url, pool, jobs))
    started = time.perf_counter()
    report = run_fleet(
        FleetOptions(
            pool=pool, handler=f"handlers:{handler}", storage=url, processes=processes, concurrency=concurrency,
            batch=batch, until_empty=True, progress="none",
        )
    )  # fmt: skip
    seconds = time.perf_counter() - started
    assert report.done == jobs, report
    return seconds


def drain_with_work(
    url: str, pool: str, jobs: int, *, handler: str = "noop", processes: int = 2, concurrency: int = 1, batch: int = 1
) -> Drain:
    """Time ``run_fleet`` draining ``jobs`` items of ``pool`` end to end, and the same fleet draining ``FIXED_JOBS``.

    Process start-up is inside the end-to-end time, as a user of ``workhive work`` sees it;
    the second run (pool ``<pool>-fixed``) is the fixed cost that the steady rate leaves out.
    """
    _importable()
    seconds = _timed_fleet(url, pool, jobs, handler, processes, concurrency, batch)
    fixed = _timed_fleet(url, f"{pool}-fixed", FIXED_JOBS, handler, processes, concurrency, batch)
    return Drain(jobs, seconds, fixed)


def work_sweep(url_for: Callable[[int], str], processes: int = 2) -> list[tuple[int, Drain]]:
    """``workhive work`` with a 1 ms handler at each total concurrency of ``SWEEP``: (concurrency, drain).

    ``url_for(c)`` is the storage URL for the run at concurrency ``c`` (a schema or
    key prefix of its own). Each run drains enough jobs for about a second of
    handler time at full concurrency, and at least 2,000.
    """
    out = []
    for total in SWEEP:
        procs = min(processes, total)
        jobs = max(2_000, min(20_000, int(total / HANDLER_SECONDS)))
        drain = drain_with_work(
            url_for(total), "sweep", jobs, handler="sleep_1ms", processes=procs, concurrency=total // procs
        )
        out.append((total, drain))
    return out


def sweep_lines(results: list[tuple[int, Drain]], processes: int = 2) -> list[str]:
    """One line per sweep row: rate and share of the handler's bound (concurrency / 1 ms), end to end and steady.

    The rows drain different numbers of jobs (a second of handler time each, 20,000 at
    most), so start-up weighs differently in each end-to-end rate: the steady rates are
    the ones to compare across concurrencies.
    """
    lines = []
    for total, drain in results:
        procs = min(processes, total)
        bound = total / HANDLER_SECONDS
        lines.append(
            f"workhive work, 1 ms handler, concurrency {total:>3} ({procs} proc x {total // procs}), "
            f"{drain.jobs:,} jobs: "
            f"{drain.rate:>8,.0f} jobs/s = {drain.rate / bound:.3f}x the handler bound ({bound:,.0f}/s); "
            f"{drain.describe()} = {drain.steady / bound:.3f}x"
        )
    if len(results) > 1:
        by = dict(results)
        if 16 in by:
            base = by[16]
            rest = [c for c in by if c > 16]
            ratios = (
                f"{c}: {by[c].rate / base.rate:.2f} end to end, {by[c].steady / base.steady:.2f} steady" for c in rest
            )
            lines.append("workhive work, 1 ms handler, rate over concurrency 16: " + ", ".join(ratios))
    return lines
