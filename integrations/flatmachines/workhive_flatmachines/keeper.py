"""``LeaseKeeper``: heartbeats in the background while a flatmachines job holds a claim.

flatmachines' job worker claims a job, runs a machine for as long as it takes,
and completes it; it never heartbeats. A workhive claim has a lease, so while
a worker holds a claim made through the adapter, one task per worker renews
it: ``workers.heartbeat`` (which also keeps the worker off the reaper's stale
list and extends every lease it holds) or, for a worker that never
registered, ``Pool.extend`` on each claim. When the worker is declared lost
the task drops its claims and ends: their late completions are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import workhive
from workhive.errors import LeaseLost, WorkerLost, WorkerNotFound, WorkhiveError

__all__ = ["LeaseKeeper"]

log = logging.getLogger("workhive_flatmachines")


class LeaseKeeper:
    """The claims this process holds through the adapter, by receipt, with one renewal task per worker.

    >>> keeper.hold("w1", "jobs", item)  # doctest: +SKIP
    >>> keeper.drop(item.receipt)        # doctest: +SKIP
    """

    def __init__(self, hive: workhive.Hive, every: float) -> None:
        self._hive = hive
        self._every = every
        self._held: dict[str, tuple[str, str, workhive.WorkItem]] = {}  # receipt -> (worker, pool, item)
        self._by_worker: dict[str, set[str]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def hold(self, worker_id: str, pool: str, item: workhive.WorkItem) -> None:
        """Keep ``item``'s lease alive until it is dropped."""
        self._held[item.receipt] = (worker_id, pool, item)
        self._by_worker.setdefault(worker_id, set()).add(item.receipt)
        task = self._tasks.get(worker_id)
        if task is None or task.done():
            self._tasks[worker_id] = asyncio.get_running_loop().create_task(
                self._renew(worker_id), name=f"workhive-flatmachines heartbeat {worker_id}"
            )

    def claimed(self, receipt: str) -> workhive.WorkItem | None:
        """The claimed item behind ``receipt`` if this process holds it."""
        entry = self._held.get(receipt)
        return None if entry is None else entry[2]

    def claimed_item(self, pool: str, item_id: str) -> workhive.WorkItem | None:
        """This process's latest claim on item ``item_id`` of ``pool``, if it holds one."""
        held = [item for _, p, item in self._held.values() if p == pool and item.id == item_id]
        return max(held, key=lambda item: item.token) if held else None

    def drop(self, receipt: str) -> None:
        """Stop renewing one claim (completed, failed, released or lost)."""
        entry = self._held.pop(receipt, None)
        if entry is not None:
            receipts = self._by_worker.get(entry[0])
            if receipts is not None:
                receipts.discard(receipt)

    def drop_worker(self, worker_id: str, pool: str | None = None) -> None:
        """Stop renewing a worker's claims (in one pool, or all)."""
        for receipt in list(self._by_worker.get(worker_id, ())):
            if pool is None or self._held[receipt][1] == pool:
                self.drop(receipt)

    def holding(self, worker_id: str) -> int:
        return len(self._by_worker.get(worker_id, ()))

    async def stop(self) -> None:
        """Cancel every renewal task (the loop is shutting down, or the handle closes)."""
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _renew(self, worker_id: str) -> None:
        while self._by_worker.get(worker_id):
            await asyncio.sleep(self._every)
            if not self._by_worker.get(worker_id):
                break
            try:
                await self._hive.workers.heartbeat(worker_id)
            except WorkerNotFound:
                await self._extend_each(worker_id)
            except WorkerLost:
                # Reaped: its items were released; whatever it finishes now is refused anyway.
                log.warning("worker %r was declared lost; its claims are no longer renewed", worker_id)
                self.drop_worker(worker_id)
            except WorkhiveError as exc:
                # Storage trouble: try again next round; the lease outlasts a few missed beats.
                log.warning("heartbeat for worker %r failed: %s", worker_id, exc)
        self._by_worker.pop(worker_id, None)
        if self._tasks.get(worker_id) is asyncio.current_task():
            del self._tasks[worker_id]

    async def _extend_each(self, worker_id: str) -> None:
        for receipt in list(self._by_worker.get(worker_id, ())):
            entry = self._held.get(receipt)
            if entry is None:
                continue
            _, pool, item = entry
            try:
                await self._hive.pool(pool).extend(item)
            except LeaseLost:
                self.drop(receipt)
            except WorkhiveError as exc:
                log.warning("extending the lease of %s failed: %s", receipt, exc)
