"""``MemoryStorage``: the whole storage contract in one process's memory.

For tests, notebooks and single-process fleets. Claim, complete and push are
O(log n) (see ``items.py``); ``memory://name`` shares one store between every
Hive of the process that opens that name, ``memory://`` is private.

>>> import asyncio, workhive
>>> async def main():
...     async with workhive.open("memory://") as hive:
...         pool = hive.pool("jobs")
...         await pool.push({"n": 1})
...         item = await pool.claim(worker_id="w1")
...         await pool.complete(item, "ok")
...         return (await pool.get(item.id)).result
>>> asyncio.run(main())
'ok'
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Callable, Sequence

import attrs

from workhive.errors import ConfigError
from workhive.models import (
    Ack,
    GroupReport,
    GroupStats,
    ItemState,
    NewItem,
    PoolStats,
    ReapedWorker,
    StepRecord,
    WorkerFilter,
    WorkerRecord,
    WorkerRegistration,
    WorkerStatus,
    WorkItem,
)
from workhive.schedules import Schedule
from workhive_memory.budget import MemoryBudgets
from workhive_memory.failures import lost_worker, missing_hive, unknown_worker
from workhive_memory.items import CANCELLED, CLAIMED, DONE, PENDING, POISONED, ItemRecord, PoolIndex
from workhive_memory.schedules import MemorySchedules
from workhive_memory.url import parse_url

__all__ = ["MemoryStorage"]

_FINISHED = frozenset({WorkerStatus.LOST, WorkerStatus.STOPPED})


class _Store:
    """Everything a memory backend holds; shared by name between ``MemoryStorage`` objects."""

    def __init__(self) -> None:
        self.pools: dict[str, PoolIndex] = {}
        self.seq = 0
        self.workers: dict[str, WorkerRecord] = {}
        # worker id -> records it holds (in any pool), for heartbeat and reap.
        self.held: dict[str, dict[ItemRecord, None]] = {}
        self.state: dict[str, dict[str, tuple[str, float | None]]] = {}
        self.waiters: dict[str, list[asyncio.Future[None]]] = {}
        self.budget_tats: dict[str, float] = {}
        self.schedules: dict[str, Schedule] = {}
        # (pool, item id) -> step key -> its record, in store order (dicts keep insertion order)
        self.steps: dict[tuple[str, str], dict[str, StepRecord]] = {}


_named: dict[str, _Store] = {}


class MemoryStorage(MemoryBudgets, MemorySchedules):
    """A ``StorageBackend`` in process memory.

    ``clock`` (default ``time.time``) is the backend's clock; tests inject a
    ``workhive.testing.ManualClock`` to move time by hand. Hives sharing a
    named store should share a clock too. ``create=False`` opens only a named
    store this process already made, else raises ``HiveNotFound``.

    >>> backend = MemoryStorage("memory://")
    >>> "notify" in backend.capabilities
    True
    """

    capabilities: frozenset[str] = frozenset({"notify"})

    def __init__(
        self, url: str = "memory://", *, clock: Callable[[], float] | None = None, create: bool = True
    ) -> None:
        name = parse_url(url)
        if clock is not None and not callable(clock):
            raise ConfigError(f"clock must be a callable returning seconds, got {clock!r}")
        if not create and (name is None or name not in _named):
            # Nothing is made: a reader (create=False) never leaves an empty store behind.
            raise missing_hive(url, name)
        self.url = url
        self.name = name
        self._clock: Callable[[], float] = clock if clock is not None else time.time
        if name is None:
            self._store = _Store()
        else:
            self._store = _named.get(name) or _named.setdefault(name, _Store())
        # Shortcuts for the hot path (the store's dicts are never replaced).
        self._pools = self._store.pools
        self._held = self._store.held
        self._budget_tats = self._store.budget_tats
        self._schedules = self._store.schedules

    def __repr__(self) -> str:
        return f"<MemoryStorage {self.url!r}>"

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        # Nothing to flush; wake anyone waiting so a closing fleet is not stuck.
        for pool in list(self._store.waiters):
            self._wake(pool)

    async def now(self) -> float:
        return self._clock()

    # -- helpers ------------------------------------------------------------
    def _pool(self, pool: str) -> PoolIndex:
        index = self._store.pools.get(pool)
        if index is None:
            index = self._store.pools[pool] = PoolIndex(pool)
        return index

    def _advance(self, index: PoolIndex, now: float) -> None:
        for rec, worker_id in index.advance(now):
            self._drop_held(rec, worker_id)

    def _drop_held(self, rec: ItemRecord, worker_id: str | None) -> None:
        held = self._store.held.get(worker_id) if worker_id is not None else None
        if held is not None:
            held.pop(rec, None)

    def _valid_claim(self, index: PoolIndex, item_id: str, token: int, now: float) -> ItemRecord | None:
        rec = index.items.get(item_id)
        if rec is None or rec.state is not CLAIMED or rec.token != token:
            return None
        if rec.lease_expires_at is None or rec.lease_expires_at <= now:
            return None
        return rec

    def _wake(self, pool: str) -> None:
        waiters = self._store.waiters.pop(pool, None)
        for fut in waiters or ():
            if not fut.done():
                fut.set_result(None)

    # -- items --------------------------------------------------------------
    async def push(self, pool: str, items: Sequence[NewItem]) -> list[str]:
        index = self._pool(pool)
        store = self._store
        now = self._clock()
        ids: list[str] = []
        append_id = ids.append
        all_items = index.items
        pending = index.pending
        dedup = index.dedup
        ready_add = index.ready.add if index.groups is None else index.groups.add_ready
        seq = store.seq
        for new in items:
            if new.group is not None and index.groups is None:
                ready_add = index.grouping().add_ready  # the pool's first group: turns from now on
            key = new.dedup_key
            if key is not None:
                existing = dedup.get(key)
                if existing is not None:
                    append_id(existing.id)
                    continue
            seq += 1
            item_id = f"i{seq:016x}"  # workhive.ids shape, inlined on the push path
            rec = ItemRecord(item_id, pool, seq, new, now)
            all_items[item_id] = pending[item_id] = rec
            if new.delay == 0:
                ready_add(rec, now)
            else:
                index.make_pending(rec, rec.available_at, now)
            if key is not None:
                dedup[key] = rec
            append_id(item_id)
        store.seq = seq
        if store.waiters.get(pool):
            self._wake(pool)
        return ids

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        index = self._pools.get(pool)
        if index is None:
            return []
        now = self._clock()
        if (index.delayed and index.delayed[0][0] <= now) or (index.leases and index.leases[0][0] <= now):
            self._advance(index, now)
        groups = index.groups
        if groups is None:
            ready = index.ready
            if not ready.size:
                return []
            pop = ready.pop
        else:  # turns, weights, limits and pauses (GR2-GR8): workhive_memory.groups
            groups.now = now
            if groups.pauses:
                groups.prepare(now)
            pop = groups.pop
        held = self._held.get(worker_id)
        if held is None:
            held = self._held[worker_id] = {}
        pending = index.pending
        claimed = index.claimed
        expires = now + lease
        leases = index.leases
        out: list[WorkItem] = []
        while len(out) < limit:
            rec = pop()
            if rec is None:
                break
            if rec.state is not PENDING:  # defensive: ready entries are never left stale
                continue
            item_id = rec.id
            del pending[item_id]
            claimed[item_id] = rec
            rec.state = CLAIMED
            rec.claimed_by = worker_id
            rec.attempts += 1
            token = rec.token = rec.token + 1
            rec.lease_seconds = lease
            rec.lease_expires_at = expires
            index.lease_counter += 1
            heapq.heappush(leases, (expires, index.lease_counter, token, rec))
            held[rec] = None
            out.append(
                WorkItem(
                    item_id,
                    pool,
                    rec.payload,
                    CLAIMED,
                    rec.priority,
                    rec.attempts,
                    rec.max_attempts,
                    token,
                    rec.created_at,
                    rec.available_at,
                    worker_id,
                    expires,
                    lease,
                    rec.dedup_key,
                    rec.error,
                    None,
                    None,
                    rec.releases,
                    rec.group,
                )
            )
        if len(leases) > index.compact_at:
            index.compact_leases()
        return out

    async def complete(self, pool: str, acks: Sequence[Ack]) -> list[bool]:
        index = self._pools.get(pool)
        if index is None:
            return [False] * len(acks)
        now = self._clock()
        items = index.items
        held = self._held
        claimed = index.claimed
        done = index.done
        dedup = index.dedup
        groups = index.groups
        by_group = None if groups is None else groups.groups
        out: list[bool] = []
        for ack in acks:
            rec = items.get(ack.item_id)
            if (
                rec is None or rec.state is not CLAIMED or rec.token != ack.token or rec.lease_expires_at <= now  # type: ignore[operator]
            ):
                out.append(False)
                continue
            # Inlined PoolIndex.finish(rec, DONE, now): this is the hottest path.
            rec.result_payload = ack.result
            worker = held.get(rec.claimed_by)  # type: ignore[arg-type]
            if worker is not None:
                worker.pop(rec, None)
            if by_group is not None:  # its slot is free (GR6, GR7): GroupIndex.unheld, inlined
                state = by_group[rec.group]
                state.in_flight -= 1
                groups.in_flight -= 1  # type: ignore[union-attr]
                if not state.queued:
                    groups.offer(state)  # type: ignore[union-attr]
            del claimed[rec.id]
            done[rec.id] = rec
            rec.state = DONE
            rec.finished_at = now
            rec.lease_expires_at = None
            rec.lease_seconds = None
            if rec.dedup_key is not None and dedup.get(rec.dedup_key) is rec:
                del dedup[rec.dedup_key]
            out.append(True)
        if groups is not None and self._store.waiters.get(pool):
            self._wake(pool)  # a freed slot may let a waiting worker claim
        return out

    async def complete_and_claim(
        self, pool: str, ack: Ack, worker_id: str, limit: int, lease: float
    ) -> tuple[bool, list[WorkItem]]:
        # Neither coroutine awaits anything, so no other task runs between the
        # two: the pair is as atomic as each call on its own.
        if not (await self.complete(pool, (ack,)))[0]:
            return False, []
        return True, await self.claim(pool, worker_id, limit, lease)

    async def fail(
        self, pool: str, item_id: str, token: int, error: str, retry_in: float, poison: bool
    ) -> ItemState | None:
        index = self._store.pools.get(pool)
        now = self._clock()
        rec = None if index is None else self._valid_claim(index, item_id, token, now)
        if index is None or rec is None:
            return None
        rec.error = error
        self._drop_held(rec, rec.claimed_by)
        if poison or rec.attempts >= rec.max_attempts:
            index.finish(rec, POISONED, now)
            return POISONED
        index.unclaim(rec, now + retry_in, now)
        return PENDING

    async def release(self, pool: str, item_id: str, token: int, delay: float) -> bool:
        index = self._store.pools.get(pool)
        now = self._clock()
        rec = None if index is None else self._valid_claim(index, item_id, token, now)
        if index is None or rec is None:
            return False
        self._drop_held(rec, rec.claimed_by)
        rec.attempts -= 1
        rec.releases += 1
        index.unclaim(rec, now + delay, now)
        if delay == 0 and self._store.waiters.get(pool):
            self._wake(pool)
        return True

    async def extend(self, pool: str, item_id: str, token: int, lease: float) -> float | None:
        index = self._store.pools.get(pool)
        now = self._clock()
        rec = None if index is None else self._valid_claim(index, item_id, token, now)
        if index is None or rec is None:
            return None
        rec.lease_seconds = lease
        rec.lease_expires_at = now + lease
        index.track_lease(rec)
        return rec.lease_expires_at

    async def get(self, pool: str, item_id: str) -> WorkItem | None:
        index = self._store.pools.get(pool)
        rec = None if index is None else index.items.get(item_id)
        return None if rec is None else rec.snapshot()

    async def list_items(self, pool: str, state: ItemState, limit: int, offset: int = 0) -> list[WorkItem]:
        index = self._store.pools.get(pool)
        if index is None:
            return []
        self._advance(index, self._clock())
        records = sorted(index.in_state(state), key=lambda r: r.seq)
        return [r.snapshot() for r in records[offset : offset + limit]]

    async def requeue(self, pool: str, item_ids: Sequence[str] | None) -> int:
        index = self._store.pools.get(pool)
        if index is None:
            return 0
        now = self._clock()
        poisoned = index.by_state[POISONED]
        cancelled = index.by_state[CANCELLED]
        if item_ids is None:
            chosen = sorted(poisoned.values(), key=lambda r: r.seq)
        else:  # cancelled items come back by id only (rule Z3)
            chosen = [
                poisoned[i] if i in poisoned else cancelled[i]
                for i in dict.fromkeys(item_ids)
                if i in poisoned or i in cancelled
            ]
        for rec in chosen:
            index.move(rec, PENDING)
            rec.attempts = 0
            rec.finished_at = None
            rec.claimed_by = None
            if rec.dedup_key is not None:
                index.dedup.setdefault(rec.dedup_key, rec)
            index.make_pending(rec, now, now)
        if chosen and self._store.waiters.get(pool):
            self._wake(pool)
        return len(chosen)

    async def cancel(self, pool: str, item_ids: Sequence[str]) -> list[ItemState | None]:
        # Rules Z1-Z3. Expired leases are settled first (allowed by Z1): a spent one reads POISONED.
        index = self._store.pools.get(pool)
        if index is None:
            return [None] * len(item_ids)
        now = self._clock()
        self._advance(index, now)
        out: list[ItemState | None] = []
        for item_id in item_ids:
            rec = index.items.get(item_id)
            if rec is None:
                out.append(None)
                continue
            out.append(rec.state)
            if rec.state is PENDING:
                index.withdraw(rec)
            elif rec.state is CLAIMED:
                self._drop_held(rec, rec.claimed_by)
            else:
                continue
            index.finish(rec, CANCELLED, now)  # the claim's token and holder stay, as on DONE
        return out

    async def release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> int:
        return sum(self._release_worker(pool, worker_id, spend_attempt))

    def _release_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> tuple[int, int]:
        """Give back what ``worker_id`` holds; returns (released, poisoned)."""
        store = self._store
        held = store.held.get(worker_id)
        if not held:
            return 0, 0
        now = self._clock()
        released = poisoned = 0
        woken: set[str] = set()
        for rec in list(held):
            if pool is not None and rec.pool != pool:
                continue
            del held[rec]
            if rec.state is not CLAIMED or rec.claimed_by != worker_id:
                continue
            index = store.pools[rec.pool]
            if not spend_attempt:
                rec.attempts -= 1
                rec.releases += 1
            if spend_attempt and rec.attempts >= rec.max_attempts:
                rec.error = f"worker {worker_id} was lost holding it on attempt {rec.attempts} of {rec.max_attempts}"
                index.finish(rec, POISONED, now)
                poisoned += 1
            else:
                index.unclaim(rec, now, now)
                released += 1
                woken.add(rec.pool)
        for name in woken:
            if store.waiters.get(name):
                self._wake(name)
        return released, poisoned

    async def purge(self, pool: str, older_than: float) -> int:
        index = self._store.pools.get(pool)
        if index is None:
            return 0
        cutoff = self._clock() - older_than
        removed = 0
        for state in (DONE, POISONED, CANCELLED):
            finished = index.by_state[state]
            # Insertion order is finishing order: stop at the first one too young.
            old = []
            for item_id, rec in finished.items():
                if rec.finished_at is not None and rec.finished_at >= cutoff:
                    break
                old.append(item_id)
            for item_id in old:
                del finished[item_id]
                del index.items[item_id]
                self._store.steps.pop((pool, item_id), None)  # steps go with their item (ST5)
            removed += len(old)
        return removed

    # -- durable steps (KeepsSteps, rules ST1-ST5) --------------------------
    async def step_put(self, pool: str, item_id: str, token: int, key: str, payload: str, failed: bool) -> bool:
        index = self._store.pools.get(pool)
        now = self._clock()
        if index is None or self._valid_claim(index, item_id, token, now) is None:
            return False
        steps = self._store.steps.setdefault((pool, item_id), {})
        steps.setdefault(key, StepRecord(key, payload, failed, token, now))  # the first value stays
        return True

    async def step_list(self, pool: str, item_id: str) -> list[StepRecord]:
        return list(self._store.steps.get((pool, item_id), {}).values())

    async def step_clear(self, pool: str, item_ids: Sequence[str]) -> int:
        index = self._store.pools.get(pool)
        if index is None:
            return 0
        removed = 0
        for item_id in dict.fromkeys(item_ids):
            rec = index.items.get(item_id)
            if rec is not None and rec.state not in (PENDING, CLAIMED):
                removed += len(self._store.steps.pop((pool, item_id), {}))
        return removed

    async def stats(self, pool: str) -> PoolStats:
        index = self._store.pools.get(pool)
        if index is None:
            return PoolStats(pool, 0, 0, 0, 0, 0, None)
        now = self._clock()
        self._advance(index, now)
        by_state = index.by_state
        delayed = len(index.delayed)
        return PoolStats(
            pool,
            pending=len(by_state[PENDING]) - delayed,
            delayed=delayed,
            claimed=len(by_state[CLAIMED]),
            done=len(by_state[DONE]),
            poisoned=len(by_state[POISONED]),
            oldest_pending_at=index.oldest_pending_at(),
            cancelled=len(by_state[CANCELLED]),
        )

    # -- groups (ServesGroups, rules GR1-GR9; the turns are in groups.py) --------
    async def set_group_weight(self, pool: str, group: str, weight: float) -> None:
        self._pool(pool).grouping().set_weight(group, weight)

    async def set_group_limit(self, pool: str, group: str | None, limit: int | None) -> None:
        index = self._pool(pool)
        self._advance(index, self._clock())  # expired claims hold no slot
        index.grouping().set_limit(group, limit)
        if self._store.waiters.get(pool):
            self._wake(pool)

    async def set_pool_limit(self, pool: str, limit: int | None) -> None:
        index = self._pool(pool)
        index.grouping().pool_limit = limit
        if self._store.waiters.get(pool):
            self._wake(pool)

    async def pause_group(self, pool: str, group: str, seconds: float | None) -> None:
        index = self._pool(pool)
        index.grouping().pause(group, None if seconds is None else self._clock() + seconds)
        if seconds is None and self._store.waiters.get(pool):
            self._wake(pool)

    async def group_report(self, pool: str) -> GroupReport:
        index = self._store.pools.get(pool)
        if index is None:
            return GroupReport(pool, None, None, ())
        now = self._clock()
        self._advance(index, now)  # expired claims are ready (or poisoned), never in flight
        groups = index.groups
        counts: dict[str | None, list[int]] = {}  # group -> [in flight, ready, waiting]
        for rec in index.claimed.values():
            counts.setdefault(rec.group, [0, 0, 0])[0] += 1
        for rec in index.pending.values():
            counts.setdefault(rec.group, [0, 0, 0])[1 if rec.available_at <= now else 2] += 1
        if groups is None:  # only ungrouped items, no settings
            ungrouped = tuple(GroupStats(None, 1.0, None, c[0], c[1], c[2]) for c in counts.values())
            return GroupReport(pool, None, None, ungrouped)
        names = set(counts) | {name for name, state in groups.groups.items() if groups.has_settings(state, now)}
        shown = []
        for name in sorted(names, key=lambda n: (n is not None, n or "")):
            state = groups.groups.get(name)
            weight, limit, paused = 1.0, None, None
            if state is not None:
                weight = 1.0 if state.weight is None else state.weight
                limit = state.limit
                paused = state.paused_until if state.paused_until is not None and state.paused_until > now else None
            flying, ready, waiting = counts.get(name, (0, 0, 0))
            shown.append(GroupStats(name, weight, limit, flying, ready, waiting, paused))
        return GroupReport(pool, groups.pool_limit, groups.default_limit, tuple(shown))

    async def pools(self) -> list[str]:
        return sorted(name for name, index in self._store.pools.items() if index.items)

    async def wait_for_work(self, pool: str, timeout: float) -> None:
        index = self._store.pools.get(pool)
        now = self._clock()
        if index is not None:
            if index.ready.size if index.groups is None else index.groups.has_ready(now):
                return
            soon = index.claimable_soon()
            if soon is not None:
                # Delayed items and expiring leases are not pushed; wake for them too.
                timeout = min(timeout, max(0.0, soon - now))
        if timeout <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._store.waiters.setdefault(pool, [])
        waiters.append(fut)
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(fut, timeout)
        finally:
            current = self._store.waiters.get(pool)
            if current is not None and fut in current:
                current.remove(fut)

    # -- workers ------------------------------------------------------------
    async def register_worker(self, registration: WorkerRegistration) -> WorkerRecord:
        now = self._clock()
        record = WorkerRecord(
            worker_id=registration.worker_id,
            host=registration.host,
            pid=registration.pid,
            pools=tuple(registration.pools),
            capabilities=tuple(registration.capabilities),
            status=WorkerStatus.STARTING,
            registered_at=now,
            last_heartbeat=now,
        )
        # Re-registering moves the worker to the end of the registration order.
        self._store.workers.pop(registration.worker_id, None)
        self._store.workers[registration.worker_id] = record
        return record

    def _worker(self, worker_id: str) -> WorkerRecord:
        record = self._store.workers.get(worker_id)
        if record is None:
            raise unknown_worker(worker_id)
        return record

    async def heartbeat(self, worker_id: str) -> WorkerRecord:
        record = self._worker(worker_id)
        if record.status is WorkerStatus.LOST:
            raise lost_worker(worker_id, record.last_heartbeat)
        now = self._clock()
        record = self._store.workers[worker_id] = attrs.evolve(record, last_heartbeat=now)
        for rec in self._store.held.get(worker_id, {}):
            if rec.state is CLAIMED and rec.claimed_by == worker_id and rec.lease_expires_at > now:  # type: ignore[operator]
                rec.lease_expires_at = now + rec.lease_seconds  # type: ignore[operator]
                self._store.pools[rec.pool].track_lease(rec)
        return record

    async def set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None:
        record = self._worker(worker_id)
        self._store.workers[worker_id] = attrs.evolve(record, status=status, detail=detail)

    async def get_worker(self, worker_id: str) -> WorkerRecord | None:
        return self._store.workers.get(worker_id)

    async def list_workers(self, filter: WorkerFilter) -> list[WorkerRecord]:
        now = self._clock()
        records = [r for r in self._store.workers.values() if filter.matches(r, now)]
        return sorted(records, key=lambda r: r.registered_at)  # stable: ties keep registration order

    async def reap(self, threshold: float) -> list[ReapedWorker]:
        now = self._clock()
        reaped: list[ReapedWorker] = []
        for worker_id, record in list(self._store.workers.items()):
            if record.status in _FINISHED or now - record.last_heartbeat <= threshold:
                continue
            self._store.workers[worker_id] = attrs.evolve(record, status=WorkerStatus.LOST)
            released, poisoned = self._release_worker(None, worker_id, True)
            reaped.append(ReapedWorker(worker_id, record.last_heartbeat, released, poisoned))
        return reaped

    # -- shared state -------------------------------------------------------
    def _live(self, namespace: str) -> dict[str, tuple[str, float | None]]:
        area = self._store.state.get(namespace)
        if not area:
            return {}
        now = self._clock()
        for key in [k for k, (_, exp) in area.items() if exp is not None and exp <= now]:
            del area[key]
        return area

    async def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        expires = None if ttl is None else self._clock() + ttl
        self._store.state.setdefault(namespace, {})[key] = (value, expires)

    async def state_get(self, namespace: str, key: str) -> str | None:
        entry = self._live(namespace).get(key)
        return None if entry is None else entry[0]

    async def state_scan(self, namespace: str) -> dict[str, str]:
        return {k: v for k, (v, _) in self._live(namespace).items()}

    async def state_delete(self, namespace: str, key: str) -> bool:
        return self._live(namespace).pop(key, None) is not None
