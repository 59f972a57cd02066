"""``ListStorage``: the storage contract with the simplest data structures that work.

Every item is a row in one list, and every operation scans it: O(n) per call,
fine for a teaching example and for a few thousand items, not for a fleet
(use workhive-memory for speed, workhive-sqlite for durability). What matters
here is the semantics, which ``workhive.testing.StorageContract`` checks.

Nothing in a method awaits between reading and writing, so concurrent asyncio
tasks cannot claim the same item (the atomicity the contract requires).

Groups (the optional ``workhive.ServesGroups``, rules GR1-GR9) are served by
start-time fair queuing, again by scanning: each claim looks at every group's
oldest ready item. An engine for many tenants keeps a heap of ready groups
instead (workhive-memory does).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Callable, Sequence

from workhive import (
    Ack,
    ConfigError,
    GroupReport,
    GroupStats,
    HiveNotFound,
    ItemState,
    NewItem,
    PoolStats,
    ReapedWorker,
    Schedule,
    StepRecord,
    WorkerFilter,
    WorkerLost,
    WorkerNotFound,
    WorkerRecord,
    WorkerRegistration,
    WorkerStatus,
    WorkItem,
    redact_url,
)
from workhive.ids import item_id

__all__ = ["ListStorage"]


@dataclasses.dataclass
class _Row:
    """One item, mutable; ``WorkItem`` snapshots are made from it for callers."""

    id: str
    pool: str
    seq: int
    payload: str
    priority: int
    max_attempts: int
    dedup_key: str | None
    created_at: float
    available_at: float
    state: ItemState = ItemState.PENDING
    attempts: int = 0
    token: int = 0
    claimed_by: str | None = None
    lease_expires_at: float | None = None
    lease_seconds: float | None = None
    error: str | None = None
    result_payload: str | None = None
    finished_at: float | None = None
    releases: int = 0
    group: str | None = None
    #: durable steps (ctx.step), in store order; they live and die with the row (purge)
    steps: list[StepRecord] = dataclasses.field(default_factory=list)

    def snapshot(self) -> WorkItem:
        fields = dataclasses.asdict(self)
        del fields["seq"], fields["steps"]
        return WorkItem(**fields)

    def to_pending(self, available_at: float) -> None:
        self.state = ItemState.PENDING
        self.available_at = available_at
        self.claimed_by = self.lease_expires_at = self.lease_seconds = None

    def to_finished(self, state: ItemState, now: float) -> None:
        self.state = state
        self.finished_at = now
        self.lease_expires_at = self.lease_seconds = None


@dataclasses.dataclass
class _Groups:
    """One pool's group settings and turns (GR2-GR9)."""

    weights: dict[str, float] = dataclasses.field(default_factory=dict)
    limits: dict[str, int] = dataclasses.field(default_factory=dict)
    default_limit: int | None = None
    pool_limit: int | None = None
    paused_until: dict[str, float] = dataclasses.field(default_factory=dict)
    #: each group's finish tag: where its next turn starts, unless the pool has moved past it
    finish: dict[str | None, float] = dataclasses.field(default_factory=dict)
    #: the start tag of the last turn served: a group that idled starts its next turn here (no banked credit)
    turn: float = 0.0

    def limit_of(self, group: str | None) -> int | None:
        if group is None:
            return None  # ungrouped items are bound by the pool limit alone
        return self.limits.get(group, self.default_limit)

    def start(self, group: str | None) -> float:
        return max(self.finish.get(group, 0.0), self.turn)

    def serve(self, group: str | None) -> None:
        start = self.start(group)
        weight = 1.0 if group is None else self.weights.get(group, 1.0)
        self.finish[group] = start + 1.0 / weight
        self.turn = start


@dataclasses.dataclass
class _Tables:
    """Everything one store holds; ``list://NAME`` shares it between backends of the process."""

    rows: list[_Row] = dataclasses.field(default_factory=list)
    seq: int = 0
    workers: list[WorkerRecord] = dataclasses.field(default_factory=list)
    state: dict[tuple[str, str], tuple[str, float | None]] = dataclasses.field(default_factory=dict)
    schedules: list[Schedule] = dataclasses.field(default_factory=list)
    groups: dict[str, _Groups] = dataclasses.field(default_factory=dict)


