"""flatmachines' ``WorkBackend`` and ``WorkPool`` on a workhive hive.

The id a claimed ``WorkItem`` carries is a ``ClaimId``: a ``str`` equal to the
id ``push`` returned (as with flatmachines' own pools) that also carries the
claim's fencing token. flatmachines' id-only ``complete(item_id)`` and
``fail(item_id)`` are therefore fenced whenever the caller holds the claim — it
passes the ``ClaimId`` it got, or this process's lease keeper holds the claim —
so a worker whose claim was released (reaped, lease run out) and handed to
another worker gets ``ClaimLost`` (a ``workhive.LeaseLost`` and a ``KeyError``)
instead of finishing the other worker's job. A plain id from another process
(a resumed machine's context, say) acts on the item's current claim, as
flatmachines' pools do. Receipts (``"<item id>.<token>"``) are accepted too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from flatmachines.distributed import WorkItem as FmWorkItem

import workhive
from workhive.errors import InvalidItem, ItemNotFound, LeaseLost
from workhive.ids import RECEIPT_PATTERN, is_item_id, parse_receipt
from workhive.validation import check_nonnegative, check_positive
from workhive_flatmachines.connection import HiveHandle, open_handle
from workhive_flatmachines.convert import iso, missing_item, push_options
from workhive_flatmachines.errors import ClaimLost, NotJSON

__all__ = ["ClaimId", "WorkhiveWorkBackend", "WorkhiveWorkPool"]


class ClaimId(str):
    """The id of a claimed job: equal to the id ``push`` returned, carrying the claim's fencing ``token``.

    It compares, hashes, prints and JSON-encodes as the plain item id, so
    flatmachines code that matches claimed ids against pushed ones keeps
    working; ``complete``/``fail`` given this object are fenced by its token.

    >>> job = ClaimId("i000000000000002a", 3)
    >>> (job == "i000000000000002a", job.token, job.receipt)
    (True, 3, 'i000000000000002a.3')
    """

    token: int

    def __new__(cls, item_id: str, token: int) -> ClaimId:
        self = super().__new__(cls, item_id)
        self.token = token
        return self

    @property
    def receipt(self) -> str:
        """The claim as workhive writes it: ``"<item id>.<token>"``."""
        return f"{str.__str__(self)}.{self.token}"

    def __reduce__(self) -> tuple[Any, ...]:
        # copy/deepcopy/pickle keep the token (flatmachines copies contexts).
        return (ClaimId, (str.__str__(self), self.token))


def _not_json(exc: InvalidItem) -> NotJSON:
    return NotJSON(str(exc), **{k: v for k, v in vars(exc).items() if k != "message"})


_NO_ERROR = "failed (flatmachines gave no error message)"


def _fm_item(item: workhive.WorkItem) -> FmWorkItem:
    claimed_at = None
    if item.lease_expires_at is not None and item.lease_seconds is not None:
        claimed_at = item.lease_expires_at - item.lease_seconds
    return FmWorkItem(
        id=ClaimId(item.id, item.token),
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
    >>> job = await pool.claim("worker-1")   # job.id == the id push returned  # doctest: +SKIP
    >>> await pool.complete(job.id, {"ok": True})  # doctest: +SKIP
    """

    def __init__(
        self, handle: HiveHandle, name: str, *, retry_in: float | None = 0.0, lease: float | None = None
    ) -> None:
        handle.pool_name_check(name)
        self.name = name
        self._handle = handle
        self._retry_in = retry_in
        self._lease = lease

    def __repr__(self) -> str:
        return f"<WorkhiveWorkPool {self.name!r} on {self._handle!r}>"

    async def _pool(self) -> workhive.Pool:
        return (await self._handle.hive()).pool(self.name)

    async def push(self, item: Any, options: dict[str, Any] | None = None) -> str:
        """Add one item; returns its id (``NotJSON``, also a ``TypeError``, for data JSON cannot hold)."""
        kwargs = push_options(options, 3)  # flatmachines' default max_retries
        try:
            return await (await self._pool()).push(item, **kwargs)
        except InvalidItem as exc:
            raise _not_json(exc) from exc

    async def claim(self, worker_id: str) -> FmWorkItem | None:
        """Claim the next item with a lease kept alive in the background until it is completed or failed."""
        pool = await self._pool()
        item = await pool.claim(worker_id, lease=self._lease)
        if item is None:
            return None
        (await self._handle.keeper()).hold(worker_id, self.name, item)
        return _fm_item(item)

    async def _claimed(self, item_id: str) -> workhive.WorkItem:
        """The claim ``item_id`` names (a ``ClaimId``, a receipt or a plain id), as a ``WorkItem`` to fence with."""
        keeper = await self._handle.keeper()
        if isinstance(item_id, ClaimId):
            ident, token = str.__str__(item_id), item_id.token
        elif isinstance(item_id, str) and RECEIPT_PATTERN.fullmatch(item_id):
            kept = keeper.claimed(item_id)
            if kept is not None and kept.pool == self.name:
                return kept
            ident, token = parse_receipt(item_id)
        elif is_item_id(item_id):
            # A plain id: this process's claim on it if it holds one (fenced), else the current claim.
            kept = keeper.claimed_item(self.name, item_id)
            if kept is not None:
                return kept
            return await self._current_claim(item_id)
        else:
            raise missing_item(item_id, self.name)
        kept = keeper.claimed(f"{ident}.{token}")
        if kept is not None and kept.pool == self.name:
            return kept
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
        # A claim made by another process: the stored item with the token the id
        # carries; a stale token is refused by the pool (ClaimLost).
        return attrs.evolve(current, token=token)

    async def _current_claim(self, ident: str) -> workhive.WorkItem:
        try:
            current = await (await self._pool()).get(ident)
        except ItemNotFound:
            raise missing_item(ident, self.name) from None
        if current.state is not workhive.ItemState.CLAIMED:
            raise ClaimLost(
                f"Work item {ident!r} in pool {self.name!r} is {current.state.value}, not claimed: "
                + (
                    "it was completed already"
                    if current.state is workhive.ItemState.DONE
                    else "it was poisoned (dead-lettered)"
                    if current.state is workhive.ItemState.POISONED
                    else "its claim was released or failed and it waits for a new claim"
                ),
                item_id=ident,
            )
        return current

    async def complete(self, item_id: str, result: Any | None = None) -> None:
        """Finish the claim ``item_id``; ``ClaimLost`` (a ``KeyError``) if it is no longer this claim's."""
        claimed = await self._claimed(item_id)
        try:
            await (await self._pool()).complete(claimed, result)
        except InvalidItem as exc:
            raise _not_json(exc) from exc
        except LeaseLost as exc:
            (await self._handle.keeper()).drop(claimed.receipt)
            raise ClaimLost(str(exc), item_id=claimed.id) from exc
        (await self._handle.keeper()).drop(claimed.receipt)

    async def fail(self, item_id: str, error: str | None = None) -> None:
        """Give the claim back for a retry (behind waiting items), or poison it when its attempts are spent."""
        claimed = await self._claimed(item_id)
        try:
            text = _NO_ERROR if error is None else str(error)
            await (await self._pool()).fail(claimed, text, retry_in=self._retry_in)
        except LeaseLost as exc:
            raise ClaimLost(str(exc), item_id=claimed.id) from exc
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
    None uses the hive's backoff strategy. ``leases``: a lease of its own for
    some pools (``{"pdf-render": 3600}``), for jobs that may block the event
    loop, and so the background heartbeat, longer than the hive's lease.

    >>> work = WorkhiveWorkBackend("sqlite:///data/workers.db")  # doctest: +SKIP
    >>> isinstance(work, flatmachines.WorkBackend)  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        storage: str | workhive.Hive | HiveHandle | None = None,
        *,
        retry_in: float | None = 0.0,
        leases: Mapping[str, float] | None = None,
        **options: Any,
    ) -> None:
        self.handle = open_handle(storage, options)
        if retry_in is not None:
            retry_in = check_nonnegative("retry_in", retry_in)
        self._retry_in = retry_in
        self._leases = {name: check_positive(f"leases[{name!r}]", s) for name, s in (leases or {}).items()}
        self._pools: dict[str, WorkhiveWorkPool] = {}

    def __repr__(self) -> str:
        return f"<WorkhiveWorkBackend {self.handle!r}>"

    def pool(self, name: str) -> WorkhiveWorkPool:
        """The pool called ``name``; ``InvalidName`` (a ValueError) for a name workhive cannot store."""
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = WorkhiveWorkPool(
                self.handle, name, retry_in=self._retry_in, lease=self._leases.get(name)
            )
        return pool

    async def aclose(self) -> None:
        """Close the hive now (it also closes on its own when the event loop shuts down)."""
        await self.handle.aclose()
