"""The storage contract: what a backend must do, and nothing about how.

A backend is any object with these async methods. The ``Hive`` facade does
argument validation, JSON encoding, default options, events and error
messages; a backend only stores and moves items atomically. That keeps the
protocol small enough for SQLite, PostgreSQL (``FOR UPDATE SKIP LOCKED``,
batched acks through ``complete`` taking many, ``LISTEN/NOTIFY`` behind
``wait_for_work``) and Redis (Lua scripts per call) alike.

Semantics every backend honours (``workhive.testing`` checks each one):

Items
  * ``push`` stores items as PENDING with ``available_at = now + delay`` and
    returns their ids in order. With a ``dedup_key``, if the pool already has
    a PENDING or CLAIMED item with that key, no item is created and that
    item's id is returned instead (also within one batch).
  * ``claim`` atomically takes up to ``limit`` claimable items, ordered by
    priority (higher first), then ``available_at``, then insertion order.
    Claimable means PENDING with ``available_at <= now``, or CLAIMED with
    ``lease_expires_at <= now`` (an expired lease; it counts as available at
    its expiry time). Each claimed item gets ``state=CLAIMED``,
    ``claimed_by=worker_id``, ``attempts += 1``, ``token`` set to a value
    higher than any token the item had before, ``lease_seconds=lease`` and
    ``lease_expires_at = now + lease``. One item is never held by two
    unexpired leases, across processes and machines.
  * An expired lease whose item has ``attempts >= max_attempts`` is not
    claimed again: the item becomes POISONED with an error saying the lease
    expired (the backend may do this lazily, but before it would be claimed).
  * ``complete``, ``fail``, ``extend`` and ``release`` act only if the item is
    CLAIMED, its token equals the one given, and its lease has not expired;
    otherwise they change nothing and report failure (``False``/``None``),
    and the facade raises ``LeaseLost`` with an explanation.
  * ``complete`` sets DONE, keeps ``result`` and ``finished_at``; clears the lease.
  * ``fail`` keeps ``error``; if ``poison`` or ``attempts >= max_attempts``
    the item becomes POISONED (``finished_at`` set), else PENDING with
    ``available_at = now + retry_in``. Returns the new state.
  * ``release`` puts the item back to PENDING with ``available_at = now +
    delay`` and gives the attempt back (``attempts -= 1``,
    ``releases += 1``): for shutdowns and rate limits, not failures.
  * ``extend`` sets ``lease_expires_at = now + lease`` and returns it.
  * ``release_by_worker`` puts every item CLAIMED by the worker (in one pool,
    or all pools when ``pool`` is None) back to PENDING, available now. With
    ``spend_attempt`` the attempt stays counted and exhausted items become
    POISONED; without, it is refunded as in ``release``. Returns the count.
  * ``requeue`` moves POISONED items (the given ids, or all when None) back to
    PENDING, available now, with ``attempts = 0`` and the error kept.
  * ``purge`` deletes DONE/POISONED items finished more than ``older_than``
    seconds ago; retention is the caller's policy.
  * Optional: ``complete_and_claim`` (see ``CompletesAndClaims``) does
    ``complete(pool, [ack])`` and, if and only if that ack was accepted,
    ``claim(pool, worker_id, limit, lease)``, atomically (one transaction or
    script): a worker loop then costs one write per item instead of two.
    Returns ``(accepted, claimed)``; a refused ack claims nothing and changes
    nothing. Backends without it keep working: the facade falls back to
    ``complete`` then ``claim``.

Workers
  * ``register_worker`` inserts or replaces the record: status STARTING,
    ``registered_at = last_heartbeat = now``.
  * ``heartbeat`` sets ``last_heartbeat = now`` and extends every unexpired
    lease the worker holds in every pool by that item's ``lease_seconds``.
    A LOST worker's heartbeat raises ``WorkerLost``; an unknown one
    ``WorkerNotFound``. Returns the updated record.
  * ``reap`` finds workers not LOST or STOPPED whose heartbeat is older than
    ``threshold`` seconds, and for each, atomically, marks it LOST and does
    ``release_by_worker(None, id, spend_attempt=True)``.

Shared state
  * A small key/value area, namespaced, with optional expiry on the backend's
    clock; expired keys read as absent. Used for fleet-wide credential
    cooldowns. Values are JSON text.

Clock
  * Every time is the backend's (``await now()``), never the worker's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from workhive.models import (
    Ack,
    ItemState,
    NewItem,
    PoolStats,
    ReapedWorker,
    WorkerFilter,
    WorkerRecord,
    WorkerRegistration,
    WorkerStatus,
    WorkItem,
)

__all__ = ["CompletesAndClaims", "StorageBackend"]


@runtime_checkable
class StorageBackend(Protocol):
    """What a ``workhive_storage`` factory returns.

    ``capabilities`` may hold ``"notify"`` (``wait_for_work`` wakes on push
    rather than sleeping out the timeout) and ``"multiprocess"`` (safe to share
    across processes).
    """

    capabilities: frozenset[str]

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def now(self) -> float: ...

    # -- items --------------------------------------------------------------
    async def push(self, pool: str, items: Sequence[NewItem]) -> list[str]: ...
    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]: ...
    async def complete(self, pool: str, acks: Sequence[Ack]) -> list[bool]: ...
    async def fail(
        self, pool: str, item_id: str, token: int, error: str, retry_in: float, poison: bool
    ) -> ItemState | None: ...
    async def release(self, pool: str, item_id: str, token: int, delay: float) -> bool: ...
    async def extend(self, pool: str, item_id: str, token: int, lease: float) -> float | None: ...
    async def get(self, pool: str, item_id: str) -> WorkItem | None: ...
    async def list_items(self, pool: str, state: ItemState, limit: int, offset: int = 0) -> list[WorkItem]: ...
    async def requeue(self, pool: str, item_ids: Sequence[str] | None) -> int: ...
    async def release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> int: ...
    async def purge(self, pool: str, older_than: float) -> int: ...
    async def stats(self, pool: str) -> PoolStats: ...
    async def pools(self) -> list[str]: ...
    async def wait_for_work(self, pool: str, timeout: float) -> None: ...

    # -- workers ------------------------------------------------------------
    async def register_worker(self, registration: WorkerRegistration) -> WorkerRecord: ...
    async def heartbeat(self, worker_id: str) -> WorkerRecord: ...
    async def set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None: ...
    async def get_worker(self, worker_id: str) -> WorkerRecord | None: ...
    async def list_workers(self, filter: WorkerFilter) -> list[WorkerRecord]: ...
    async def reap(self, threshold: float) -> list[ReapedWorker]: ...

    # -- shared state -------------------------------------------------------
    async def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None: ...
    async def state_get(self, namespace: str, key: str) -> str | None: ...
    async def state_scan(self, namespace: str) -> dict[str, str]: ...
    async def state_delete(self, namespace: str, key: str) -> bool: ...


@runtime_checkable
class CompletesAndClaims(Protocol):
    """An optional backend method: complete one claim and claim the next in one atomic step.

    Each claimed item still gets its own lease and fencing token; only the
    commits are shared. ``Pool`` checks for it once, with ``isinstance``, and
    falls back to ``complete`` then ``claim`` for backends without it.

    >>> class MyBackend:  # doctest: +SKIP
    ...     async def complete_and_claim(self, pool, ack, worker_id, limit, lease):
    ...         async with self.transaction():
    ...             if not (await self._complete(pool, [ack]))[0]:
    ...                 return False, []
    ...             return True, await self._claim(pool, worker_id, limit, lease)
    """

    async def complete_and_claim(
        self, pool: str, ack: Ack, worker_id: str, limit: int, lease: float
    ) -> tuple[bool, list[WorkItem]]:
        """Atomically ``complete(pool, [ack])``; only if accepted, ``claim(pool, worker_id, limit, lease)``.

        Returns ``(accepted, claimed)``. When the ack is refused nothing is
        claimed and nothing changes.
        """
        ...
