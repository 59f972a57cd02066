"""``Pool``: the public face of one named work pool.

The pool validates and encodes, fills in defaults, calls the backend once,
fires event hooks, and turns a backend's "no" into ``LeaseLost`` with an
explanation. Backends never see unvalidated input.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workhive import envelope, tracing
from workhive.errors import ConfigError, InvalidArgument, ItemNotFound, LeaseLost
from workhive.ids import parse_receipt
from workhive.models import Ack, GroupReport, ItemState, Job, NewItem, PoolStats, StepRecord, WorkItem
from workhive.redaction import scrub, scrub_json
from workhive.steps import check_step_key, encode_step, steps_of
from workhive.storage import Cancels, CompletesAndClaims, ServesGroups
from workhive.validation import (
    check_count,
    check_dedup_key,
    check_group,
    check_limit,
    check_nonnegative,
    check_positive,
    check_weight,
    printable_text,
    to_json,
)

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = ["Pool"]

MAX_ERROR_CHARS = 20_000

# No backend hands out item numbers or fencing tokens at or past 2**63 (they are
# signed 64-bit columns in SQLite and PostgreSQL): a receipt beyond is not one
# workhive issued, and must not reach a driver that cannot even bind it.
_LIMIT = 2**63


def error_text(error: BaseException | str) -> str:
    """The text kept with a failed item: ``Type: message``, capped in size, always storable.

    A lone surrogate (text that is not valid Unicode) is kept as its escape
    (``\\ud800``): refusing the text would leave the failure unrecorded. Every
    secret the process holds is scrubbed out (``workhive.redaction``).
    """
    text = scrub(printable_text(error if isinstance(error, str) else f"{type(error).__name__}: {error}"))
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 15] + "… [truncated]"


def _claim_of(claim: WorkItem | str) -> tuple[str, int]:
    """(item id, fencing token) of a claimed item or a receipt; ``InvalidArgument`` for anything else."""
    if isinstance(claim, WorkItem):
        return claim.id, claim.token
    item_id, token = parse_receipt(claim)
    if token >= _LIMIT or int(item_id[1:], 16) >= _LIMIT:
        raise InvalidArgument(
            f"receipt {claim!r} was not issued by workhive: item numbers and fencing tokens stay below 2**63",
            value=claim,
        )
    return item_id, token


def _ack(claim: WorkItem | str, result: Any) -> Ack:
    """The completion of a claim, with ``result`` encoded (InvalidItem if it cannot be) and scrubbed.

    A handler's result may quote an API body that echoes the key it called with; every
    secret the process holds is replaced in its strings (``workhive.redaction.scrub_json``)
    before any backend sees it, so no store, and nothing that reads one, ever holds it.
    """
    if claim.__class__ is WorkItem:  # the worker loop's case, without a call
        item_id, token = claim.id, claim.token  # type: ignore[union-attr]
    else:
        item_id, token = _claim_of(claim)
    return Ack(item_id, token, None if result is None else scrub_json(to_json(result, "result")))


def _listing(entries: list[str], shown: int = 10) -> str:
    more = len(entries) - shown
    return ", ".join(entries[:shown]) + (f" and {more} more" if more > 0 else "")


def _refuse_scalar_batch(items: object, what: str) -> None:
    """A string, bytes or mapping where a batch belongs is a mistake, not a batch of its characters or keys."""
    if isinstance(items, (str, bytes, bytearray, memoryview, Mapping)):
        kind = type(items).__name__
        raise InvalidArgument(
            f"{what} takes a list (or other iterable) of items, got a {kind}: iterating it would give its "
            f"{'keys' if isinstance(items, Mapping) else 'characters' if isinstance(items, str) else 'bytes'}; "
            "wrap it in a list to mean one item",
            value=items,
        )


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
        "_groups",
        "_hive",
        "name",
    )

    def __init__(self, hive: Hive, name: str) -> None:
        self.name = name
        self._hive = hive
        self._backend = hive.storage
        # Decided once: a runtime-checkable isinstance walks the protocol's members.
        self._fused = hive.storage if isinstance(hive.storage, CompletesAndClaims) else None
        self._groups = hive.storage if isinstance(hive.storage, ServesGroups) else None
        events = hive.manager.event_hooks
        self._ev_claimed = events["workhive_item_claimed"]
        self._ev_completed = events["workhive_item_completed"]
        self._ev_failed = events["workhive_item_failed"]
        self._ev_poisoned = events["workhive_item_poisoned"]

    def __repr__(self) -> str:
        return f"<Pool {self.name!r}>"

    # -- producing ----------------------------------------------------------
    def _new_item(
        self,
        data: Any,
        priority: int,
        delay: float,
        max_attempts: int | None,
        dedup_key: str | None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> NewItem:
        payload = to_json(data)
        if priority.__class__ is not int or priority != 0:
            check_count("priority", priority, minimum=0)
        if delay != 0:
            check_nonnegative("delay", delay)
        attempts = self._hive.max_attempts if max_attempts is None else check_count("max_attempts", max_attempts)
        if dedup_key is not None:
            check_dedup_key(dedup_key)
        if group is not None:
            self._grouping()
            check_group(group)
        carried = tracing.headers()
        if timeout is not None:
            # The item's own timeout travels in its envelope, so every engine keeps it without a column.
            carried = {**(carried or {}), envelope.TIMEOUT_HEADER: repr(check_positive("timeout", timeout))}
        return NewItem(envelope.seal(payload, carried), priority, float(delay), attempts, dedup_key, group)

    async def push(
        self,
        data: Any,
        *,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int | None = None,
        dedup_key: str | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> str:
        """Add one item; returns its id (the existing item's id if ``dedup_key`` matched one).

        ``priority``: higher is claimed first (>= 0). ``delay``: seconds before it
        may be claimed. ``max_attempts``: claims before it is poisoned.
        ``timeout``: seconds its handler may run (> 0; past it the handler is
        stopped and the attempt fails "timed out after N s"), instead of the
        fleet's ``--timeout``. ``group``: the group (tenant) whose turn serves it
        (docs/groups.md); a storage without groups refuses it (``ConfigError``).

        >>> await pool.push({"url": "https://a.example"}, timeout=120, group="tenant-42")  # doctest: +SKIP
        'i000000000000002a'
        """
        with tracing.pushing(self.name) as span:  # the item carries this span's context
            item = self._new_item(data, priority, delay, max_attempts, dedup_key, timeout, group)
            ids = await self._backend.push(self.name, (item,))
            span.pushed(ids)
        return ids[0]

    async def push_many(self, items: Iterable[Any], *, group: str | None = None) -> list[str]:
        """Add many items in one backend call; each is plain data or a ``Job`` with its options.

        Every item is validated before anything is written: one bad item and none are pushed.
        A string, bytes or a mapping is refused (``InvalidArgument``): iterating one
        would push its characters or keys. ``group`` is the group of the plain
        items and of the Jobs without a group of their own.

        >>> await pool.push_many([{"n": 1}, Job({"n": 2}, group="t-7")], group="t-1")  # doctest: +SKIP
        ['i000000000000002a', 'i000000000000002b']
        """
        if group is not None:
            self._grouping()
            check_group(group)
        _refuse_scalar_batch(items, "push_many")
        try:
            items = iter(items)
        except TypeError:
            raise InvalidArgument(
                f"push_many takes a list (or other iterable) of items, got a {type(items).__name__}", value=items
            ) from None
        # Plain data takes the defaults, so skip the option checks it cannot fail.
        attempts = self._hive.max_attempts
        with tracing.pushing(self.name) as span:  # every item carries this span's context
            carried = tracing.headers()
            new = [
                self._new_item(
                    i.data,
                    i.priority,
                    i.delay,
                    i.max_attempts,
                    i.dedup_key,
                    i.timeout,
                    group if i.group is None else i.group,  # a Job's own group wins, even a bad one
                )
                if isinstance(i, Job)
                else NewItem(envelope.seal(to_json(i), carried), 0, 0.0, attempts, None, group)
                for i in items
            ]
            if not new:
                return []
            ids = await self._backend.push(self.name, new)
            span.pushed(ids)
        return ids

    # -- consuming ----------------------------------------------------------
    async def claim(self, worker_id: str | None = None, *, lease: float | None = None) -> WorkItem | None:
        """Claim the next available item, or None. The lease is ``lease`` seconds (default: the hive's)."""
        # claim_many(1, ...) inlined: this is the hottest call of a worker loop.
        lease_s = self._hive.lease if lease is None else check_positive("lease", lease)
        wid = self._hive.anonymous_worker_id if worker_id is None else worker_id
        items = await self._backend.claim(self.name, wid, 1, lease_s)
        if not items:
            return None
        tracing.claimed(self.name, items, wid)
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
        tracing.claimed(self.name, items, wid)
        if self._ev_claimed and items:
            hook = self._hive.manager.hook.workhive_item_claimed
            for item in items:
                hook(pool=self.name, item=item, worker_id=wid)
        return items

    async def complete(self, item: WorkItem | str, result: Any = None) -> None:
        """Mark a claimed item done and keep ``result``; ``LeaseLost`` if the claim is stale.

        ``result`` is kept with every secret the process holds scrubbed from its strings.

        ``item`` is the claimed ``WorkItem`` or its receipt (``item.receipt``), so a
        claim can be finished by another process that was handed only the string.

        >>> await pool.complete(item.receipt, {"summary": "..."})  # doctest: +SKIP
        """
        ack = _ack(item, result)
        claimed: WorkItem | None = None
        if self._ev_completed:
            claimed = item if isinstance(item, WorkItem) else await self._read_claimed(ack.item_id, ack.token)
        if not (await self._backend.complete(self.name, (ack,)))[0]:
            raise await self._lease_lost(ack.item_id, ack.token, "complete")
        if claimed is not None:
            self._hive.manager.hook.workhive_item_completed(pool=self.name, item=claimed)

    async def complete_and_claim(
        self, item: WorkItem | str, result: Any = None, worker_id: str | None = None, *, lease: float | None = None
    ) -> WorkItem | None:
        """Complete ``item`` (keeping ``result``) and claim the next item, or None when none is ready.

        The worker loop in one call. Backends that support it do both in one
        transaction (half the commits of ``complete`` then ``claim``); others
        do the two in turn. The new item has its own lease and fencing token,
        exactly as from ``claim``. A stale claim raises ``LeaseLost`` and
        claims nothing; the completion stands even when nothing is left.
        ``item`` may be a receipt, as for ``complete``.

        >>> async def work(pool):  # doctest: +SKIP
        ...     item = await pool.claim("w1")
        ...     while item is not None:
        ...         item = await pool.complete_and_claim(item, {"ok": True}, "w1")
        """
        ack = _ack(item, result)
        lease_s = self._hive.lease if lease is None else check_positive("lease", lease)
        wid = self._hive.anonymous_worker_id if worker_id is None else worker_id
        claimed: WorkItem | None = None
        if self._ev_completed:
            claimed = item if isinstance(item, WorkItem) else await self._read_claimed(ack.item_id, ack.token)
        fused = self._fused
        items: list[WorkItem] | None = None
        if fused is not None:
            accepted, items = await fused.complete_and_claim(self.name, ack, wid, 1, lease_s)
        else:
            accepted = (await self._backend.complete(self.name, (ack,)))[0]
        if not accepted:
            raise await self._lease_lost(ack.item_id, ack.token, "complete")
        if claimed is not None:
            self._hive.manager.hook.workhive_item_completed(pool=self.name, item=claimed)
        if items is None:
            # Composed: the completion is already committed (and reported) if this claim fails.
            items = await self._backend.claim(self.name, wid, 1, lease_s)
        if not items:
            return None
        tracing.claimed(self.name, items, wid)
        if self._ev_claimed:
            self._hive.manager.hook.workhive_item_claimed(pool=self.name, item=items[0], worker_id=wid)
        return items[0]

    async def complete_many(self, done: Sequence[tuple[WorkItem | str, Any]]) -> list[bool]:
        """Complete many claims in one backend call (batched acks).

        Each entry is ``(claimed item or receipt, result)``. Returns, per item,
        whether it was accepted; a stale claim is ``False`` rather than an
        exception, so one lost lease does not undo the batch.
        """
        acks = [_ack(i, r) for i, r in done]
        if not acks:
            return []
        claimed = (
            [
                i if isinstance(i, WorkItem) else await self._read_claimed(a.item_id, a.token)
                for (i, _), a in zip(done, acks)
            ]
            if self._ev_completed
            else []
        )
        accepted = await self._backend.complete(self.name, acks)
        if claimed:
            hook = self._hive.manager.hook.workhive_item_completed
            for item, ok in zip(claimed, accepted):
                if ok and item is not None:
                    hook(pool=self.name, item=item)
        return accepted

    async def fail(
        self,
        item: WorkItem | str,
        error: BaseException | str,
        *,
        retry_in: float | None = None,
        retry_after: float | None = None,
        poison: bool = False,
    ) -> ItemState:
        """Record a failure: retry later, or poison when attempts are spent (or ``poison=True``).

        The delay is ``retry_in`` if given, else the hive's backoff strategy for
        the claim's attempts (honouring a server's ``retry_after``). Returns the
        new state (PENDING or POISONED). ``item`` may be a receipt; then the
        item is read first when the backoff needs its attempts or a hook listens.
        The error text is kept as printable text (see ``error_text``).
        """
        item_id, token = _claim_of(item)
        text = error_text(error)
        if retry_in is not None:
            retry_in = check_nonnegative("retry_in", retry_in)
        claimed: WorkItem | None = None
        if isinstance(item, WorkItem):
            claimed = item
        elif retry_in is None or self._ev_failed or self._ev_poisoned:
            claimed = await self._read_claimed(item_id, token)
        if retry_in is None:
            # A stale receipt has no attempts to go by: the backend refuses it below anyway.
            delay = 0.0 if claimed is None else self._hive.backoff.delay(claimed.attempts, retry_after)
        else:
            delay = retry_in
        delay = 0.0 if not math.isfinite(delay) or delay < 0 else delay
        state = await self._backend.fail(self.name, item_id, token, text, delay, poison)
        if state is None:
            raise await self._lease_lost(item_id, token, "fail")
        if claimed is None:
            pass
        elif state is ItemState.POISONED:
            if self._ev_poisoned:
                self._hive.manager.hook.workhive_item_poisoned(pool=self.name, item=claimed, error=text)
        elif self._ev_failed:
            self._hive.manager.hook.workhive_item_failed(pool=self.name, item=claimed, error=text, retry_in=delay)
        return state

    async def release(self, item: WorkItem | str, *, delay: float = 0.0) -> None:
        """Give a claimed item (or its receipt) back without spending its attempt (shutdown, rate limit)."""
        item_id, token = _claim_of(item)
        if not await self._backend.release(self.name, item_id, token, check_nonnegative("delay", delay)):
            raise await self._lease_lost(item_id, token, "release")

    async def extend(self, item: WorkItem | str, lease: float | None = None) -> float:
        """Extend a claim's lease (item or receipt) to ``lease`` seconds from now; returns the new expiry time."""
        item_id, token = _claim_of(item)
        lease_s = self._hive.lease if lease is None else check_positive("lease", lease)
        expiry = await self._backend.extend(self.name, item_id, token, lease_s)
        if expiry is None:
            raise await self._lease_lost(item_id, token, "extend")
        return expiry

    async def _read_claimed(self, item_id: str, token: int) -> WorkItem | None:
        """The item a receipt names, for an event or the backoff, read before the change.

        Read before, so a hook sees the item as claimed, as it does when given a
        ``WorkItem``. None when the receipt is already stale: tokens only rise, so
        the backend refuses the change and no event fires.
        """
        current = await self._backend.get(self.name, item_id)
        return current if current is not None and current.token == token else None

    async def _lease_lost(self, item_id: str, token: int, action: str) -> LeaseLost:
        now_item = await self._backend.get(self.name, item_id)
        prefix = f"cannot {action} item {item_id} of pool {self.name!r} with token {token}: "
        if now_item is None:
            why = f"the item no longer exists in pool {self.name!r} (purged, or the claim came from another pool?)"
        elif now_item.state is ItemState.DONE:
            why = "it was completed already"
        elif now_item.state is ItemState.POISONED:
            why = "it is poisoned (dead-lettered)"
        elif now_item.token != token:
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
            item_id=item_id,
            token=token,
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

    async def requeue(self, item_ids: Iterable[str] | None = None, *, fresh: bool = False) -> int:
        """Move poisoned items (these ids, or all) back to pending with fresh attempts; returns the count.

        Their durable steps (``ctx.step``) are kept, so the next claim resumes
        where the last one stopped; ``fresh=True`` forgets them first, so every
        step runs again.

        Cancelled items are requeued by id only (cancelling was a decision; ``requeue()``
        takes the dead letters). Every id is checked first: one that names no item of
        this pool raises ``ItemNotFound``, one neither poisoned nor cancelled ``InvalidArgument``, each naming
        the ids, and nothing is requeued. (Another process may requeue or purge
        one of them between the check and the requeue; the count says what moved.)

        >>> await pool.requeue([item.id for item in await pool.dead()])  # doctest: +SKIP
        3
        """
        if item_ids is None:
            if fresh:
                return await self._requeue_fresh(None)
            return await self._backend.requeue(self.name, None)
        ids = await self._checked_ids(
            item_ids,
            "requeue",
            (ItemState.POISONED, ItemState.CANCELLED),
            "only poisoned or cancelled items can be requeued",
        )
        if fresh and ids:
            return await self._requeue_fresh(ids)
        return await self._backend.requeue(self.name, ids) if ids else 0

    async def _requeue_fresh(self, ids: list[str] | None) -> int:
        """Forget the steps of poisoned items (these, or all), then requeue them.

        Steps go first: a poisoned item is claimed by no one, and ``step_clear``
        leaves a live item's steps alone, so an item another process requeued
        meanwhile keeps its steps rather than losing them under a claim.
        """
        keeper = steps_of(self.name, self._backend)
        if ids is None:
            ids = []
            while True:  # every poisoned item, a page at a time
                page = await self._backend.list_items(self.name, ItemState.POISONED, 1000, len(ids))
                ids.extend(item.id for item in page)
                if len(page) < 1000:
                    break
        if not ids:
            return 0
        await keeper.step_clear(self.name, ids)
        return await self._backend.requeue(self.name, ids)

    # -- durable steps (ctx.step) -----------------------------------------
    async def steps(self, item_id: str) -> list[StepRecord]:
        """The durable steps stored for an item, in the order they were stored (``[]`` for none).

        ``StepsUnsupported`` when the storage keeps no steps.

        >>> [(s.key, s.value) for s in await pool.steps(item_id)]  # doctest: +SKIP
        [('search', {'hits': 3}), ('draft', 'A summary')]
        """
        return await steps_of(self.name, self._backend).step_list(self.name, str(item_id))

    async def put_step(self, item: WorkItem | str, key: str, value: Any, *, failed: bool = False) -> None:
        """Store step ``key`` of a claimed item (or receipt), fenced by its token; ``LeaseLost`` if the claim is stale.

        ``value`` must be JSON (``InvalidItem``), at most ``workhive.steps.MAX_STEP_CHARS``
        characters once encoded, and is kept with every secret the process holds
        scrubbed. A key stored already keeps its first value. ``ctx.step`` calls
        this; call it yourself only when you run claims by hand.

        >>> await pool.put_step(item, "search", {"hits": 3})  # doctest: +SKIP
        """
        keeper = steps_of(self.name, self._backend)
        item_id, token = _claim_of(item)
        key = check_step_key(key)
        payload = encode_step(key, value)
        if not await keeper.step_put(self.name, item_id, token, key, payload, bool(failed)):
            raise await self._lease_lost(item_id, token, f"store step {key!r} of")
    async def cancel(self, item_ids: Iterable[str]) -> dict[str, ItemState]:
        """Cancel items of this pool, pending or running; returns each id cancelled with the state it was in.

        A pending item is CANCELLED at once. A claimed one is CANCELLED in storage
        at once too, so its holder's completion is refused (``LeaseLost``); the
        holder's worker learns of it at its next heartbeat, cancels an async
        handler's task and turns ``ctx.cancelled`` true for a sync one. Cancelled
        items are kept, listed (``items("cancelled")``), counted, requeueable by
        id and purged by age like finished ones.

        Every id is checked first: one that names no item of this pool raises
        ``ItemNotFound``, one already finished (done, poisoned or cancelled)
        ``InvalidArgument``, each naming the ids, and nothing is cancelled. An id
        that finishes between the check and the cancel is left out of the answer.
        A backend without the optional ``cancel`` raises ``ConfigError``.

        >>> await pool.cancel([item_id])  # doctest: +SKIP
        {'i000000000000002a': <ItemState.CLAIMED: 'claimed'>}
        """
        backend = self._backend
        if not isinstance(backend, Cancels):
            raise ConfigError(
                f"storage {type(backend).__name__} cannot cancel items (it lacks the optional cancel method, "
                "workhive.storage.Cancels); use a storage engine that has it (memory, sqlite, postgres, redis)"
            )
        ids = await self._checked_ids(
            item_ids,
            "cancel",
            (ItemState.PENDING, ItemState.CLAIMED),
            "only pending or claimed items can be cancelled",
            " (requeue a finished item first to run it again)",
        )
        if not ids:
            return {}
        before = await backend.cancel(self.name, ids)
        return {
            item_id: state
            for item_id, state in zip(ids, before)
            if state is ItemState.PENDING or state is ItemState.CLAIMED
        }

    async def _checked_ids(
        self, item_ids: Iterable[str], verb: str, allowed: tuple[ItemState, ...], rule: str, hint: str = ""
    ) -> list[str]:
        """The distinct ids of ``item_ids`` if each names an item of this pool in an ``allowed`` state.

        Otherwise ``ItemNotFound`` (unknown ids) or ``InvalidArgument`` (``rule``, then
        each id with its state, then ``hint``), and the caller does nothing.
        """
        _refuse_scalar_batch(item_ids, verb)
        ids = list(item_ids)
        for item_id in ids:
            if not isinstance(item_id, str):
                raise InvalidArgument(f"item ids are strings, got {item_id!r} in {ids!r}", value=item_id)
        ids = list(dict.fromkeys(ids))  # a repeated id counts once
        done = "cancelled" if verb == "cancel" else "requeued"
        unknown: list[str] = []
        refused: list[str] = []
        for item_id in ids:
            item = await self._backend.get(self.name, item_id)
            if item is None:
                unknown.append(item_id)
            elif item.state not in allowed:
                already = "already " if item.state.value == done else ""
                refused.append(f"{item_id} is {already}{item.state.value}")
        if unknown:
            raise ItemNotFound(
                f"no item {_listing([repr(i) for i in unknown])} in pool {self.name!r}; nothing was {done}",
                item_id=unknown[0],
                item_ids=unknown,
                pool=self.name,
            )
        if refused:
            raise InvalidArgument(
                f"{rule}: in pool {self.name!r} item {_listing(refused)}; nothing was {done}{hint}",
                item_ids=[entry.split(" ", 1)[0] for entry in refused],
            )
        return ids

    # -- groups (docs/groups.md) -------------------------------------------
    def _grouping(self) -> ServesGroups:
        """The backend, if it serves groups; else ``ConfigError`` (before anything is stored)."""
        if self._groups is None:
            raise ConfigError(
                f"storage {type(self._backend).__name__} does not support groups: use memory, sqlite, postgres "
                "or redis (or implement workhive.storage.ServesGroups)"
            )
        return self._groups

    async def set_group_weight(self, group: str, weight: float) -> None:
        """Give ``group`` a share of claims: while backlogged it takes ``weight / sum of weights`` of them.

        ``weight`` is a finite number > 0 (default 1). Kept before the group has items.

        >>> await pool.set_group_weight("tenant-42", 3)  # doctest: +SKIP
        """
        backend = self._grouping()
        await backend.set_group_weight(self.name, check_group(group), check_weight(weight))

    async def set_group_limit(self, group: str, limit: int | None) -> None:
        """At most ``limit`` items of ``group`` in flight (unexpired claims) across the fleet; None removes it.

        A group at its limit is skipped: its items wait and claims serve the others.

        >>> await pool.set_group_limit("tenant-42", 2)  # doctest: +SKIP
        """
        backend = self._grouping()
        await backend.set_group_limit(self.name, check_group(group), check_limit("a group limit", limit))

    async def set_default_group_limit(self, limit: int | None) -> None:
        """The limit of every named group without one of its own (ungrouped items have none); None removes it.

        >>> await pool.set_default_group_limit(4)  # doctest: +SKIP
        """
        backend = self._grouping()
        await backend.set_group_limit(self.name, None, check_limit("the default group limit", limit))

    async def set_limit(self, limit: int | None) -> None:
        """At most ``limit`` items of this pool in flight (unexpired claims) across the fleet; None removes it.

        >>> await pool.set_limit(10)  # doctest: +SKIP
        """
        backend = self._grouping()
        await backend.set_pool_limit(self.name, check_limit("a pool limit", limit))

    async def pause_group(self, group: str, seconds: float | None) -> None:
        """Skip ``group`` in claims for ``seconds`` (> 0) on the storage's clock; None resumes it at once.

        Its items wait (nothing fails); a tenant whose budget is spent is paused until it refills.

        >>> await pool.pause_group("tenant-42", 3600)  # doctest: +SKIP
        """
        backend = self._grouping()
        group = check_group(group)
        until = None if seconds is None else check_positive("pause seconds", seconds)
        await backend.pause_group(self.name, group, until)

    async def groups(self) -> GroupReport:
        """Every group with live items or settings of its own: weights, limits, pauses and counts.

        >>> [(g.group, g.ready, g.in_flight) for g in (await pool.groups()).groups]  # doctest: +SKIP
        [(None, 3, 0), ('tenant-42', 5, 2)]
        """
        return await self._grouping().group_report(self.name)

    async def release_by_worker(self, worker_id: str, *, spend_attempt: bool = True) -> int:
        """Release every item ``worker_id`` holds in this pool; returns the count."""
        return await self._backend.release_by_worker(self.name, worker_id, spend_attempt)

    async def purge(self, older_than: float) -> int:
        """Delete done, poisoned and cancelled items finished more than ``older_than`` seconds ago."""
        return await self._backend.purge(self.name, check_nonnegative("older_than", older_than))

    async def wait_for_work(self, timeout: float) -> None:
        """Return when work may have arrived (backends with ``notify``) or after ``timeout`` seconds."""
        await self._backend.wait_for_work(self.name, check_nonnegative("timeout", timeout))
