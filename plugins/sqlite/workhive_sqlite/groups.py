"""Groups on SQLite (``workhive.storage.ServesGroups``, rules GR1-GR9; schema versions 8-10).

A pool uses groups from its first grouped push or group setting on (a
``group_pools`` row, never deleted); until then its claims are the plain ones
of ``ops`` and pay one probe of that table. From then on:

* every item of the pool carries a group (``''`` for the ungrouped ones);
* per group, ``head`` (the highest priority of its pending items) and
  ``inflight`` (its claims) are kept: by a trigger on ``items`` for every move
  but a claim, and by the claim itself, once per group it served; ``inflight``
  only while some group of the pool has a limit (``group_pools.counted``,
  version 10: otherwise no limit reads it, and a completion writes no group
  row), taken once off ``items_leases`` when the first limit is set; a pool with
  a limit counts its unexpired claims off ``items_leases`` (about as many as its limit);
* a claim (``claim_by_turns``) runs in one transaction (``BEGIN IMMEDIATE``;
  on the event loop's connection a deferred one whose first write fails,
  nothing changed, if anything was committed since its reads):
  it settles the pool's expired leases (so their slots are free and their
  items pending again), chooses all its turns in one pass over the
  ``groups_turns`` index (head priority, then virtual time ``vt``, then name)
  and each chosen group's ready items, claims them in one statement and
  writes each served group's row once; groups without pending items are not
  in that index and are never read.

Group limits are kept counters rather than counts of an index: a claim moves
one counter row instead of adding an index entry per claimed item, and
settling the expired leases first (one probe of ``items_leases`` when there
are none) corrects them before every decision, so an expired lease frees its
slot at its expiry however long ago that was.

Turns follow the virtual-time rule of the specification: the served group's
``vt`` becomes ``max(vt, pool vt) + 1 / weight`` and the pool's ``vt`` rises to
the served group's old ``vt``, so an idle group starts at the pool's current
turn and never banks credit.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import json
import math
import sqlite3
from typing import Any

from workhive.models import GroupReport, GroupStats, WorkItem
from workhive_sqlite import ops as _ops
from workhive_sqlite.failures import is_stale_snapshot
from workhive_sqlite.ops import Operations, _claimed, claim_order
from workhive_sqlite.sqlfiles import queries

__all__ = [
    "claim_by_turns",
    "group_report",
    "next_due",
    "pause_group",
    "set_group_limit",
    "set_group_weight",
    "set_pool_limit",
    "take_turns",
    "use_groups",
]

_Q = queries()

#: The group of a grouped pool's ungrouped items (a group name is never empty).
UNGROUPED = ""


def use_groups(ops: Operations, pool: str) -> None:
    """Make ``pool`` use groups (inside the caller's write transaction); nothing if it does already.

    Its live, poisoned and cancelled ungrouped items join the group ``''`` and
    the counters are taken once; from then on the triggers keep them. The pool
    is not added to ``ops.grouped`` here: the transaction may still roll back, and
    the next claim or push finds the committed row by its probe.
    """
    if pool in ops.grouped:
        return
    execute = ops.conn.execute
    if execute(_Q["group_pool_add"], (pool,)).rowcount:
        for state in ("pending", "claimed", "poisoned", "cancelled"):
            execute(_Q[f"group_adopt_{state}"], (pool,))
        execute(*_ops._bind(_Q["group_adopt_counts"], (pool,)))


def claim_by_turns(ops: Operations, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
    """Claim up to ``limit`` items of a pool that uses groups: one turn per item (GR2-GR8).

    The turns are taken in one transaction (``take_turns``; or the caller's, as in
    ``complete_and_claim``) and the items built after it commits, so the write
    lock is not held for that. On the event loop's connection (``ops.optimistic``)
    the turns are chosen before the lock is taken (``Operations.optimistic_write``):
    the claim statement, its first write, fails with SQLITE_BUSY, nothing changed,
    if another connection wrote since, and the backend runs it again on its thread,
    under ``BEGIN IMMEDIATE``. The lock is then held for the writes alone, not for
    reading the groups and choosing the turns: a holder that the scheduler
    preempts on a busy machine stalls every other process's writes.
    """
    if not ops.optimistic:
        rows, order, expiry = ops.write(take_turns, ops, pool, worker_id, limit, lease)
    else:
        try:
            rows, order, expiry = ops.optimistic_write(take_turns, ops, pool, worker_id, limit, lease)
        except sqlite3.OperationalError as exc:
            if not is_stale_snapshot(exc):
                raise  # the lock is held now: the backend runs the claim on its thread, which waits
            # Another connection committed between this claim's reads and its first write, and has
            # let the lock go: choose again once, here, on a fresh snapshot, rather than hand the
            # claim to the thread (a round trip, and the claim run under BEGIN IMMEDIATE). A second
            # loss goes to the thread as any busy operation does: no loop here.
            ops.stale_retries += 1
            rows, order, expiry = ops.optimistic_write(take_turns, ops, pool, worker_id, limit, lease)
    if not rows:
        return []
    # RETURNING comes back in storage order; hand the items out in turn order: a lone group's
    # turns went in claim order (priority, available_at, id), sorted here, after the commit.
    if order is None:
        rows.sort(key=claim_order)
    else:
        rows.sort(key=lambda row: order[row[0]])
    lease = float(lease)
    return [_claimed(row, pool, worker_id, expiry, lease) for row in rows]


def take_turns(
    ops: Operations, pool: str, worker_id: str, limit: int, lease: float
) -> tuple[list[Any], dict[int, int] | None, float]:
    """The claim of ``claim_by_turns``, inside the write transaction: its rows, each item's turn (None: the
    turns went in claim order, as a lone group's do), the lease's expiry.

    All the batch's turns are chosen first (``_plan``, reading the groups and
    their items off their indexes), then claimed in one statement, and each
    served group's virtual time written once: a batch of n costs a few
    statements per group served rather than four per item, and the write lock
    is held that much shorter.
    """
    execute = ops.conn.execute
    now = ops.clock()
    args = (pool, now)
    # The pool's settings and its groups in turn order come in one statement (group_claim_turns);
    # the groups are read only as far as the turns need, so its cursor stays open meanwhile.
    rows = execute(*_ops._bind(_Q["group_claim_turns"], args))
    try:
        first = rows.fetchone()
        pool_limit, default_limit, pool_vt, counted, expired = first[:_SETTINGS]
        if expired:
            # Settled first (their slots free, their items pending again), then the turns read again.
            rows.close()
            execute(*_ops._bind(_Q["poison_expired"], args))
            execute(*_ops._bind(_Q["group_settle_expired"], args))
            rows = execute(*_ops._bind(_Q["group_claim_turns"], args))
            first = rows.fetchone()
        room = limit if pool_limit is None else min(limit, pool_limit - _pool_in_flight(ops, pool, now))
        plan = _plan(ops, pool, now, default_limit, pool_vt, room, rows, first, True)
    finally:
        rows.close()
    lease = float(lease)
    expiry = now + lease
    order: dict[int, int] | None
    if plan.alone is not None:
        claimed, order = _claim_alone(ops, pool, now, worker_id, lease, expiry, plan), None
    elif not plan.items:
        return [], {}, expiry
    else:
        claimed = execute(
            *_ops._bind(_Q["claim_items"], (json.dumps(plan.items), now, 0, worker_id, lease, expiry))
        ).fetchall()
        order = {item: n for n, item in enumerate(plan.items)}
    # Claims in flight are counted only while a limit reads them (group_pools.counted, version 10).
    ops.conn.executemany(
        _Q["group_took_turns"],
        [(vt, plan.taken[group] if counted else 0, pool, group) for group, vt in plan.vts.items()],
    )
    if plan.pool_vt != pool_vt:
        execute(*_ops._bind(_Q["group_pool_vt"], (plan.pool_vt, pool)))
    return claimed, order, expiry


def _claim_alone(
    ops: Operations, pool: str, now: float, worker_id: str, lease: float, expiry: float, plan: _Plan
) -> list[Any]:
    """The claim of a plan whose turns all go to one group: its rows (in storage order; the turns
    went in claim order); the group's vt and the pool's moved in ``plan`` as that many turns in a
    row move them. Nothing is sorted here: this runs under the write lock, which every other
    process's claim and completion waits for, and the order is only needed after the commit."""
    served = plan.alone
    assert served is not None
    args = (pool, now, plan.alone_room, worker_id, lease, expiry, served.group)
    claimed = ops.conn.execute(*_ops._bind(_Q["claim_group_items"], args)).fetchall()
    if claimed:
        plan.vts[served.group], plan.pool_vt = _after_turns(served.vt, plan.pool_vt, served.weight, len(claimed))
        plan.taken[served.group] = len(claimed)
    return claimed


