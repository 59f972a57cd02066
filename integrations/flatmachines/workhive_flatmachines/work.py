"""flatmachines' ``WorkBackend`` and ``WorkPool`` on a workhive hive.

The id a claimed ``WorkItem`` carries is the claim's receipt
(``"<item id>.<token>"``, see ``workhive.ids``), so flatmachines' id-only
``complete(item_id)`` and ``fail(item_id)`` are fenced: a worker whose claim
was released (reaped, lease run out) and handed to another worker gets
``LeaseLost`` instead of finishing the other worker's job.
"""

from __future__ import annotations

from typing import Any

import attrs
from flatmachines.distributed import WorkItem as FmWorkItem

import workhive
from workhive.errors import ItemNotFound
from workhive.ids import parse_receipt
from workhive.validation import check_nonnegative
from workhive_flatmachines.connection import HiveHandle
from workhive_flatmachines.convert import iso, missing_item, push_options

__all__ = ["WorkhiveWorkBackend", "WorkhiveWorkPool"]

_NO_ERROR = "failed (flatmachines gave no error message)"


def _fm_item(item: workhive.WorkItem) -> FmWorkItem:
    claimed_at = None
    if item.lease_expires_at is not None and item.lease_seconds is not None:
        claimed_at = item.lease_expires_at - item.lease_seconds
    return FmWorkItem(
        id=item.receipt,
        data=item.data,
        claimed_by=item.claimed_by,
        attempts=item.attempts,
        max_retries=item.max_attempts,
        status="claimed",
        created_at=iso(item.created_at) or "",
        claimed_at=iso(claimed_at),
    )


class WorkhiveWorkPool:
    """One named pool, as flatmachines' ``WorkPool`` protocol asks; get it from ``WorkhiveWorkBackend.pool``.

    >>> pool = WorkhiveWorkBackend("sqlite:///data/workers.db").pool("papers")  # doctest: +SKIP
    >>> await pool.push({"url": "https://example.com"}, {"max_retries": 5})  # doctest: +SKIP
    >>> job = await pool.claim("worker-1")   # job.id == 'i0000000000000001.1'  # doctest: +SKIP
    >>> await pool.complete(job.id, {"ok": True})  # doctest: +SKIP
    """

    def __init__(self, handle: HiveHandle, name: str, *, retry_in: float | None = 0.0) -> None:
        handle.pool_name_check(name)
        self.name = name
        self._handle = handle
        self._retry_in = retry_in

    def __repr__(self) -> str:
        return f"<WorkhiveWorkPool {self.name!r} on {self._handle!r}>"

    async def _pool(self) -> workhive.Pool:
        return (await self._handle.hive()).pool(self.name)

    async def push(self, item: Any, options: dict[str, Any] | None = None) -> str:
        """Add one item; returns its workhive id (its claims get ``"<id>.<token>"``)."""
        kwargs = push_options(options, 3)  # flatmachines' default max_retries
        return await (await self._pool()).push(item, **kwargs)

    async def claim(self, worker_id: str) -> FmWorkItem | None:
        """Claim the next item with a lease kept alive in the background until it is completed or failed."""
        pool = await self._pool()
        item = await pool.claim(worker_id)
        if item is None:
            return None
        (await self._handle.keeper()).hold(worker_id, self.name, item)
        return _fm_item(item)

    async def _claimed(self, item_id: str) -> workhive.WorkItem:
        """The claim ``item_id`` (a receipt) names, as a ``WorkItem`` the pool can fence with."""
        keeper = await self._handle.keeper()
        kept = keeper.claimed(item_id) if isinstance(item_id, str) else None
        if kept is not None and kept.pool == self.name:
            return kept
        try:
            ident, token = parse_receipt(item_id)
        except workhive.InvalidArgument:
            raise missing_item(item_id, self.name) from None
        try:
            current = await (await self._pool()).get(ident)
        except ItemNotFound:
            raise missing_item(item_id, self.name) from None
        if token > current.token:
            # Tokens rise with every claim: this one was never handed out.
            raise KeyError(
                f"Work item {item_id!r} not found in pool {self.name!r}: no claim of {ident} ever had token "
                f"{token} (its latest claim has token {current.token}); pass the id claim() returned"
            )
        # A claim made by another process (a resumed machine's context): the stored
        # item with the token the receipt carries; a stale token is refused by the pool.
        return attrs.evolve(current, token=token)

    async def complete(self, item_id: str, result: Any | None = None) -> None:
        """Finish the claim ``item_id``; ``LeaseLost`` if it is no longer this claim's, ``KeyError`` if unknown."""
        claimed = await self._claimed(item_id)
        try:
            await (await self._pool()).complete(claimed, result)
        finally:
            (await self._handle.keeper()).drop(claimed.receipt)

    async def fail(self, item_id: str, error: str | None = None) -> None:
        """Give the claim back for a retry (behind waiting items), or poison it when its attempts are spent."""
        claimed = await self._claimed(item_id)
        try:
            text = _NO_ERROR if error is None else str(error)
            await (await self._pool()).fail(claimed, text, retry_in=self._retry_in)
        finally:
            (await self._handle.keeper()).drop(claimed.receipt)

    async def size(self) -> int:
        """Items waiting to be claimed (retries waiting out a delay included)."""
        return await (await self._pool()).size()

    async def release_by_worker(self, worker_id: str) -> int:
        """Give back every item ``worker_id`` holds here; an item whose attempts are spent is poisoned."""
        released = await (await self._pool()).release_by_worker(worker_id, spend_attempt=True)
        (await self._handle.keeper()).drop_worker(worker_id, self.name)
        return released


class WorkhiveWorkBackend:
    """flatmachines' ``WorkBackend`` on a workhive storage URL (or a ``Hive`` you own).

    ``lease``: seconds a claim lasts without a heartbeat (renewed every
    ``heartbeat_every``, default a third of it, while the job runs).
    ``retry_in``: seconds a failed item waits before it can be claimed again;
    None uses the hive's backoff strategy.

    >>> work = WorkhiveWorkBackend("sqlite:///data/workers.db")  # doctest: +SKIP
    >>> isinstance(work, flatmachines.WorkBackend)  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        storage: str | workhive.Hive | HiveHandle,
        *,
        retry_in: float | None = 0.0,
        **options: Any,
    ) -> None:
        self.handle = storage if isinstance(storage, HiveHandle) else HiveHandle(storage, **options)
        if retry_in is not None:
            retry_in = check_nonnegative("retry_in", retry_in)
        self._retry_in = retry_in
        self._pools: dict[str, WorkhiveWorkPool] = {}

    def __repr__(self) -> str:
        return f"<WorkhiveWorkBackend {self.handle!r}>"

    def pool(self, name: str) -> WorkhiveWorkPool:
        """The pool called ``name``; ``InvalidName`` (a ValueError) for a name workhive cannot store."""
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = WorkhiveWorkPool(self.handle, name, retry_in=self._retry_in)
        return pool

    async def aclose(self) -> None:
        """Close the hive now (it also closes on its own when the event loop shuts down)."""
        await self.handle.aclose()
