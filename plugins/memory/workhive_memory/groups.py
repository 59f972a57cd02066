"""One pool's groups in memory: their ready queues, settings, and the ring of ready groups (rules GR1-GR9).

Each group (tenant) keeps its own ``ReadyQueue``; the ungrouped items are the
group None. A claim takes the head of the admissible ready group with the
highest head priority, then the smallest virtual time ``vt``, then the name
(the ungrouped first): a heap of ready groups keyed that way, so a claim costs
O(log groups) and never visits every group. Serving a group moves its ``vt``
on by ``1 / weight`` from at least the pool's current turn (``pool_vt``), so a
group that comes back after idling starts at the current turn instead of
cashing in the turns it missed (GR4).

A group at its limit, or paused, leaves the heap; a freed slot, a lifted or
ended pause (a heap of pause ends), or a changed setting offers it again.
Heap entries carry the group's ``version`` and stale ones are skipped when
popped. A pool that never saw a group or a setting has no ``GroupIndex`` at
all and claims exactly as before (``PoolIndex.groups`` is None).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workhive_memory.items import ItemRecord, ReadyQueue

__all__ = ["GroupIndex", "GroupState"]

# (-head priority, vt, name key, version, group): the name key and version make every entry unique
# before the group itself would be compared.
_Entry = tuple[int, float, str, int, "GroupState"]


class GroupState:
    """One group of one pool: its ready items and what rules it."""

    __slots__ = (
        "in_flight",
        "key",
        "limit",
        "name",
        "paused_until",
        "queue",
        "queued",
        "step",
        "version",
        "vt",
        "weight",
    )

    def __init__(self, name: str | None, queue: ReadyQueue) -> None:
        self.name = name
        self.key = "" if name is None else name  # no group name is empty: the ungrouped sort first
        self.queue = queue
        self.weight: float | None = None  # None: never set (1)
        self.step = 1.0  # 1 / weight: how far one turn moves its vt
        self.limit: int | None = None  # its own
        self.paused_until: float | None = None
        self.in_flight = 0
        self.vt = 0.0
        self.version = 0
        self.queued = False  # a current entry of it is in the heap


class GroupIndex:
    """The groups of one pool and the heap of those ready to be served."""

    __slots__ = ("default_limit", "groups", "heap", "in_flight", "now", "pauses", "pool_limit", "pool_vt", "queue_type")

    def __init__(self, queue_type: type[ReadyQueue], ungrouped: ReadyQueue, claimed: int) -> None:
        self.queue_type = queue_type
        self.groups: dict[str | None, GroupState] = {}
        self.heap: list[_Entry] = []
        self.pauses: list[tuple[float, str, GroupState]] = []
        self.default_limit: int | None = None
        self.pool_limit: int | None = None
        self.pool_vt = 0.0
        self.now = 0.0
        # Every CLAIMED record counts until it leaves CLAIMED; an expired one leaves when the pool
        # settles it, which it does before every claim, so a claim never counts an expired lease.
        self.in_flight = claimed
        none = self.groups[None] = GroupState(None, ungrouped)
        none.in_flight = claimed  # before the first group, every item was ungrouped
        self.offer(none)

    # -- membership ----------------------------------------------------------
    def group(self, name: str | None) -> GroupState:
        found = self.groups.get(name)
        if found is None:
            found = self.groups[name] = GroupState(name, self.queue_type())
        return found

    def limit_of(self, state: GroupState) -> int | None:
        if state.limit is not None:
            return state.limit
        return None if state.name is None else self.default_limit  # ungrouped: the pool limit alone

    def under_limit(self, state: GroupState) -> bool:
        limit = self.limit_of(state)
        return limit is None or state.in_flight < limit

    def offer(self, state: GroupState, *, fresh: bool = True) -> None:
        """Put ``state`` in the heap under its current key, if it has ready items and a free slot.

        ``fresh``: it was out of the heap (idle, at its limit, paused), so it starts at the pool's
        current turn rather than where it left off.
        """
        top = state.queue.top_priority()
        if top is None or not self.under_limit(state):
            state.queued = False
            return
        if fresh:
            state.vt = max(state.vt, self.pool_vt)
        state.version += 1
        state.queued = True
        heapq.heappush(self.heap, (-top, state.vt, state.key, state.version, state))

    def rebuild(self) -> None:
        """After a setting changed: every group's entry anew (settings change rarely; claims never rebuild)."""
        self.heap = []
        for state in self.groups.values():
            self.offer(state, fresh=not state.queued)  # one that was in the turns keeps its place

    # -- items coming and going ---------------------------------------------
    def add_ready(self, rec: ItemRecord, available_at: float) -> None:
        state = self.group(rec.group)
        queue = state.queue
        top = queue.top_priority()
        queue.add(rec, available_at)
        if top is None:
            self.offer(state)  # it becomes ready: it joins at the current turn
        elif rec.priority > top and state.queued:
            self.offer(state, fresh=False)  # a higher head: a new key, the same turn

    def remove_ready(self, rec: ItemRecord) -> bool:
        state = self.groups.get(rec.group)
        if state is None or not state.queue.remove(rec):
            return False
        if state.queued:
            self.offer(state, fresh=False)  # its head may have changed
        return True

    def unheld(self, rec: ItemRecord) -> None:
        """A claim of ``rec`` ended (settled, released, expired, cancelled): its slots are free."""
        state = self.groups[rec.group]
        state.in_flight -= 1
        self.in_flight -= 1
        if not state.queued:
            self.offer(state)

    # -- claiming --------------------------------------------------------------
    def prepare(self, now: float) -> None:
        """Before claims at ``now``: offer every group whose pause has ended."""
        self.now = now
        pauses = self.pauses
        while pauses and pauses[0][0] <= now:
            until, _, state = heapq.heappop(pauses)
            if state.paused_until == until:
                state.paused_until = None
                if not state.queued:
                    self.offer(state)

    def pop(self) -> ItemRecord | None:
        """The next item to claim (GR2-GR8), counted in flight; None when nothing admissible is ready.

        The hot path of a grouped pool, so ``under_limit`` and ``offer`` are inlined: the served group's
        entry is replaced in place (one sift) rather than popped and pushed again.
        """
        if self.pool_limit is not None and self.in_flight >= self.pool_limit:
            return None
        heap = self.heap
        now = self.now
        while heap:
            entry = heap[0]
            state = entry[4]
            if entry[3] != state.version or not state.queued:
                heapq.heappop(heap)  # superseded by a newer entry of the same group
                continue
            limit = state.limit
            if limit is None and state.name is not None:
                limit = self.default_limit
            paused = state.paused_until
            if (paused is not None and paused > now) or (limit is not None and state.in_flight >= limit):
                heapq.heappop(heap)  # out of the turns until its pause ends or a slot frees
                state.queued = False
                continue
            rec, top = state.queue.pop_head()
            if rec is None:  # never: a queued group has items
                heapq.heappop(heap)
                state.queued = False
                continue
            vt = state.vt
            pool_vt = self.pool_vt
            if vt > pool_vt:
                self.pool_vt = vt
                pool_vt = vt
            state.vt = vt = pool_vt + state.step  # this turn starts at max(vt, pool_vt)
            state.in_flight += 1
            self.in_flight += 1
            if top is None or (limit is not None and state.in_flight >= limit):
                heapq.heappop(heap)
                state.queued = False
            else:
                state.version += 1
                heapq.heapreplace(heap, (-top, vt, state.key, state.version, state))
            return rec
        return None

    def has_ready(self, now: float) -> bool:
        """Whether a claim at ``now`` would find an item (drops entries a claim would drop too)."""
        self.prepare(now)
        if self.pool_limit is not None and self.in_flight >= self.pool_limit:
            return False
        heap = self.heap
        while heap:
            _, _, _, version, state = heap[0]
            if version == state.version and state.queued:
                paused = state.paused_until
                if (paused is None or paused <= now) and self.under_limit(state) and state.queue.size:
                    return True
                state.queued = False
            heapq.heappop(heap)
        return False

    # -- settings -----------------------------------------------------------
    def set_weight(self, name: str, weight: float) -> None:
        state = self.group(name)
        state.weight = weight
        state.step = 1.0 / weight

    def set_limit(self, name: str | None, limit: int | None) -> None:
        if name is None:
            self.default_limit = limit
        else:
            self.group(name).limit = limit
        self.rebuild()

    def pause(self, name: str, until: float | None) -> None:
        state = self.group(name)
        state.paused_until = until
        if until is None:
            if not state.queued:
                self.offer(state)
        else:
            heapq.heappush(self.pauses, (until, state.key, state))

    @staticmethod
    def has_settings(state: GroupState, now: float) -> bool:
        """A weight or limit of its own, or a pause still running (GR9: such a group is reported)."""
        paused = state.paused_until
        return state.weight is not None or state.limit is not None or (paused is not None and paused > now)