_URL = re.compile(r"list://([A-Za-z0-9][A-Za-z0-9._\-]{0,199})?")
_named: dict[str, _Tables] = {}


class ListStorage:
    """A ``workhive.StorageBackend`` over plain lists; ``clock`` lets tests move time.

    >>> import asyncio, workhive
    >>> async def main():
    ...     async with workhive.Hive(ListStorage("list://")) as hive:
    ...         await hive.pool("jobs").push("hello")
    ...         return (await hive.pool("jobs").claim("me")).data
    >>> asyncio.run(main())
    'hello'
    """

    capabilities: frozenset[str] = frozenset()  # no "notify": wait_for_work just sleeps

    def __init__(self, url: str = "list://", *, clock: Callable[[], float] | None = None, create: bool = True) -> None:
        match = _URL.fullmatch(url) if isinstance(url, str) else None
        if match is None:
            # Shown through redact_url: a URL mistyped with user:password@ in it must not be echoed.
            shown = redact_url(url)
            raise ConfigError(
                f"list storage URL {shown!r} is malformed: use list:// (private) or list://NAME (shared "
                "in-process); it takes no ?options",
                url=shown,
            )
        name = match.group(1)
        if not create and (name is None or name not in _named):
            # The agreed factory option: a reader opens an existing hive or fails, and creates nothing.
            raise HiveNotFound(f"no list hive {url!r} exists in this process; push to it first", url=url)
        self._clock = clock or time.time
        tables = _Tables() if name is None else _named.setdefault(name, _Tables())
        self._t = tables

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def now(self) -> float:
        return self._clock()

    # -- helpers ------------------------------------------------------------
    def _find(self, pool: str, item_id: str) -> _Row | None:
        return next((r for r in self._t.rows if r.pool == pool and r.id == item_id), None)

    def _held(self, pool: str, item_id: str, token: int, now: float) -> _Row | None:
        """The row if this claim is still live: CLAIMED, same token, lease not expired."""
        row = self._find(pool, item_id)
        if row is None or row.state is not ItemState.CLAIMED or row.token != token:
            return None
        return row if row.lease_expires_at is not None and row.lease_expires_at > now else None

    def _settle_expired(self, pool: str, now: float) -> None:
        """Expired leases: back to PENDING (available at expiry), or POISONED when attempts are spent."""
        for row in self._t.rows:
            if row.pool != pool or row.state is not ItemState.CLAIMED:
                continue
            if row.lease_expires_at is None or row.lease_expires_at > now:
                continue
            if row.attempts >= row.max_attempts:
                row.error = f"lease expired on attempt {row.attempts} of {row.max_attempts}"
                row.to_finished(ItemState.POISONED, now)
            else:
                row.to_pending(row.lease_expires_at)

    # -- items --------------------------------------------------------------
    async def push(self, pool: str, items: Sequence[NewItem]) -> list[str]:
        now = self._clock()
        ids: list[str] = []
        for new in items:
            live = None
            if new.dedup_key is not None:
                live = next(
                    (
                        r
                        for r in self._t.rows
                        if r.pool == pool
                        and r.dedup_key == new.dedup_key
                        and r.state in (ItemState.PENDING, ItemState.CLAIMED)
                    ),
                    None,
                )
            if live is not None:
                ids.append(live.id)
                continue
            self._t.seq += 1
            row = _Row(
                id=item_id(self._t.seq),
                pool=pool,
                seq=self._t.seq,
                payload=new.payload,
                priority=new.priority,
                max_attempts=new.max_attempts,
                dedup_key=new.dedup_key,
                created_at=now,
                available_at=now + new.delay,
                group=new.group,
            )
            self._t.rows.append(row)
            ids.append(row.id)
        return ids

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        now = self._clock()
        self._settle_expired(pool, now)
        ready = [r for r in self._t.rows if r.pool == pool and r.state is ItemState.PENDING and r.available_at <= now]
        ready.sort(key=lambda r: (-r.priority, r.available_at, r.seq))
        groups = self._groups(pool)
        claimed = []
        for _ in range(limit):  # a batch takes its items as that many one-item claims would (GR2)
            row = self._next_in_turn(pool, groups, ready, now)
            if row is None:
                break
            ready.remove(row)
            groups.serve(row.group)
            row.state = ItemState.CLAIMED
            row.claimed_by = worker_id
            row.attempts += 1
            row.token += 1
            row.lease_seconds = lease
            row.lease_expires_at = now + lease
            claimed.append(row.snapshot())
        return claimed

    def _next_in_turn(self, pool: str, groups: _Groups, ready: list[_Row], now: float) -> _Row | None:
        """The oldest ready item of the group whose turn it is, among those under their limits and not paused."""
        in_flight: dict[str | None, int] = {}
        for r in self._t.rows:  # expired claims were settled by the caller: every CLAIMED row holds a slot
            if r.pool == pool and r.state is ItemState.CLAIMED:
                in_flight[r.group] = in_flight.get(r.group, 0) + 1
        if groups.pool_limit is not None and sum(in_flight.values()) >= groups.pool_limit:
            return None
        heads: dict[str | None, _Row] = {}
        for row in ready:  # in claim order (C1), so the first row of each group is its oldest
            heads.setdefault(row.group, row)

        def servable_now(group: str | None) -> bool:
            if group is not None and groups.paused_until.get(group, now) > now:
                return False
            limit = groups.limit_of(group)
            return limit is None or in_flight.get(group, 0) < limit

        servable = [row for group, row in heads.items() if servable_now(group)]
        if not servable:
            return None
        top = max(row.priority for row in servable)  # priority first (GR5), then the turns (GR2-GR4)
        return min(
            (row for row in servable if row.priority == top),
            key=lambda row: (groups.start(row.group), row.group or ""),
        )

    async def complete(self, pool: str, acks: Sequence[Ack]) -> list[bool]:
        now = self._clock()
        accepted = []
        for ack in acks:
            row = self._held(pool, ack.item_id, ack.token, now)
            if row is not None:
                row.result_payload = ack.result
                row.to_finished(ItemState.DONE, now)
            accepted.append(row is not None)
        return accepted

    async def fail(
        self, pool: str, item_id: str, token: int, error: str, retry_in: float, poison: bool
    ) -> ItemState | None:
        now = self._clock()
        row = self._held(pool, item_id, token, now)
        if row is None:
            return None
        row.error = error
        if poison or row.attempts >= row.max_attempts:
            row.to_finished(ItemState.POISONED, now)
        else:
            row.to_pending(now + retry_in)
        return row.state

    async def release(self, pool: str, item_id: str, token: int, delay: float) -> bool:
        now = self._clock()
        row = self._held(pool, item_id, token, now)
        if row is None:
            return False
        row.attempts -= 1
        row.releases += 1
        row.to_pending(now + delay)
        return True

    async def extend(self, pool: str, item_id: str, token: int, lease: float) -> float | None:
        now = self._clock()
        row = self._held(pool, item_id, token, now)
        if row is None:
            return None
        row.lease_seconds = lease
        row.lease_expires_at = now + lease
        return row.lease_expires_at

    async def get(self, pool: str, item_id: str) -> WorkItem | None:
        row = self._find(pool, item_id)
        return None if row is None else row.snapshot()

    async def list_items(self, pool: str, state: ItemState, limit: int, offset: int = 0) -> list[WorkItem]:
        rows = [r for r in self._t.rows if r.pool == pool and r.state is state]
        return [r.snapshot() for r in rows[offset : offset + limit]]

    async def requeue(self, pool: str, item_ids: Sequence[str] | None) -> int:
        now = self._clock()
        count = 0
        for row in self._t.rows:
            if row.pool != pool:
                continue
            # Poisoned items by id or all; cancelled ones by id only (rule Z3).
            if (row.state is ItemState.POISONED and (item_ids is None or row.id in item_ids)) or (
                row.state is ItemState.CANCELLED and item_ids is not None and row.id in item_ids
            ):
                row.to_pending(now)
                row.attempts = 0
                row.finished_at = None
                count += 1
        return count

    async def release_by_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> int:
        released, poisoned = self._release_worker(pool, worker_id, spend_attempt)
        return released + poisoned

    def _release_worker(self, pool: str | None, worker_id: str, spend_attempt: bool) -> tuple[int, int]:
        now = self._clock()
        released = poisoned = 0
        for row in self._t.rows:
            if row.state is not ItemState.CLAIMED or row.claimed_by != worker_id:
                continue
            if pool is not None and row.pool != pool:
                continue
            if not spend_attempt:
                row.attempts -= 1
                row.releases += 1
            if spend_attempt and row.attempts >= row.max_attempts:
                row.error = f"worker {worker_id} was lost holding it on its last attempt"
                row.to_finished(ItemState.POISONED, now)
                poisoned += 1
            else:
                row.to_pending(now)
                released += 1
        return released, poisoned

    async def purge(self, pool: str, older_than: float) -> int:
        cutoff = self._clock() - older_than
        keep = [
            r
            for r in self._t.rows
            if not (
                r.pool == pool
                and r.state in (ItemState.DONE, ItemState.POISONED, ItemState.CANCELLED)
                and r.finished_at is not None
                and r.finished_at < cutoff
            )
        ]
        removed = len(self._t.rows) - len(keep)
        self._t.rows = keep
        return removed

    # -- durable steps: the optional KeepsSteps capability (rules ST1-ST5) ------
    async def step_put(self, pool: str, item_id: str, token: int, key: str, payload: str, failed: bool) -> bool:
        now = self._clock()
        row = self._held(pool, item_id, token, now)  # the same fence as complete/fail/extend
        if row is None:
            return False
        if all(step.key != key for step in row.steps):  # a key stored already keeps its first value
            row.steps.append(StepRecord(key, payload, failed, token, now))
        return True

    async def step_list(self, pool: str, item_id: str) -> list[StepRecord]:
        row = self._find(pool, item_id)
        return [] if row is None else list(row.steps)

    async def step_clear(self, pool: str, item_ids: Sequence[str]) -> int:
        removed = 0
        for wanted in dict.fromkeys(item_ids):
            row = self._find(pool, wanted)
            if row is not None and row.state not in (ItemState.PENDING, ItemState.CLAIMED):
                removed += len(row.steps)
                row.steps = []
        return removed

    async def stats(self, pool: str) -> PoolStats:
        now = self._clock()
        self._settle_expired(pool, now)
        rows = [r for r in self._t.rows if r.pool == pool]
        ready = [r for r in rows if r.state is ItemState.PENDING and r.available_at <= now]
        return PoolStats(
            pool,
            pending=len(ready),
            delayed=sum(1 for r in rows if r.state is ItemState.PENDING and r.available_at > now),
            claimed=sum(1 for r in rows if r.state is ItemState.CLAIMED),
            done=sum(1 for r in rows if r.state is ItemState.DONE),
            poisoned=sum(1 for r in rows if r.state is ItemState.POISONED),
            oldest_pending_at=min((r.available_at for r in ready), default=None),
            cancelled=sum(1 for r in rows if r.state is ItemState.CANCELLED),
        )

    async def cancel(self, pool: str, item_ids: Sequence[str]) -> list[ItemState | None]:
        """The optional cancel (rules Z1-Z3): pending and claimed items become CANCELLED, holder and token kept."""
        now = self._clock()
        self._settle_expired(pool, now)  # a spent expired claim reads POISONED and is left alone
        out: list[ItemState | None] = []
        for wanted in item_ids:
            row = self._find(pool, wanted)
            out.append(None if row is None else row.state)
            if row is not None and row.state in (ItemState.PENDING, ItemState.CLAIMED):
                row.to_finished(ItemState.CANCELLED, now)
        return out

    # -- groups: the optional ServesGroups capability (rules GR1-GR9) ------------
    def _groups(self, pool: str) -> _Groups:
        return self._t.groups.setdefault(pool, _Groups())

    async def set_group_weight(self, pool: str, group: str, weight: float) -> None:
        self._groups(pool).weights[group] = weight

    async def set_group_limit(self, pool: str, group: str | None, limit: int | None) -> None:
        groups = self._groups(pool)
        if group is None:
            groups.default_limit = limit
        elif limit is None:
            groups.limits.pop(group, None)
        else:
            groups.limits[group] = limit

    async def set_pool_limit(self, pool: str, limit: int | None) -> None:
        self._groups(pool).pool_limit = limit

    async def pause_group(self, pool: str, group: str, seconds: float | None) -> None:
        paused = self._groups(pool).paused_until
        if seconds is None:
            paused.pop(group, None)
        else:
            paused[group] = self._clock() + seconds

    async def group_report(self, pool: str) -> GroupReport:
        now = self._clock()
        self._settle_expired(pool, now)  # expired claims count as ready (or poisoned), never in flight
        groups = self._t.groups.get(pool, _Groups())
        counts: dict[str | None, list[int]] = {}  # group -> [in flight, ready, waiting]
        for row in self._t.rows:
            if row.pool != pool or row.state not in (ItemState.PENDING, ItemState.CLAIMED):
                continue
            column = 0 if row.state is ItemState.CLAIMED else 1 if row.available_at <= now else 2
            counts.setdefault(row.group, [0, 0, 0])[column] += 1
        paused = {group: until for group, until in groups.paused_until.items() if until > now}
        names = set(counts) | set(groups.weights) | set(groups.limits) | set(paused)
        report = []
        for name in sorted(names, key=lambda g: (g is not None, g or "")):
            in_flight, ready, waiting = counts.get(name, [0, 0, 0])
            weight = 1.0 if name is None else groups.weights.get(name, 1.0)
            limit = None if name is None else groups.limits.get(name)
            until = None if name is None else paused.get(name)
            report.append(GroupStats(name, weight, limit, in_flight, ready, waiting, until))
        return GroupReport(pool, groups.pool_limit, groups.default_limit, tuple(report))

    async def pools(self) -> list[str]:
        return sorted({r.pool for r in self._t.rows})

    async def wait_for_work(self, pool: str, timeout: float) -> None:
        # Without "notify" this may simply sleep; callers re-check by claiming.
        await asyncio.sleep(min(timeout, 0.05))

    # -- workers ------------------------------------------------------------
    def _worker_index(self, worker_id: str) -> int:
        for i, record in enumerate(self._t.workers):
            if record.worker_id == worker_id:
                return i
        raise WorkerNotFound(f"no worker {worker_id!r} is registered; register it first", worker_id=worker_id)

    async def register_worker(self, registration: WorkerRegistration) -> WorkerRecord:
        now = self._clock()
        self._t.workers = [w for w in self._t.workers if w.worker_id != registration.worker_id]
        record = WorkerRecord(
            registration.worker_id,
            registration.host,
            registration.pid,
            tuple(registration.pools),
            tuple(registration.capabilities),
            WorkerStatus.STARTING,
            registered_at=now,
            last_heartbeat=now,
        )
        self._t.workers.append(record)
        return record

    async def heartbeat(self, worker_id: str) -> WorkerRecord:
        i = self._worker_index(worker_id)
        if self._t.workers[i].status is WorkerStatus.LOST:
            raise WorkerLost(f"worker {worker_id!r} was declared lost; stop and register again", worker_id=worker_id)
        now = self._clock()
        self._t.workers[i] = _evolve(self._t.workers[i], now)
        for row in self._t.rows:
            if row.state is ItemState.CLAIMED and row.claimed_by == worker_id and row.lease_expires_at is not None:
                if row.lease_expires_at > now and row.lease_seconds is not None:
                    row.lease_expires_at = now + row.lease_seconds
        return self._t.workers[i]

    async def set_worker_status(self, worker_id: str, status: WorkerStatus, detail: str | None) -> None:
        i = self._worker_index(worker_id)
        old = self._t.workers[i]
        self._t.workers[i] = WorkerRecord(
            old.worker_id,
            old.host,
            old.pid,
            old.pools,
            old.capabilities,
            status,
            old.registered_at,
            old.last_heartbeat,
            detail,
        )

    async def get_worker(self, worker_id: str) -> WorkerRecord | None:
        return next((w for w in self._t.workers if w.worker_id == worker_id), None)

    async def list_workers(self, filter: WorkerFilter) -> list[WorkerRecord]:
        now = self._clock()
        return sorted((w for w in self._t.workers if filter.matches(w, now)), key=lambda w: w.registered_at)

    async def reap(self, threshold: float) -> list[ReapedWorker]:
        now = self._clock()
        reaped = []
        for record in list(self._t.workers):
            if record.status in (WorkerStatus.LOST, WorkerStatus.STOPPED):
                continue
            if now - record.last_heartbeat <= threshold:
                continue
            await self.set_worker_status(record.worker_id, WorkerStatus.LOST, record.detail)
            released, poisoned = self._release_worker(None, record.worker_id, spend_attempt=True)
            reaped.append(ReapedWorker(record.worker_id, record.last_heartbeat, released, poisoned))
        return reaped

    # -- shared state -------------------------------------------------------
    def _live(self, namespace: str, key: str) -> str | None:
        entry = self._t.state.get((namespace, key))
        if entry is None:
            return None
        value, expires = entry
        if expires is not None and expires <= self._clock():
            del self._t.state[(namespace, key)]
            return None
        return value

    # -- schedules (optional: workhive.StoresSchedules) ----------------------
    def _schedule_at(self, name: str) -> int | None:
        return next((i for i, s in enumerate(self._t.schedules) if s.name == name), None)

    async def schedule_add(self, schedule: Schedule) -> bool:
        if self._schedule_at(schedule.name) is not None:
            return False
        self._t.schedules.append(schedule)
        return True

    async def schedule_get(self, name: str) -> Schedule | None:
        at = self._schedule_at(name)
        return None if at is None else self._t.schedules[at]

    async def schedule_list(self) -> list[Schedule]:
        return sorted(self._t.schedules, key=lambda s: s.name)

    async def schedule_remove(self, name: str) -> bool:
        at = self._schedule_at(name)
        if at is None:
            return False
        del self._t.schedules[at]
        return True

    async def schedule_fire(self, name: str, tick: float, item: NewItem) -> str | None:
        # Nothing awaits between the look at last_tick, its update and the push (push never
        # yields), so tasks firing one tick at once push it once.
        at = self._schedule_at(name)
        if at is None:
            return None
        schedule = self._t.schedules[at]
        if schedule.last_tick is not None and schedule.last_tick >= tick:
            return None
        self._t.schedules[at] = schedule.fired(tick)
        return (await self.push(schedule.pool, [item]))[0]

    async def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        self._t.state[(namespace, key)] = (value, None if ttl is None else self._clock() + ttl)

    async def state_get(self, namespace: str, key: str) -> str | None:
        return self._live(namespace, key)

    async def state_scan(self, namespace: str) -> dict[str, str]:
        found = {}
        for ns, key in list(self._t.state):
            value = self._live(ns, key) if ns == namespace else None
            if value is not None:
                found[key] = value
        return found

    async def state_delete(self, namespace: str, key: str) -> bool:
        present = self._live(namespace, key) is not None
        self._t.state.pop((namespace, key), None)
        return present


def _evolve(record: WorkerRecord, last_heartbeat: float) -> WorkerRecord:
    return WorkerRecord(
        record.worker_id,
        record.host,
        record.pid,
        record.pools,
        record.capabilities,
        record.status,
        record.registered_at,
        last_heartbeat,
        record.detail,
    )