def _after_turns(vt: float, pool_vt: float, weight: float, turns: int) -> tuple[float, float]:
    """A group's vt and the pool's after ``turns`` turns of the group in a row: each turn starts at the
    later of the two and moves the group on by 1/weight, summed one turn at a time, in order, as that
    many single claims sum them (a product would round differently, and the next turn would differ).

    After the first turn the group's vt is the later one (x + step >= x for step > 0, rounding
    included), so every further turn starts at it: the sums are a running sum, taken by
    ``itertools.accumulate`` in C rather than a Python loop with ``max`` per turn (under the write lock).

    >>> _after_turns(0.0, 0.5, 2.0, 3)
    (2.0, 1.5)
    """
    if turns <= 0:
        return vt, pool_vt
    step = 1.0 / weight
    start = max(vt, pool_vt)
    # The pool's vt after the last turn and the group's: the running sum's last two values.
    last = collections.deque(itertools.accumulate(itertools.repeat(step, turns), initial=start), maxlen=2)
    return last[1], last[0]


#: How many columns of a group_claim_turns row are the pool's settings (the same in every row).
_SETTINGS = 5


def _pool_in_flight(ops: Operations, pool: str, now: float) -> int:
    """The pool's unexpired claims (asked only when it has a limit)."""
    return int(ops.conn.execute(*_ops._bind(_Q["group_pool_in_flight"], (pool, now))).fetchone()[0])


