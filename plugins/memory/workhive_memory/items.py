"""One pool's items in memory: records, heaps and indexes.

Every operation on the hot path (push, claim, complete) is O(log n) at worst:
items waiting to be claimed sit in a ``ReadyQueue`` (O(1) for the common
first-in-first-out case), delayed ones and claimed ones in heaps keyed by
time, and nothing ever scans claimed, done or poisoned items to find work.
Heaps use lazy deletion: an entry is checked against its record when
popped, and the lease heap is rebuilt when stale entries outnumber live ones.

Nothing here awaits, so each method runs to completion without another
asyncio task seeing a half-made change.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from workhive.models import ItemState, NewItem, WorkItem
from workhive_memory.groups import GroupIndex

__all__ = ["ItemRecord", "PoolIndex"]

PENDING = ItemState.PENDING
CLAIMED = ItemState.CLAIMED
DONE = ItemState.DONE
POISONED = ItemState.POISONED
CANCELLED = ItemState.CANCELLED

# Below this many stale lease entries the heap is not worth rebuilding.
_COMPACT_FLOOR = 4096


class ItemRecord:
    """The mutable record behind a ``WorkItem`` snapshot."""

    __slots__ = (
        "attempts",
        "available_at",
        "claimed_by",
        "created_at",
        "dedup_key",
        "error",
        "finished_at",
        "group",
        "id",
        "lease_expires_at",
        "lease_seconds",
        "max_attempts",
        "payload",
        "pool",
        "priority",
        "releases",
        "result_payload",
        "seq",
        "state",
        "token",
    )

    def __init__(self, item_id: str, pool: str, seq: int, new: NewItem, now: float) -> None:
        self.id = item_id
        self.pool = pool
        self.seq = seq
        self.payload = new.payload
        self.priority = new.priority
        self.max_attempts = new.max_attempts
        self.dedup_key = new.dedup_key
        self.group = new.group
        self.state = PENDING
        self.attempts = 0
        self.token = 0
        self.created_at = now
        self.available_at = now + new.delay
        self.claimed_by: str | None = None
        self.lease_expires_at: float | None = None
        self.lease_seconds: float | None = None
        self.error: str | None = None
        self.result_payload: str | None = None
        self.finished_at: float | None = None
        self.releases = 0

    def snapshot(self) -> WorkItem:
        """An immutable copy for callers (they must never hold the live record)."""
        return WorkItem(
            self.id,
            self.pool,
            self.payload,
            self.state,
            self.priority,
            self.attempts,
            self.max_attempts,
            self.token,
            self.created_at,
            self.available_at,
            self.claimed_by,
            self.lease_expires_at,
            self.lease_seconds,
            self.dedup_key,
            self.error,
            self.result_payload,
            self.finished_at,
            self.releases,
            self.group,
        )


# Heap entries are tuples so that heapq compares them in C; the trailing
# record is never compared because the sequence number before it is unique.
ReadyEntry = tuple[float, int, ItemRecord]  # (available_at, seq, record)
DelayedEntry = tuple[float, int, ItemRecord]  # (available_at, seq, record)
LeaseEntry = tuple[float, int, int, ItemRecord]  # (lease_expires_at, entry counter, token, record)


class _Level:
    """The ready items of one priority: a FIFO for in-order arrivals, a heap for the rest."""

    __slots__ = ("fifo", "heap")

    def __init__(self) -> None:
        self.fifo: deque[ReadyEntry] = deque()
        self.heap: list[ReadyEntry] = []


class ReadyQueue:
    """PENDING items whose time has come, popped by priority, then available_at, then seq.

    Most items arrive in order (pushed now, on a clock that does not go
    back): they are appended to their priority's deque and popped from its
    front in O(1), so claiming from a million pending items costs what
    claiming from a thousand does. Items that arrive out of order (retries,
    released or expired claims, requeues, delayed items coming due) go to a
    per-priority heap; ``pop`` takes whichever head is first.

    >>> q = ReadyQueue()
    >>> q.size
    0
    """

    __slots__ = ("_levels", "_priorities", "size")

    def __init__(self) -> None:
        self._levels: dict[int, _Level] = {}
        self._priorities: list[int] = []  # heap of -priority, one per key of _levels
        self.size = 0

    def add(self, rec: ItemRecord, available_at: float) -> None:
        level = self._levels.get(rec.priority)
        if level is None:
            level = self._levels[rec.priority] = _Level()
            heapq.heappush(self._priorities, -rec.priority)
        entry = (available_at, rec.seq, rec)
        fifo = level.fifo
        # seq is unique, so the comparison never reaches the record.
        if not fifo or fifo[-1] < entry:
            fifo.append(entry)
        else:
            heapq.heappush(level.heap, entry)
        self.size += 1

    def remove(self, rec: ItemRecord) -> bool:
        """Take ``rec`` out of the queue (a cancelled item); O(n) in its level, as cancelling is rare."""
        level = self._levels.get(rec.priority)
        if level is None:
            return False
        for position, entry in enumerate(level.fifo):
            if entry[1] == rec.seq:
                del level.fifo[position]
                self.size -= 1
                return True
        for position, entry in enumerate(level.heap):
            if entry[1] == rec.seq:
                level.heap[position] = level.heap[-1]
                level.heap.pop()
                heapq.heapify(level.heap)
                self.size -= 1
                return True
        return False

    def top_priority(self) -> int | None:
        """The highest priority of a ready item, or None when empty (forgets emptied levels on the way)."""
        priorities = self._priorities
        while priorities:
            level = self._levels[-priorities[0]]
            if level.fifo or level.heap:
                return -priorities[0]
            del self._levels[-heapq.heappop(priorities)]
        return None

    def pop_head(self) -> tuple[ItemRecord | None, int | None]:
        """``pop()`` and the priority of the new head (None when emptied), for the turns of groups in one call."""
        priorities = self._priorities
        while priorities:
            top = -priorities[0]
            level = self._levels[top]
            fifo, heap = level.fifo, level.heap
            if fifo:
                entry = heapq.heappop(heap) if heap and heap[0] < fifo[0] else fifo.popleft()
            elif heap:
                entry = heapq.heappop(heap)
            else:
                del self._levels[-heapq.heappop(priorities)]
                continue
            self.size -= 1
            return entry[2], (top if fifo or heap else self.top_priority())
        return None, None

    def earliest(self) -> float | None:
        """The smallest ``available_at`` of any ready item: each level's deque is sorted, its heap a heap."""
        heads = [entry[0][0] for level in self._levels.values() for entry in (level.fifo, level.heap) if entry]
        return min(heads, default=None)

    def pop(self) -> ItemRecord | None:
        """The next item to claim, or None."""
        priorities = self._priorities
        while priorities:
            level = self._levels[-priorities[0]]
            fifo, heap = level.fifo, level.heap
            if fifo:
                entry = heapq.heappop(heap) if heap and heap[0] < fifo[0] else fifo.popleft()
            elif heap:
                entry = heapq.heappop(heap)
            else:  # an emptied level: forget it until its priority is pushed again
                del self._levels[-heapq.heappop(priorities)]
                continue
            self.size -= 1
            return entry[2]
        return None


