"""``Pool``: the public face of one named work pool.

The pool validates and encodes, fills in defaults, calls the backend once,
fires event hooks, and turns a backend's "no" into ``LeaseLost`` with an
explanation. Backends never see unvalidated input.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from workhive.errors import InvalidArgument, ItemNotFound, LeaseLost
from workhive.models import Ack, ItemState, Job, NewItem, PoolStats, WorkItem
from workhive.storage import CompletesAndClaims
from workhive.validation import check_count, check_nonnegative, check_positive, to_json

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = ["Pool"]

MAX_ERROR_CHARS = 20_000


def error_text(error: BaseException | str) -> str:
    """The text kept with a failed item: ``Type: message``, capped in size."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 15] + "… [truncated]"


def _ack(item: WorkItem, result: Any) -> Ack:
    """The completion of ``item``'s claim, with ``result`` encoded (InvalidItem if it cannot be)."""
    return Ack(item.id, item.token, None if result is None else to_json(result, "result"))


class Pool:
    """A named work pool. Get one with ``hive.pool(name)``.

    >>> async def main():  # doctest: +SKIP
    ...     async with workhive.open("memory://") as hive:
    ...         pool = hive.pool("summaries")
    ...         await pool.push({"url": "https://example.com"})
    ...         item = await pool.claim(worker_id="w1")
    ...         await pool.complete(item, {"summary": "..."})
    """

    __slots__ = (
        "_backend",
        "_ev_claimed",
        "_ev_completed",
        "_ev_failed",
        "_ev_poisoned",
        "_fused",
        "_hive",
        "name",
    )

    def __init__(self, hive: Hive, name: str) -> None:
        self.name = name
        self._hive = hive
        self._backend = hive.storage
        # Decided once: a runtime-checkable isinstance walks the protocol's members.
        self._fused = hive.storage if isinstance(hive.storage, CompletesAndClaims) else None
        events = hive.manager.event_hooks
        self._ev_claimed = events["workhive_item_claimed"]
        self._ev_completed = events["workhive_item_completed"]
        self._ev_failed = events["workhive_item_failed"]
        self._ev_poisoned = events["workhive_item_poisoned"]

    def __repr__(self) -> str:
        return f"<Pool {self.name!r}>"

    # -- producing ----------------------------------------------------------
    def _new_item(
        self, data: Any, priority: int, delay: float, max_attempts: int | None, dedup_key: str | None
    ) -> NewItem:
        payload = to_json(data)
        if priority.__class__ is not int or priority != 0:
            check_count("priority", priority, minimum=0)
        if delay != 0:
            check_nonnegative("delay", delay)
        attempts = self._hive.max_attempts if max_attempts is None else check_count("max_attempts", max_attempts)
        if dedup_key is not None and (not isinstance(dedup_key, str) or not dedup_key or len(dedup_key) > 1000):
            raise InvalidArgument(f"dedup_key must be a non-empty string of at most 1000 characters, got {dedup_key!r}")
        return NewItem(payload, priority, float(delay), attempts, dedup_key)

    async def push(
        self,
        data: Any,
        *,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int | None = None,
        dedup_key: str | None = None,
    ) -> str:
        """Add one item; returns its id (the existing item's id if ``dedup_key`` matched one).

        ``priority``: higher is claimed first (>= 0). ``delay``: seconds before it
        may be claimed. ``max_attempts``: claims before it is poisoned.
        """
        item = self._new_item(data, priority, delay, max_attempts, dedup_key)
        return (await self._backend.push(self.name, (item,)))[0]

    async def push_many(self, items: Iterable[Any]) -> list[str]:
        """Add many items in one backend call; each is plain data or a ``Job`` with its options.

        Every item is validated before anything is written: one bad item and none are pushed.
        """
        # Plain data takes the defaults, so skip the option checks it cannot fail.
        attempts = self._hive.max_attempts
        new = [
            self._new_item(i.data, i.priority, i.delay, i.max_attempts, i.dedup_key)
            if isinstance(i, Job)
            else NewItem(to_json(i), 0, 0.0, attempts, None)
            for i in items
        ]
        if not new:
            return []
        return await self._backend.push(self.name, new)

    # -- consuming ----------------------------------------------------------
    async def claim(self, worker_id: str | None = None, *, lease: float | None = None) -> WorkItem | None:
        """Claim the next available item, or None. The lease is ``lease`` seconds (default: the hive's)."""
        # claim_many(1, ...) inlined: this is the hottest call of a worker loop.
        lease_s = self._hive.lease if lease is None else check_positive("lease", lease)
        wid = self._hive.anonymous_worker_id if worker_id is None else worker_id
        items = await self._backend.claim(self.name, wid, 1, lease_s)
        if not items:
            return None
        if self._ev_claimed:
            self._hive.manager.hook.workhive_item_claimed(pool=self.name, item=items[0], worker_id=wid)
        return items[0]

    async def claim_many(self, n: int, worker_id: str | None = None, *, lease: float | None = None) -> list[WorkItem]:
        """Claim up to ``n`` items at once, each with its own lease and fencing token."""
        if n.__class__ is not int or n != 1:
            check_count("n", n, maximum=10_000)
        lease_s = self._hive.lease if lease is None else check_positive("lease", lease)
        wid = self._hive.anonymous_worker_id if worker_id is None else worker_id
        items = await self._backend.claim(self.name, wid, n, lease_s)
        if self._ev_claimed and items:
            hook = self._hive.manager.hook.workhive_item_claimed
            for item in items:
                hook(pool=self.name, item=item, worker_id=wid)
        return items

    async def complete(self, item: WorkItem, result: Any = None) -> None:
        """Mark a claimed item done and keep ``result``; ``LeaseLost`` if the claim is stale."""
        ack = _ack(item, result)
        if not (await self._backend.complete(self.name, (ack,)))[0]:
            raise await self._lease_lost(item, "complete")
        if self._ev_completed:
            self._hive.manager.hook.workhive_item_completed(pool=self.name, item=item)

    async def complete_and_claim(
        self, item: WorkItem, result: Any = None, worker_id: str | None = None, *, lease: float | None = None
    ) -> WorkItem | None:
        """Complete ``item`` (keeping ``result``) and claim the next item, or None when none is ready.

        The worker loop in one call. Backends that support it do both in one
        transaction (half the commits of ``complete`` then ``claim``); others
        do the two in turn. The new item has its own lease and fencing token,
        exactly as from ``claim``. A stale claim raises ``LeaseLost`` and
        claims nothing; the completion stands even when nothing is left.

        >>> async def work(pool):  # doctest: +SKIP
        ...     item = await pool.claim("w1")
        ...     while item is not None:
        ...         item = await pool.complete_and_claim(item, {"ok": True}, "w1")
        """
        ack = _ack(item, result)
        lease_s = self._hive.lease if lease is None else check_positive("lease", lease)
        wid = self._hive.anonymous_worker_id if worker_id is None else worker_id
        fused = self._fused
        items: list[WorkItem] | None = None
        if fused is not None:
            accepted, items = await fused.complete_and_claim(self.name, ack, wid, 1, lease_s)
        else:
            accepted = (await self._backend.complete(self.name, (ack,)))[0]
        if not accepted:
            raise await self._lease_lost(item, "complete")
        if self._ev_completed:
            self._hive.manager.hook.workhive_item_completed(pool=self.name, item=item)
        if items is None:
            # Composed: the completion is already committed (and reported) if this claim fails.
            items = await self._backend.claim(self.name, wid, 1, lease_s)
        if not items:
            return None
        if self._ev_claimed:
            self._hive.manager.hook.workhive_item_claimed(pool=self.name, item=items[0], worker_id=wid)
        return items[0]

    async def complete_many(self, done: Sequence[tuple[WorkItem, Any]]) -> list[bool]:
        """Complete many claims in one backend call (batched acks).

        Returns, per item, whether it was accepted; a stale claim is ``False``
        rather than an exception, so one lost lease does not undo the batch.
        """
        acks = [_ack(i, r) for i, r in done]
        if not acks:
            return []
        accepted = await self._backend.complete(self.name, acks)
        if self._ev_completed:
            hook = self._hive.manager.hook.workhive_item_completed
            for (item, _), ok in zip(done, accepted):
                if ok:
                    hook(pool=self.name, item=item)
        return accepted

    async def fail(
        self,
        item: WorkItem,
        error: BaseException | str,
        *,
        retry_in: float | None = None,
        retry_after: float | None = None,
        poison: bool = False,
    ) -> ItemState:
        """Record a failure: retry later, or poison when attempts are spent (or ``poison=True``).

        The delay is ``retry_in`` if given, else the hive's backoff strategy for
        ``item.attempts`` (honouring a server's ``retry_after``). Returns the new
        state (PENDING or POISONED).
        """
        text = error_text(error)
        if retry_in is None:
            delay = self._hive.backoff.delay(item.attempts, retry_after)
        else:
            delay = check_nonnegative("retry_in", retry_in)
        delay = 0.0 if not math.isfinite(delay) or delay < 0 else delay
        state = await self._backend.fail(self.name, item.id, item.token, text, delay, poison)
        if state is None:
            raise await self._lease_lost(item, "fail")
        if state is ItemState.POISONED:
            if self._ev_poisoned:
                self._hive.manager.hook.workhive_item_poisoned(pool=self.name, item=item, error=text)
        elif self._ev_failed:
            self._hive.manager.hook.workhive_item_failed(pool=self.name, item=item, error=text, retry_in=delay)
        return state

    async def release(self, item: WorkItem, *, delay: float = 0.0) -> None:
        """Give a claimed item back without spending its attempt (shutdown, rate limit)."""
        if not await self._backend.release(self.name, item.id, item.token, check_nonnegative("delay", delay)):
            raise await self._lease_lost(item, "release")

    async def extend(self, item: WorkItem, lease: float | None = None) -> float:
        """Extend a claim's lease to ``lease`` seconds from now; returns the new expiry time."""
        lease_s = self._hive.lease if lease is None else check_positive("lease", lease)
        expiry = await self._backend.extend(self.name, item.id, item.token, lease_s)
        if expiry is None:
            raise await self._lease_lost(item, "extend")
        return expiry

    async def _lease_lost(self, item: WorkItem, action: str) -> LeaseLost:
        now_item = await self._backend.get(self.name, item.id)
        prefix = f"cannot {action} item {item.id} of pool {self.name!r} with token {item.token}: "
        if now_item is None:
            why = "the item no longer exists (purged?)"
        elif now_item.state is ItemState.DONE:
            why = "it was completed already"
        elif now_item.state is ItemState.POISONED:
            why = "it is poisoned (dead-lettered)"
        elif now_item.token != item.token:
            why = (
                f"it was claimed again since (token {now_item.token}, worker {now_item.claimed_by}) "
                "after this claim's lease expired or was released"
            )
        elif now_item.state is ItemState.PENDING:
            why = "it was released back to the pool (lease expired or the worker was reaped)"
        else:
            why = f"the lease expired at {now_item.lease_expires_at}"
        return LeaseLost(
            prefix + why + "; drop it, another claim will handle it",
            item_id=item.id,
            token=item.token,
            current=now_item,
        )

    # -- inspecting ---------------------------------------------------------
    async def size(self) -> int:
        """Items waiting to be claimed (ready and delayed)."""
        stats = await self._backend.stats(self.name)
        return stats.pending + stats.delayed

    async def stats(self) -> PoolStats:
        """Counts per state and the oldest pending item's time."""
        return await self._backend.stats(self.name)

    async def get(self, item_id: str) -> WorkItem:
        """The item with that id, in whatever state; ``ItemNotFound`` otherwise."""
        item = await self._backend.get(self.name, str(item_id))
        if item is None:
            raise ItemNotFound(f"no item {item_id!r} in pool {self.name!r}", item_id=item_id, pool=self.name)
        return item

    async def items(self, state: ItemState | str, *, limit: int = 100, offset: int = 0) -> list[WorkItem]:
        """Items in ``state``, oldest first (pagination by ``offset``)."""
        try:
            st = ItemState(state)
        except ValueError:
            allowed = ", ".join(s.value for s in ItemState)
            raise InvalidArgument(f"unknown item state {state!r}; use one of {allowed}") from None
        check_count("limit", limit, maximum=100_000)
        check_count("offset", offset, minimum=0)
        return await self._backend.list_items(self.name, st, limit, offset)

    async def dead(self, *, limit: int = 100, offset: int = 0) -> list[WorkItem]:
        """Poisoned items, with the error each was poisoned by."""
        return await self.items(ItemState.POISONED, limit=limit, offset=offset)

    async def requeue(self, item_ids: Iterable[str] | None = None) -> int:
        """Move poisoned items (these ids, or all) back to pending with fresh attempts; returns the count."""
        ids = None if item_ids is None else [str(i) for i in item_ids]
        return await self._backend.requeue(self.name, ids)

    async def release_by_worker(self, worker_id: str, *, spend_attempt: bool = True) -> int:
        """Release every item ``worker_id`` holds in this pool; returns the count."""
        return await self._backend.release_by_worker(self.name, worker_id, spend_attempt)

    async def purge(self, older_than: float) -> int:
        """Delete done and poisoned items finished more than ``older_than`` seconds ago."""
        return await self._backend.purge(self.name, check_nonnegative("older_than", older_than))

    async def wait_for_work(self, timeout: float) -> None:
        """Return when work may have arrived (backends with ``notify``) or after ``timeout`` seconds."""
        await self._backend.wait_for_work(self.name, check_nonnegative("timeout", timeout))