@dataclasses.dataclass
class _Plan:
    """The turns of one claim: the items in turn order, each served group's new vt, the pool's vt."""

    items: list[int]
    vts: dict[str, float]
    pool_vt: float
    taken: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    #: Every turn of the claim goes to this one group (no other has a ready item it may take):
    #: up to ``alone_room`` of its items, claimed off its index by one statement (take_turns).
    alone: _Candidate | None = None
    alone_room: int = 0


class _Candidate:
    """A group read off the turn index that can be served: its vt, weight, free slots and next ready items."""

    __slots__ = ("group", "more", "read", "ready", "slots", "vt", "weight")

    def __init__(self, group: str, vt: float, weight: float, slots: float) -> None:
        self.group = group
        self.vt = vt
        self.weight = weight
        self.slots = slots
        self.ready: collections.deque[tuple[int, int]] = collections.deque()  # (item id, priority) in claim order
        self.read = 0  # its ready items read so far (none is claimed before the plan is done)
        self.more = True  # whether it may have ready items beyond those read

    def fetch(self, ops: Operations, pool: str, now: float, want: int) -> None:
        """Read up to ``want`` more of its ready items in claim order (nothing once it has no more)."""
        if not self.more:
            return
        args = (pool, self.group, now, want, self.read)
        rows = ops.conn.execute(*_ops._bind(_Q["group_ready_items"], args)).fetchall()
        self.ready.extend(rows)
        self.read += len(rows)
        self.more = len(rows) == want


#: A group's first read of ready items; each further read doubles (a weighty group takes many turns in a batch).
_FIRST_READ = 16