class PoolIndex:
    """The items of one pool, indexed for claiming in order and expiring leases.

    ``by_state`` holds every record under its state (insertion-ordered dicts:
    O(1) counts and moves; DONE and POISONED are thereby in finishing order,
    which ``purge`` walks from the front); ``ready`` holds PENDING items whose
    time has come, ``delayed`` those still waiting, ``leases`` CLAIMED items by
    expiry. Once the pool sees a group or a group setting, ``groups`` holds a
    queue per group (``ready`` stays the ungrouped items' queue) and the turns;
    until then it is None and claims take from ``ready`` alone.
    """

    __slots__ = (
        "by_state",
        "claimed",
        "compact_at",
        "dedup",
        "delayed",
        "done",
        "groups",
        "items",
        "lease_counter",
        "leases",
        "name",
        "pending",
        "ready",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.items: dict[str, ItemRecord] = {}
        self.by_state: dict[ItemState, dict[str, ItemRecord]] = {s: {} for s in ItemState}
        # Aliases of by_state entries, for the hot path.
        self.pending = self.by_state[PENDING]
        self.claimed = self.by_state[CLAIMED]
        self.done = self.by_state[DONE]
        self.dedup: dict[str, ItemRecord] = {}
        self.ready = ReadyQueue()
        self.delayed: list[DelayedEntry] = []
        self.leases: list[LeaseEntry] = []
        self.lease_counter = 0
        self.compact_at = _COMPACT_FLOOR
        self.groups: GroupIndex | None = None

    def grouping(self) -> GroupIndex:
        """The pool's groups, made on first use (a grouped push or a group setting)."""
        if self.groups is None:
            self.groups = GroupIndex(ReadyQueue, self.ready, len(self.claimed))
        return self.groups

    def add_ready(self, rec: ItemRecord, available_at: float) -> None:
        """Queue a PENDING ``rec`` that is due, in its group's queue."""
        if self.groups is None:
            if rec.group is None:
                self.ready.add(rec, available_at)
                return
            self.grouping()
        self.groups.add_ready(rec, available_at)  # type: ignore[union-attr]

    # -- moving between states ---------------------------------------------
    def move(self, rec: ItemRecord, state: ItemState) -> None:
        if rec.state is CLAIMED and self.groups is not None:
            self.groups.unheld(rec)
        del self.by_state[rec.state][rec.id]
        self.by_state[state][rec.id] = rec
        rec.state = state

    def make_pending(self, rec: ItemRecord, available_at: float, now: float) -> None:
        """Put ``rec`` (already PENDING) into the heap it belongs to."""
        rec.available_at = available_at
        if available_at <= now:
            self.add_ready(rec, available_at)
        else:
            heapq.heappush(self.delayed, (available_at, rec.seq, rec))

    def track_lease(self, rec: ItemRecord) -> None:
        """Remember ``rec``'s (new) lease expiry; older entries for it go stale."""
        assert rec.lease_expires_at is not None, "only claimed records have leases"
        self.lease_counter += 1
        entry: LeaseEntry = (rec.lease_expires_at, self.lease_counter, rec.token, rec)
        heapq.heappush(self.leases, entry)
        if len(self.leases) > self.compact_at:
            self.compact_leases()

    def compact_leases(self) -> None:
        """Drop stale lease entries once they dominate the heap.

        Every complete or extend leaves an entry behind; rebuilding when the
        heap doubles past the live claims keeps it proportional to them at an
        amortised O(1) per operation.
        """
        self.leases = [e for e in self.leases if _lease_valid(e)]
        heapq.heapify(self.leases)
        self.compact_at = 2 * len(self.leases) + _COMPACT_FLOOR

    def finish(self, rec: ItemRecord, state: ItemState, now: float) -> None:
        """DONE, POISONED or CANCELLED: the item leaves the claimable set and frees its dedup key."""
        self.move(rec, state)
        rec.finished_at = now
        rec.lease_expires_at = None
        rec.lease_seconds = None
        key = rec.dedup_key
        if key is not None and self.dedup.get(key) is rec:
            del self.dedup[key]

    def withdraw(self, rec: ItemRecord) -> None:
        """Take a PENDING ``rec`` out of the ready queue or the delayed heap (before it is cancelled)."""
        taken = self.ready.remove(rec) if self.groups is None else self.groups.remove_ready(rec)
        if not taken:
            self.delayed = [entry for entry in self.delayed if entry[2] is not rec]
            heapq.heapify(self.delayed)

    def unclaim(self, rec: ItemRecord, available_at: float, now: float) -> None:
        """CLAIMED → PENDING (release, retry, expiry, reap)."""
        self.move(rec, PENDING)
        rec.claimed_by = None
        rec.lease_expires_at = None
        rec.lease_seconds = None
        self.make_pending(rec, available_at, now)

    # -- the clock's effects ----------------------------------------------
    def advance(self, now: float) -> list[tuple[ItemRecord, str | None]]:
        """Promote delayed items that are due and settle expired leases.

        Returns the records whose lease expired (now PENDING or POISONED) with
        the worker that held each, so the caller can drop them from its set.
        """
        delayed = self.delayed
        if delayed and delayed[0][0] <= now:
            add = self.ready.add if self.groups is None else self.groups.add_ready
            while delayed and delayed[0][0] <= now:
                at, _, rec = heapq.heappop(delayed)
                add(rec, at)
        leases = self.leases
        expired: list[tuple[ItemRecord, str | None]] = []
        while leases and leases[0][0] <= now:
            at, _, token, rec = heapq.heappop(leases)
            if rec.state is not CLAIMED or rec.token != token or rec.lease_expires_at != at:
                continue  # completed, released or extended since: a stale entry
            expired.append((rec, rec.claimed_by))
            if rec.attempts >= rec.max_attempts:
                rec.error = (
                    f"lease expired after attempt {rec.attempts} of {rec.max_attempts} "
                    f"(worker {rec.claimed_by} neither completed nor failed it in time)"
                )
                self.finish(rec, POISONED, now)
            else:
                # An expired claim counts as available from its expiry time.
                self.unclaim(rec, at, now)
        return expired

    # -- queries ------------------------------------------------------------
    def claimable_soon(self) -> float | None:
        """The earliest time at which a delayed item or an expired lease becomes claimable."""
        times = [h[0][0] for h in (self.delayed, self.leases) if h]
        if self.groups is not None and self.groups.pauses:
            times.append(self.groups.pauses[0][0])  # a pause that ends lets its group's items be claimed
        return min(times) if times else None

    def in_state(self, state: ItemState) -> Iterator[ItemRecord]:
        return iter(self.by_state[state].values())

    def oldest_pending_at(self) -> float | None:
        """When the longest-waiting ready item became claimable (call ``advance`` first).

        Not the first ready record in pending order: a delayed item pushed
        early comes due late, after items pushed later but ready at once.
        """
        if self.groups is None:
            return self.ready.earliest()
        return min((t for g in self.groups.groups.values() if (t := g.queue.earliest()) is not None), default=None)


def _lease_valid(entry: LeaseEntry) -> bool:
    at, _, token, rec = entry
    return rec.state is CLAIMED and rec.token == token and rec.lease_expires_at == at
