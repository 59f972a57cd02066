"""Several processes drain one pool: the contract test behind the ``"multiprocess"`` capability.

Each worker process opens the store by URL (``workhive.open(url, **options)``,
so the backend's plugin must be installed), waits until every process is
ready, then claims and completes until the pool is empty, and reports every
claim it got and every completion that was accepted. With leases far longer
than the test, a second claim of an item can only mean two live leases on it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import pathlib
import time
from collections import Counter
from typing import Any

__all__ = ["drain_in_processes"]

_POOL = "mp-contract"
_LEASE = 3600.0
_DEADLINE = 120.0  # generous: a loaded machine may take long to start a process


def _wait_for(path: pathlib.Path, what: str) -> None:
    deadline = time.monotonic() + _DEADLINE
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {_DEADLINE:.0f}s waiting for {what}")
        time.sleep(0.01)


def _drain(url: str, options: dict[str, Any], signals: str, name: str) -> tuple[list[str], list[str]]:
    """Runs in a worker process: (ids claimed, ids whose completion was accepted)."""
    import workhive

    async def run() -> tuple[list[str], list[str]]:
        claimed: list[str] = []
        completed: list[str] = []
        async with workhive.open(url, **options) as hive:
            pool = hive.pool(_POOL)
            (pathlib.Path(signals) / f"ready-{name}").touch()
            _wait_for(pathlib.Path(signals) / "go", "the signal to start")
            while True:
                batch = await pool.claim_many(3, name, lease=_LEASE)
                if not batch:
                    return claimed, completed
                claimed.extend(item.id for item in batch)
                accepted = await pool.complete_many([(item, name) for item in batch])
                completed.extend(item.id for item, ok in zip(batch, accepted) if ok)

    return asyncio.run(run())


async def drain_in_processes(
    url: str, options: dict[str, Any], tmp_path: pathlib.Path, *, processes: int, items: int
) -> None:
    """Push ``items`` to one pool, drain it from ``processes`` processes, assert each item was done exactly once."""
    import workhive

    signals = tmp_path / "mp-signals"
    signals.mkdir()
    async with workhive.open(url, **options) as hive:
        pool = hive.pool(_POOL)
        pushed = await pool.push_many(list(range(items)))
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(processes, mp_context=context) as executor:
            futures = [executor.submit(_drain, url, options, str(signals), f"mp-{n}") for n in range(processes)]
            loop = asyncio.get_running_loop()
            for n in range(processes):
                await loop.run_in_executor(None, _wait_for, signals / f"ready-mp-{n}", f"worker process {n} to open")
            (signals / "go").touch()
            results = [await asyncio.wrap_future(f) for f in futures]
        claims = Counter(item_id for claimed, _ in results for item_id in claimed)
        twice = sorted(item_id for item_id, n in claims.items() if n > 1)
        assert not twice, f"items claimed by two live leases at once: {twice[:10]}"
        completions = Counter(item_id for _, completed in results for item_id in completed)
        assert sorted(completions) == sorted(pushed), (
            f"{len(set(pushed) - set(completions))} items were never completed, "
            f"{len(set(completions) - set(pushed))} completed items were never pushed"
        )
        assert max(completions.values()) == 1
        stats = await pool.stats()
        assert (stats.pending, stats.delayed, stats.claimed, stats.done) == (0, 0, 0, items), stats
        for item_id in pushed[:: max(1, items // 20)]:
            done = await pool.get(item_id)
            assert done.state.value == "done" and done.result == done.claimed_by, done