def _plan(
    ops: Operations,
    pool: str,
    now: float,
    default_limit: int | None,
    pool_vt: float,
    room: int,
    rows: Any = None,
    unread: Any = None,
    may_leave_alone: bool = False,
) -> _Plan:
    """Choose up to ``room`` turns as that many one-item claims in a row would (GR2-GR8).

    A turn serves the group with the best (priority of its next ready item,
    vt, name). Groups are read off ``groups_turns`` (head priority, vt, name)
    only while the next one unread could beat the best read: no unread group
    can, as its ready items are at most its head. Paused groups, groups at
    their limit and groups without a ready item are read past; no other group
    is read. Nothing is written here: the items stay pending, so a group's
    later reads skip the ones read before. With ``may_leave_alone`` (a claim's
    own plan, not a look whether one could be served), a group that takes
    every turn from the first on is named in ``alone``, its items not read
    (``take_turns`` claims them by one statement).
    """
    plan = _Plan([], {}, pool_vt)
    if room <= 0:
        return plan
    # Entries (-priority of its next ready item, vt, name, group). A served group whose read items
    # are spent goes back keyed by the priority it was just served at, a bound (its next ready item's
    # is at most that), and reads more only if that entry comes first again: a group served its last
    # turn of the claim reads nothing more, where an eager read cost a small claim a statement per group.
    heap: list[tuple[int, float, str, _Candidate]] = []
    own = rows is None  # else the caller's group_claim_turns, its first row read (take_turns)
    if own:
        rows = ops.conn.execute(*_ops._bind(_Q["group_claim_turns"], (pool, now)))
        unread = rows.fetchone()
    if unread is not None and unread[_SETTINGS] is None:
        unread = None  # the one row of a pool none of whose groups has pending items
    taken = 0
    try:
        while taken < room:
            while unread is not None and (not heap or (-unread[6], unread[7], unread[5]) < heap[0][:3]):
                _, _, _, _, _, group, _head, vt, weight, own_limit, paused_until, in_flight, first, priority = unread
                unread = rows.fetchone()
                if first is None or (paused_until is not None and paused_until > now):
                    continue
                cap = own_limit if own_limit is not None else (default_limit if group != UNGROUPED else None)
                slots = math.inf if cap is None else cap - in_flight
                if slots <= 0:
                    continue
                found = _Candidate(group, vt, weight, slots)
                # Its first ready item came with the row: more are read only if it takes more turns.
                found.ready.append((first, priority))
                found.read = 1
                heapq.heappush(heap, (-priority, vt, group, found))
            if not heap:
                break
            served = heapq.heappop(heap)[3]
            if may_leave_alone and not taken and not heap and unread is None:
                # Alone from the first turn: its items in claim order are the claim's, which one
                # statement takes off items_group_ready as an ungrouped claim does (no ids read
                # here and sent back); take_turns counts the turns from what it got.
                plan.alone, plan.alone_room = served, int(min(room, served.slots))
                break
            if not served.ready:
                # Keyed by a bound: read its next items, and serve it only if it still comes first.
                # Alone (no other group read or unread) it takes every turn left: read them at once, as
                # each read past the first skips again (OFFSET) the items read before it.
                alone = not heap and unread is None
                want = room - taken if alone else max(_FIRST_READ, 2 * served.read)
                served.fetch(ops, pool, now, int(min(room - taken, served.slots, want)))
                if served.ready:
                    heapq.heappush(heap, (-served.ready[0][1], served.vt, served.group, served))
                continue
            # Its turns in a row: one, or while no other group is read or left unread (a backlog of
            # one tenant), every ready item read that the claim has room for, without the heap.
            turns = 1 if heap or unread is not None else int(min(room - taken, served.slots, len(served.ready)))
            for _ in range(turns):
                item, priority = served.ready.popleft()
                plan.items.append(item)
            served.vt, plan.pool_vt = _after_turns(served.vt, plan.pool_vt, served.weight, turns)
            taken += turns
            plan.vts[served.group] = served.vt
            plan.taken[served.group] += turns
            served.slots -= turns
            if served.slots <= 0:
                continue
            if served.ready:
                heapq.heappush(heap, (-served.ready[0][1], served.vt, served.group, served))
            elif served.more:
                heapq.heappush(heap, (-priority, served.vt, served.group, served))
    finally:
        if own:
            rows.close()
    return plan


def next_due(ops: Operations, pool: str) -> float | None:
    """When a claim of ``pool`` (which uses groups) may next find an item: now, or a later time, or None.

    Not simply the first ready item: a group at its limit or paused keeps its
    ready items, and a waiter woken for them would spin. So: now if a turn can
    be served; else the first of a lease expiring (it frees a slot), a pause
    ending, a delayed item coming due. A completion frees a slot too; waiters
    learn of it from the commit itself (``SqliteStorage._watch``).
    """
    execute = ops.conn.execute
    now = ops.clock()
    settings = execute(_Q["group_pool_settings"], (pool,)).fetchone()
    if settings is None:
        return None
    pool_limit, default_limit, _ = settings
    free = pool_limit is None or _pool_in_flight(ops, pool, now) < pool_limit
    if free and _plan(ops, pool, now, default_limit, 0.0, 1).items:
        return now
    times = (
        execute(_Q["next_lease_expiry"], (pool,)).fetchone()[0],
        execute(*_ops._bind(_Q["group_next_resume"], (pool, now))).fetchone()[0],
        execute(*_ops._bind(_Q["group_next_pending"], (pool, now))).fetchone()[0],
    )
    found = [t for t in times if t is not None]
    return min(found) if found else None


