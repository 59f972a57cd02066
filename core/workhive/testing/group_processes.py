"""Several processes drain one grouped pool under limits: the cross-process test of rules GR6 and GR7.

Each worker process opens the store by URL (``workhive.open(url, **options)``),
waits until every process is ready, then claims and completes until the pool is
empty. While it holds a claim it keeps a marker file for it in its group's
folder and one in the pool's, written after the claim returned and removed
before the completion is sent, so the markers present at any moment are a
subset of the claims the store holds: whenever a process sees more markers of
a group (or of the pool) than its limit allows, the store broke the limit.
Each count is one listing of one folder: a sum of the group folders' counts,
listed one after another, could add a marker removed before a later folder was
listed to one written after, and see a pool over its limit that never was.
Every item must be done exactly once at the end.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import pathlib
import time
from collections import Counter
from typing import Any

import attrs

from workhive.testing.multiprocess import _DEADLINE, _wait_for  # one wait for a file, one deadline, for both drains

__all__ = ["LimitedFleet", "drain_groups_in_processes"]

_POOL = "mp-groups"
_LEASE = 3600.0
_UNGROUPED = "-"  # the marker folder of ungrouped items (no group name can be "-": names start alnum)
_POOL_MARKERS = "+pool"  # the folder of every held claim's second marker (not a group name either)


@attrs.frozen
class LimitedFleet:
    """The limits and items of one run: ``groups`` maps a group (None: ungrouped) to its item count."""

    groups: dict[str | None, int]
    group_limits: dict[str, int]
    default_limit: int | None
    pool_limit: int | None

    def limit_of(self, group: str | None) -> int | None:
        if group is None:
            return None  # ungrouped items are bound by the pool limit alone (GR6)
        return self.group_limits.get(group, self.default_limit)


def _held(markers: pathlib.Path) -> dict[str, int]:
    """Markers per folder (the groups' and ``_POOL_MARKERS``), each folder's count from one listing."""
    return {folder.name: len(os.listdir(folder)) for folder in markers.iterdir()}


def _drain(
    url: str, options: dict[str, Any], signals: str, name: str, fleet: LimitedFleet
) -> tuple[list[str], list[str], list[str]]:
    """Runs in a worker process: (ids claimed, ids whose completion was accepted, limit breaches seen)."""
    import workhive

    markers = pathlib.Path(signals) / "held"
    limits = {_UNGROUPED if g is None else g: fleet.limit_of(g) for g in fleet.groups}

    async def run() -> tuple[list[str], list[str], list[str]]:
        claimed: list[str] = []
        completed: list[str] = []
        breaches: list[str] = []
        deadline = time.monotonic() + _DEADLINE
        async with workhive.open(url, **options) as hive:
            pool = hive.pool(_POOL)
            (pathlib.Path(signals) / f"ready-{name}").touch()
            _wait_for(pathlib.Path(signals) / "go", "the signal to start")
            while time.monotonic() < deadline:
                batch = await pool.claim_many(2, name, lease=_LEASE)
                if not batch:
                    stats = await pool.stats()
                    if stats.pending + stats.delayed + stats.claimed == 0:
                        break
                    await asyncio.sleep(0.005)  # others hold the slots: wait for one to free
                    continue
                claimed.extend(item.id for item in batch)
                mine = [markers / (item.group or _UNGROUPED) / item.id for item in batch]
                mine += [markers / _POOL_MARKERS / item.id for item in batch]
                for marker in mine:
                    marker.touch()
                held = _held(markers)
                for folder, count in held.items():
                    limit = limits.get(folder)
                    if limit is not None and count > limit:
                        breaches.append(f"{count} claims of group {folder} held at once (limit {limit})")
                in_pool = held[_POOL_MARKERS]
                if fleet.pool_limit is not None and in_pool > fleet.pool_limit:
                    breaches.append(f"{in_pool} claims held at once (pool limit {fleet.pool_limit})")
                await asyncio.sleep(0.002)  # hold the claims a moment, so others try while they are held
                for marker in mine:
                    marker.unlink()
                accepted = await pool.complete_many([(item, name) for item in batch])
                completed.extend(item.id for item, ok in zip(batch, accepted) if ok)
        return claimed, completed, breaches

    return asyncio.run(run())


async def drain_groups_in_processes(
    url: str, options: dict[str, Any], tmp_path: pathlib.Path, fleet: LimitedFleet, *, processes: int
) -> None:
    """Push ``fleet``'s items, set its limits, drain from ``processes`` processes; assert limits held and each item
    was done exactly once."""
    import workhive
    from workhive.models import Job

    signals = tmp_path / "mp-group-signals"
    (signals / "held").mkdir(parents=True)
    for group in fleet.groups:
        (signals / "held" / (group or _UNGROUPED)).mkdir()
    (signals / "held" / _POOL_MARKERS).mkdir()
    async with workhive.open(url, **options) as hive:
        pool = hive.pool(_POOL)
        for group, limit in fleet.group_limits.items():
            await pool.set_group_limit(group, limit)
        await pool.set_default_group_limit(fleet.default_limit)
        await pool.set_limit(fleet.pool_limit)
        pushed = await pool.push_many(
            [Job(f"{group}-{n}", group=group) for group, count in fleet.groups.items() for n in range(count)]
        )
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(processes, mp_context=context) as executor:
            futures = [executor.submit(_drain, url, options, str(signals), f"mp-{n}", fleet) for n in range(processes)]
            loop = asyncio.get_running_loop()
            for n in range(processes):
                await loop.run_in_executor(None, _wait_for, signals / f"ready-mp-{n}", f"worker process {n} to open")
            (signals / "go").touch()
            results = [await asyncio.wrap_future(f) for f in futures]
        breaches = [breach for _, _, found in results for breach in found]
        assert not breaches, f"limits broken across processes: {breaches[:10]}"
        claims = Counter(item_id for claimed, _, _ in results for item_id in claimed)
        twice = sorted(item_id for item_id, n in claims.items() if n > 1)
        assert not twice, f"items claimed by two live leases at once: {twice[:10]}"
        completions = Counter(item_id for _, completed, _ in results for item_id in completed)
        assert sorted(completions) == sorted(pushed), (
            f"{len(set(pushed) - set(completions))} items were never completed, "
            f"{len(set(completions) - set(pushed))} completed items were never pushed"
        )
        report = await pool.groups()
        assert all(g.in_flight == 0 and g.ready == 0 for g in report.groups), report