def set_group_weight(ops: Operations, pool: str, group: str, weight: float) -> None:
    """Group ``group`` of ``pool`` takes ``weight`` shares of the turns (GR3)."""
    ops.write(_set, ops, pool, "group_set_weight", (pool, group, float(weight)))


def set_group_limit(ops: Operations, pool: str, group: str | None, limit: int | None) -> None:
    """At most ``limit`` claims of ``group`` in flight (``group`` None: the default of named groups; GR6)."""
    if group is None:
        ops.write(_set, ops, pool, "group_set_default_limit", (limit, pool))
    else:
        ops.write(_set, ops, pool, "group_set_limit", (pool, group, limit))


def set_pool_limit(ops: Operations, pool: str, limit: int | None) -> None:
    """At most ``limit`` claims of ``pool`` in flight (GR7)."""
    ops.write(_set, ops, pool, "group_set_pool_limit", (limit, pool))


def pause_group(ops: Operations, pool: str, group: str, seconds: float | None) -> None:
    """Claims skip ``group`` until hive time now + ``seconds``; None resumes it (GR8)."""
    until = None if seconds is None else ops.clock() + seconds
    ops.write(_set, ops, pool, "group_pause", (pool, group, until))


def _set(ops: Operations, pool: str, statement: str, args: tuple[Any, ...]) -> None:
    use_groups(ops, pool)
    execute = ops.conn.execute
    execute(*_ops._bind(_Q[statement], args))
    # The groups' claims are counted only while some group has a limit (schema version 10):
    # the first limit of a pool takes the counts once, in this transaction, off items_leases.
    changed = execute(*_ops._bind(_Q["group_count_claims"], (pool,))).fetchone()
    if changed is not None and changed[0]:
        execute(*_ops._bind(_Q["group_recount"], (pool,)))


def group_report(ops: Operations, pool: str) -> GroupReport:
    """The pool's limits and every group with a live item or a setting of its own (GR9), on one snapshot."""
    return ops.read(_report, ops, pool)


def _report(ops: Operations, pool: str) -> GroupReport:
    execute = ops.conn.execute
    now = ops.clock()
    settings = execute(_Q["group_pool_settings"], (pool,)).fetchone()
    pool_limit, default_limit = (None, None) if settings is None else settings[:2]
    found: dict[str | None, dict[str, Any]] = {}

    def entry(group: str | None) -> dict[str, Any]:
        name = None if group in (None, UNGROUPED) else group
        return found.setdefault(
            name, {"weight": 1.0, "limit": None, "in_flight": 0, "ready": 0, "waiting": 0, "paused_until": None}
        )

    listed: set[str | None] = set()
    for group, weight, own_limit, paused_until, weight_set in execute(_Q["group_report_settings"], (pool,)):
        stats = entry(group)
        paused = paused_until if paused_until is not None and paused_until > now else None
        stats.update(weight=float(weight), limit=own_limit, paused_until=paused)
        # Settings of its own (docs/groups.md, GR9): a weight set, a limit, a pause still ahead.
        if weight_set or own_limit is not None or paused is not None:
            listed.add(None if group == UNGROUPED else group)
    for group, ready, waiting in execute(*_ops._bind(_Q["group_report_pending"], (pool, now))):
        stats = entry(group)
        stats["ready"] += ready
        stats["waiting"] += waiting
    for group, in_flight, expired in execute(*_ops._bind(_Q["group_report_claimed"], (pool, now))):
        stats = entry(group)
        stats["in_flight"] += in_flight
        stats["ready"] += expired
    for name, stats in found.items():
        if stats["in_flight"] or stats["ready"] or stats["waiting"]:
            listed.add(name)
    groups = tuple(
        GroupStats(group=name, **found[name]) for name in sorted(listed, key=lambda n: (n is not None, n or ""))
    )
    return GroupReport(pool=pool, pool_limit=pool_limit, default_limit=default_limit, groups=groups)
