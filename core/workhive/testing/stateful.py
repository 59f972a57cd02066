"""The storage model test: random operation sequences against a reference model.

A Hypothesis ``RuleBasedStateMachine`` drives push, claim, complete, fail,
release, extend, heartbeat, reap, requeue, cancel (on backends with the
optional ``cancel``), groups with their weights, limits and pauses (on
backends that serve groups) and the passing of time against a
backend through the public facade, mirrors each step on a small pure-Python
model, and after every step checks each item's state, attempts, token and
lease against what the backend reports.

Where the contract lets a backend choose (an expired lease may be settled
lazily: the item reads as CLAIMED until something looks at it, or already as
PENDING/POISONED), the model accepts both and adopts what it observes. Which
group's turn it is (GR2-GR4) is the backend's choice too: the model checks that
each claimed item is the oldest item of a group that may be served, of the
highest priority any such group holds (GR5), under every limit (GR6, GR7) and
pause (GR8), and that a claim stops short only when no group may be served.

    from workhive.testing import StorageStatefulContract

    class TestMyBackendModel(StorageStatefulContract):
        def make_backend(self, clock, tmp_path):
            return MyBackend(f"mystore:///{tmp_path}/db", clock=clock)

The model test runs on every backend: ``make_backend`` always receives a
``ManualClock``. An embedded backend takes it as ``clock=``; a server backend
(time from its database) takes ``clock_offset=clock.offset`` and adds the
offset to its server's time, so the model moves every backend's clock.
Hypothesis rules are synchronous, so the machine owns an asyncio loop and
runs each call on it.

Profiles (registered on import, chosen with ``HYPOTHESIS_PROFILE``): ``ci``
is derandomised (the same examples on every run, so a catch never depends on
a lucky seed); ``deep`` runs many more and longer examples, for a backend
author's opt-in hunt.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import pathlib
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, ClassVar, TypeVar

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument as HypothesisInvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from workhive.errors import LeaseLost, WorkerLost
from workhive.hive import Hive
from workhive.models import ItemState, WorkItem
from workhive.plugin_manager import PluginManager
from workhive.storage import Cancels, KeepsSteps, ServesGroups, StorageBackend
from workhive.testing.clock import ManualClock

__all__ = ["StorageStatefulContract"]

T = TypeVar("T")
POOLS = ("p", "q")
WORKERS = ("w1", "w2")
DEDUP_KEYS = ("k1", "k2")
GROUPS = ("g1", "g2", "g3")
STEP_KEYS = ("s1", "s2", "s3")
MAX_ATTEMPTS = 3
REAP_AFTER = 20.0

PROFILES = {
    # derandomize: the examples are a function of the test, never of the run.
    "ci": {"derandomize": True, "database": None, "deadline": None},
    "deep": {"deadline": None},
}


def register_profiles() -> None:
    """Register the ``ci`` and ``deep`` profiles (unless the project registered its own) and load the chosen one."""
    for name, options in PROFILES.items():
        try:
            settings.get_profile(name)
        except HypothesisInvalidArgument:
            settings.register_profile(name, **options)  # type: ignore[arg-type]
    chosen = os.environ.get("HYPOTHESIS_PROFILE")
    if chosen in PROFILES:  # another name is the project's own, loaded by its own conftest
        settings.load_profile(chosen)


register_profiles()


def model_settings(profile: str, max_examples: int, steps: int) -> settings:
    """The model test's settings under ``profile``: ours for ci/deep even if a project registered its own."""
    return settings(
        settings(),
        **PROFILES.get(profile, {"deadline": None}),  # type: ignore[arg-type]
        max_examples=max_examples,
        stateful_step_count=steps,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@attrs.define
class _Item:
    """The model's view of one item."""

    id: str
    pool: str
    priority: int
    max_attempts: int
    state: ItemState = ItemState.PENDING
    attempts: int = 0
    token: int = 0
    available_at: float = 0.0
    claimed_by: str | None = None
    lease_expires_at: float | None = None
    lease_seconds: float | None = None
    dedup_key: str | None = None
    finished_at: float | None = None
    releases: int = 0
    #: the backend's own time from which it is (or will be) claimable, as last read: on a server
    #: clock two items due at the same model time are ordered by when the backend set them
    seen_at: float | None = None
    #: durable steps (backends with ``KeepsSteps``): (key, token of the claim that stored it), in store order
    steps: list[tuple[str, int]] = attrs.field(factory=list)
    group: str | None = None


@attrs.define
class _Groups:
    """The model's group settings of one pool (backends with ``ServesGroups``)."""

    weights: dict[str, float] = attrs.field(factory=dict)
    limits: dict[str, int] = attrs.field(factory=dict)
    default_limit: int | None = None
    pool_limit: int | None = None
    paused: dict[str, float] = attrs.field(factory=dict)  # group -> model time its pause ends

    def limit_of(self, group: str | None) -> int | None:
        if group is None:
            return None  # ungrouped items: the pool limit alone
        return self.limits.get(group, self.default_limit)


@attrs.define
class _Worker:
    last_heartbeat: float
    lost: bool = False


class _StorageMachine(RuleBasedStateMachine):
    """Subclassed per test run with ``new_backend`` bound to the contract's ``make_backend``."""

    #: how far a backend's reported times may lie from the model's (0: the backend runs on the ManualClock)
    tol: float = 0.0
    #: every duration the model uses is a multiple of this: far more than ``tol`` and than the real time
    #: one example takes, so no boundary lies near enough to ``now`` to blur
    scale: float = 1.0
    #: the clock the backend's server runs on (when ``tol``)
    wall: Callable[[], float] = staticmethod(time.time)

    def new_backend(self, clock: ManualClock) -> StorageBackend:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.hive = Hive(
            self.new_backend(self.clock), manager=PluginManager(entry_points=False), max_attempts=MAX_ATTEMPTS
        )
        self.run(self.hive.open())
        # A server backend's time is its server's running clock plus clock.offset(). The model's
        # clock runs with it: the backend's time when read, plus the real time since (read after
        # the call returns, so the model lags the backend by at most that call's way back). Its
        # times then differ from the backend's by one call's duration, however long an example
        # takes on a loaded machine; a model that stood still drifted behind by the whole example.
        self.base = 0.0
        self.started: float | None = None
        if self.tol:
            self.base = self.run(self.hive.now()) - self.clock()
            self.started = self.wall()
        self.items: dict[str, _Item] = {}
        self.claims: list[WorkItem] = []  # every claim ever returned, stale ones included
        self.workers: dict[str, _Worker] = {}
        self.purged: dict[str, str] = {}  # id -> pool of every purged item
        self.serves_groups = isinstance(self.hive.storage, ServesGroups)
        self.groups = {pool: _Groups() for pool in POOLS}
        for worker_id in WORKERS:
            record = self.run(self.hive.workers.register(worker_id=worker_id, pools=POOLS))
            assert self.close(record.last_heartbeat, self.now)
            self.workers[worker_id] = _Worker(self.now)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def check_steps(self, items: Iterable[_Item]) -> None:
        """[ST4] the backend holds exactly the model's steps of ``items``, in store order.

        Checked where steps change (a write, a fresh requeue) and once for every item at the
        end, not after every operation: a read per item per step would make each example run
        long enough, on a loaded machine, to blur a server clock's times past the tolerance.
        """
        backend = self.hive.storage
        if not isinstance(backend, KeepsSteps):
            return
        for m in items:
            stored = [(s.key, s.token) for s in self.run(backend.step_list(m.pool, m.id))]
            assert stored == m.steps, f"steps of item {m.id} differ: backend {stored}, model {m.steps}"

    def teardown(self) -> None:
        try:
            if hasattr(self, "items"):
                self.check_steps(self.items.values())  # kept across every change the example made
            self.run(self.hive.close())
        finally:
            self.loop.close()

    @property
    def now(self) -> float:
        if self.started is None:
            return self.clock()
        return self.clock() + self.base + (self.wall() - self.started)

    def close(self, seen: float | None, want: float | None) -> bool:
        """A time the backend reported equals the model's (within ``tol`` on a server clock)."""
        if seen is None or want is None:
            return seen is want
        return seen == want if not self.tol else abs(seen - want) <= self.tol

    # -- model helpers --------------------------------------------------------
    def pick_claim(self, i: int) -> WorkItem:
        """Half the time one of the latest claims (likely still live), else any claim ever made."""
        if i % 2:
            return self.claims[-1 - (i // 2) % min(4, len(self.claims))]
        return self.claims[(i // 2) % len(self.claims)]

    def holds(self, claim: WorkItem) -> bool:
        """Whether ``claim`` is still the live, unexpired claim of its item."""
        m = self.items.get(claim.id)
        return (
            m is not None
            and m.state is ItemState.CLAIMED
            and m.token == claim.token
            and m.lease_expires_at is not None
            and m.lease_expires_at > self.now
        )

    def expired(self, m: _Item) -> bool:
        return m.state is ItemState.CLAIMED and m.lease_expires_at is not None and m.lease_expires_at <= self.now

    def unclaim(self, m: _Item, available_at: float) -> None:
        m.state = ItemState.PENDING
        m.available_at = available_at
        m.claimed_by = m.lease_expires_at = m.lease_seconds = None

    def finish(self, m: _Item, state: ItemState, at: float) -> None:
        m.state, m.finished_at = state, at
        m.lease_expires_at = m.lease_seconds = None

    def adopt_expiry(self, m: _Item, seen: WorkItem) -> None:
        """The backend settled ``m``'s expired lease (lazily): check it is the settlement the contract allows."""
        where = f"item {m.id} (model {m}, backend {seen})"
        assert m.lease_expires_at is not None
        if m.attempts >= m.max_attempts:
            assert seen.state is ItemState.POISONED, f"exhausted expired item not poisoned: {where}"
            assert seen.finished_at is not None, where
            assert m.lease_expires_at - self.tol <= seen.finished_at <= self.now + self.tol, where
            self.finish(m, ItemState.POISONED, seen.finished_at)
        else:
            assert seen.state is ItemState.PENDING, f"expired item neither claimed nor pending: {where}"
            self.unclaim(m, m.lease_expires_at)  # available from its expiry, not from when it was noticed

    def candidates(self, pool: str) -> list[_Item]:
        """Claimable items of ``pool`` in claim order (priority, then available time, then push order)."""
        order = {item_id: n for n, item_id in enumerate(self.items)}
        found = [
            m
            for m in self.items.values()
            if m.pool == pool
            and (
                (m.state is ItemState.PENDING and m.available_at <= self.now)
                or (self.expired(m) and m.attempts < m.max_attempts)
            )
        ]
        return sorted(found, key=lambda m: (-m.priority, self.order_time(m), order[m.id]))

    def order_time(self, m: _Item) -> float:
        return m.seen_at if self.tol and m.seen_at is not None else self.available_since(m)

    def available_since(self, m: _Item) -> float:
        if m.state is ItemState.CLAIMED:
            assert m.lease_expires_at is not None
            return m.lease_expires_at
        return m.available_at

    def give_back(self, m: _Item, spend: bool) -> str:
        """release_by_worker / reap on one held item; returns "released", "poisoned" or "either" (expired)."""
        if self.expired(m):
            seen = self.run(self.hive.storage.get(m.pool, m.id))
            assert seen is not None, f"item {m.id} vanished"
            where = f"item {m.id} (model {m}, backend {seen})"
            if seen.state is ItemState.CLAIMED:
                return "either"  # left for lazy settlement; the invariant checks it later
            if seen.state is ItemState.POISONED:
                assert m.attempts >= m.max_attempts or (spend and m.attempts >= m.max_attempts), where
                assert seen.finished_at is not None and m.lease_expires_at is not None, where
                assert m.lease_expires_at - self.tol <= seen.finished_at <= self.now + self.tol, where
                self.finish(m, ItemState.POISONED, seen.finished_at)
                return "either"
            assert seen.state is ItemState.PENDING, where
            if seen.attempts == m.attempts - 1 and not spend:  # released by the call: refunded, ready now
                assert self.close(seen.available_at, self.now), where
                m.attempts -= 1
                m.releases += 1
                self.unclaim(m, self.now)
            else:  # settled as an expiry, or released with the attempt spent
                assert seen.attempts == m.attempts, where
                expiry = m.lease_expires_at
                assert expiry is not None
                at_expiry = self.close(seen.available_at, expiry)
                assert at_expiry or self.close(seen.available_at, self.now), where
                self.unclaim(m, expiry if at_expiry else self.now)
            return "either"
        if not spend:
            m.attempts -= 1
            m.releases += 1
        if spend and m.attempts >= m.max_attempts:
            self.finish(m, ItemState.POISONED, self.now)
            return "poisoned"
        self.unclaim(m, self.now)
        return "released"

    # -- rules ----------------------------------------------------------------
    @rule(
        pool=st.sampled_from(POOLS),
        priority=st.integers(0, 2),
        delay=st.sampled_from([0.0, 0.0, 5.0]),
        max_attempts=st.integers(1, MAX_ATTEMPTS),
        key=st.sampled_from((None, None, *DEDUP_KEYS)),
        group=st.sampled_from((None, None, *GROUPS)),
    )
    def push(
        self, pool: str, priority: int, delay: float, max_attempts: int, key: str | None, group: str | None
    ) -> None:
        group = group if self.serves_groups else None
        item_id = self.run(
            self.hive.pool(pool).push(
                len(self.items),
                priority=priority,
                delay=delay * self.scale,
                max_attempts=max_attempts,
                dedup_key=key,
                group=group,
            )
        )
        if key is not None:
            holders = [
                m
                for m in self.items.values()
                if m.pool == pool and m.dedup_key == key and m.state in (ItemState.PENDING, ItemState.CLAIMED)
            ]
            if item_id in {m.id for m in holders}:
                return
            for m in holders:  # a new item: only if no holder is live any more
                assert self.expired(m) and m.attempts >= m.max_attempts, (
                    f"push with dedup key {key!r} made item {item_id} while {m.id} ({m.state}) holds the key"
                )
                seen = self.run(self.hive.storage.get(pool, m.id))
                assert seen is not None and seen.state is ItemState.POISONED, (
                    f"push with dedup key {key!r} made a new item while {m.id} still holds it"
                )
                self.adopt_expiry(m, seen)
        assert item_id not in self.items, "push returned the id of an existing item"
        assert item_id not in self.purged, "push reused the id of a purged item"
        pushed = self.run(self.hive.storage.get(pool, item_id))
        assert pushed is not None
        self.items[item_id] = _Item(
            item_id,
            pool,
            priority,
            max_attempts,
            token=pushed.token,
            available_at=self.now + delay * self.scale,
            dedup_key=key,
            group=group,
        )
        assert self.close(pushed.available_at, self.items[item_id].available_at), pushed

    @rule(
        pool=st.sampled_from(POOLS),
        worker=st.sampled_from(WORKERS),
        lease=st.sampled_from([10.0, 30.0]),
        n=st.integers(1, 3),
    )
    def claim(self, pool: str, worker: str, lease: float, n: int) -> None:
        lease *= self.scale
        candidates = self.candidates(pool)
        claimed = self.run(self.hive.pool(pool).claim_many(n, worker, lease=lease))
        if self.serves_groups:
            self.check_group_claims(pool, n, candidates, claimed)
        else:
            assert [i.id for i in claimed] == [m.id for m in candidates[:n]], (
                f"claim_many({n}) returned {[i.id for i in claimed]}; in claim order the model has "
                f"{[m.id for m in candidates]}"
            )
        for item in claimed:
            m = self.items[item.id]
            assert item.token > m.token, "a claim must raise the fencing token"
            assert self.close(item.available_at, self.available_since(m)), f"claimed {item} keeps its available time"
            m.available_at = self.available_since(m)
            m.state, m.claimed_by, m.token = ItemState.CLAIMED, worker, item.token
            m.attempts += 1
            m.lease_seconds, m.lease_expires_at = lease, self.now + lease
            assert (item.state, item.attempts, item.claimed_by) == (ItemState.CLAIMED, m.attempts, worker)
            assert self.close(item.lease_expires_at, m.lease_expires_at), item
            assert (item.lease_seconds, item.releases) == (lease, m.releases), item
            assert item.group == m.group, f"[GR1] claimed {item} lost its group {m.group!r}"
            self.claims.append(item)

    def in_flight(self, pool: str) -> Counter[str | None]:
        """Unexpired claims of ``pool`` per group."""
        return Counter(
            m.group
            for m in self.items.values()
            if m.pool == pool and m.state is ItemState.CLAIMED and not self.expired(m)
        )

    def servable_heads(self, pool: str, left: list[_Item], flying: Counter[str | None]) -> dict[str | None, _Item]:
        """The oldest claimable item (C1 order) of each group that may be served now: not paused, under its limit."""
        settings = self.groups[pool]
        heads: dict[str | None, _Item] = {}
        for m in left:
            heads.setdefault(m.group, m)
        servable = {}
        for group, head in heads.items():
            until = settings.paused.get(group) if group is not None else None
            limit = settings.limit_of(group)
            if (until is None or until <= self.now) and (limit is None or flying[group] < limit):
                servable[group] = head
        return servable

    def check_group_claims(self, pool: str, n: int, candidates: list[_Item], claimed: list[WorkItem]) -> None:
        """[GR5][GR6][GR7][GR8] each claimed item, in turn, is the head of a servable group with the highest
        priority any servable group holds; the pool stays under its limit; a short batch means none was left."""
        settings = self.groups[pool]
        flying = self.in_flight(pool)
        left = list(candidates)
        for item in claimed:
            where = (
                f"claim_many({n}) returned {[(i.id, i.group, i.priority) for i in claimed]}; claimable in C1 order "
                f"{[(m.id, m.group, m.priority) for m in candidates]}, in flight {dict(flying)}, {settings}"
            )
            assert settings.pool_limit is None or sum(flying.values()) < settings.pool_limit, f"[GR7] {where}"
            servable = self.servable_heads(pool, left, flying)
            m = self.items.get(item.id)
            assert m is not None and servable.get(m.group) is m, f"[GR6][GR8] {item.id} was not servable: {where}"
            assert m.priority == max(h.priority for h in servable.values()), f"[GR5] {where}"
            left.remove(m)
            flying[m.group] += 1
        if len(claimed) < n:
            full = settings.pool_limit is not None and sum(flying.values()) >= settings.pool_limit
            servable = self.servable_heads(pool, left, flying)
            assert full or not servable, (
                f"claim_many({n}) stopped after {len(claimed)}: {[m.id for m in servable.values()]} could be served"
            )

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000), with_result=st.booleans())
    def complete(self, i: int, with_result: bool) -> None:
        claim = self.pick_claim(i)
        pool = self.hive.pool(claim.pool)
        if self.holds(claim):
            self.run(pool.complete(claim, {"i": i} if with_result else None))
            self.finish(self.items[claim.id], ItemState.DONE, self.now)
        else:
            self.expect_lease_lost(pool.complete(claim))

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000), retry_in=st.sampled_from([0.0, 5.0]), poison=st.booleans())
    def fail(self, i: int, retry_in: float, poison: bool) -> None:
        retry_in *= self.scale
        claim = self.pick_claim(i)
        pool = self.hive.pool(claim.pool)
        if not self.holds(claim):
            self.expect_lease_lost(pool.fail(claim, "boom", retry_in=retry_in, poison=poison))
            return
        state = self.run(pool.fail(claim, "boom", retry_in=retry_in, poison=poison))
        m = self.items[claim.id]
        if poison or m.attempts >= m.max_attempts:
            assert state is ItemState.POISONED
            self.finish(m, ItemState.POISONED, self.now)
        else:
            assert state is ItemState.PENDING
            self.unclaim(m, self.now + retry_in)

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000), delay=st.sampled_from([0.0, 5.0]))
    def release(self, i: int, delay: float) -> None:
        delay *= self.scale
        claim = self.pick_claim(i)
        pool = self.hive.pool(claim.pool)
        if not self.holds(claim):
            self.expect_lease_lost(pool.release(claim, delay=delay))
            return
        self.run(pool.release(claim, delay=delay))
        m = self.items[claim.id]
        m.attempts -= 1
        m.releases += 1
        self.unclaim(m, self.now + delay)

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000), lease=st.sampled_from([10.0, 30.0]))
    def extend(self, i: int, lease: float) -> None:
        lease *= self.scale
        claim = self.pick_claim(i)
        pool = self.hive.pool(claim.pool)
        if not self.holds(claim):
            self.expect_lease_lost(pool.extend(claim, lease))
            return
        expiry = self.run(pool.extend(claim, lease))
        m = self.items[claim.id]
        m.lease_seconds, m.lease_expires_at = lease, self.now + lease
        assert self.close(expiry, m.lease_expires_at), (expiry, m)

    @rule(seconds=st.sampled_from([1.0, 5.0, 11.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds * self.scale)

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000))
    def expire(self, i: int) -> None:
        """Move the clock exactly to a claim's expiry: the boundary where it stops being valid."""
        m = self.items.get(self.pick_claim(i).id)
        if m is not None and m.state is ItemState.CLAIMED and m.lease_expires_at is not None:
            ahead = m.lease_expires_at - self.now  # read once: a running model clock moves between reads
            if ahead > 0:
                self.clock.advance(ahead)

    @rule(worker=st.sampled_from(WORKERS))
    def heartbeat(self, worker: str) -> None:
        w = self.workers[worker]
        if w.lost:
            try:
                self.run(self.hive.workers.heartbeat(worker))
            except WorkerLost:
                return
            raise AssertionError(f"heartbeat of lost worker {worker} did not raise WorkerLost")
        record = self.run(self.hive.workers.heartbeat(worker))
        assert self.close(record.last_heartbeat, self.now), record
        w.last_heartbeat = self.now
        for m in self.items.values():
            if m.state is ItemState.CLAIMED and m.claimed_by == worker and not self.expired(m):
                assert m.lease_seconds is not None
                m.lease_expires_at = self.now + m.lease_seconds

    @rule(worker=st.sampled_from(WORKERS))
    def register(self, worker: str) -> None:
        self.run(self.hive.workers.register(worker_id=worker, pools=POOLS))
        self.workers[worker] = _Worker(self.now)

    @rule()
    def reap(self) -> None:
        threshold = REAP_AFTER * self.scale
        live = {wid: self.now - w.last_heartbeat - threshold for wid, w in self.workers.items() if not w.lost}
        due = {wid for wid, over in live.items() if over > 0 and not (self.tol and over <= self.tol)}
        # Exactly at the threshold on a server clock the real time an example takes tips it either way.
        maybe = {wid for wid, over in live.items() if self.tol and abs(over) <= self.tol}
        reaped = self.run(self.hive.workers.reap(threshold=threshold))
        got = {r.worker_id for r in reaped}
        assert due <= got <= due | maybe, f"reap took {sorted(got)}; heartbeats older than {threshold}: {sorted(due)}"
        for r in reaped:
            assert self.close(r.last_heartbeat, self.workers[r.worker_id].last_heartbeat), r
            self.workers[r.worker_id].lost = True
            held = [m for m in self.items.values() if m.state is ItemState.CLAIMED and m.claimed_by == r.worker_id]
            outcomes = [self.give_back(m, spend=True) for m in held]
            self.check_counts(f"reap of {r.worker_id}", outcomes, r.released, r.poisoned)

    @rule(
        pool=st.one_of(st.none(), st.sampled_from(POOLS)),
        worker=st.sampled_from(WORKERS),
        spend=st.booleans(),
    )
    def release_by_worker(self, pool: str | None, worker: str, spend: bool) -> None:
        held = [
            m
            for m in self.items.values()
            if m.state is ItemState.CLAIMED and m.claimed_by == worker and (pool is None or m.pool == pool)
        ]
        count = self.run(self.hive.storage.release_by_worker(pool, worker, spend))
        outcomes = [self.give_back(m, spend) for m in held]
        sure = sum(1 for o in outcomes if o != "either")
        assert sure <= count <= len(held), (
            f"release_by_worker({pool}, {worker}) gave back {count}; it held {len(held)} ({sure} unexpired)"
        )

    def check_counts(self, what: str, outcomes: list[str], released: int, poisoned: int) -> None:
        sure_released, sure_poisoned = outcomes.count("released"), outcomes.count("poisoned")
        either = outcomes.count("either")
        assert released >= sure_released and poisoned >= sure_poisoned, (
            f"{what}: released {released} and poisoned {poisoned}; expected at least {sure_released} and "
            f"{sure_poisoned} (released never counts the poisoned)"
        )
        assert released + poisoned <= sure_released + sure_poisoned + either, f"{what}: counted too many"

    @precondition(lambda self: self.claims and isinstance(self.hive.storage, KeepsSteps))
    @rule(i=st.integers(0, 10_000), key=st.sampled_from(STEP_KEYS))
    def put_step(self, i: int, key: str) -> None:
        """[ST1][ST2][ST3] a step stored under a live claim only; the first value of a key stays."""
        claim = self.pick_claim(i)
        pool = self.hive.pool(claim.pool)
        if self.holds(claim):
            self.run(pool.put_step(claim, key, {"i": i}))
            m = self.items[claim.id]
            if key not in [k for k, _ in m.steps]:
                m.steps.append((key, claim.token))
            self.check_steps([m])
        else:
            self.expect_lease_lost(pool.put_step(claim, key, {"i": i}))
            if claim.id in self.items:
                self.check_steps([self.items[claim.id]])  # the refused write changed nothing

    @precondition(lambda self: isinstance(self.hive.storage, Cancels))
    @rule(pool=st.sampled_from(POOLS), pick=st.integers(0, 10_000))
    def cancel(self, pool: str, pick: int) -> None:
        """Z1-Z3 on a backend with the optional ``cancel``: any item of the pool, live or finished."""
        mine = [m for m in self.items.values() if m.pool == pool]
        if not mine:
            return
        m = mine[pick % len(mine)]
        before = self.run(self.hive.storage.cancel(pool, [m.id]))  # type: ignore[attr-defined]
        where = f"cancel of item {m.id} (model {m}, backend said {before})"
        if self.expired(m):
            # Settled first or not (Z1): it reads CANCELLED, or POISONED when spent and settled.
            seen = self.run(self.hive.storage.get(pool, m.id))
            assert seen is not None, where
            if seen.state is ItemState.POISONED:
                assert before == [ItemState.POISONED], where
                self.adopt_expiry(m, seen)
                return
            assert before in ([ItemState.CLAIMED], [ItemState.PENDING]), where
            assert seen.state is ItemState.CANCELLED, where
            self.finish(m, ItemState.CANCELLED, self.now)
            return
        assert before == [m.state], where
        if m.state in (ItemState.PENDING, ItemState.CLAIMED):
            self.finish(m, ItemState.CANCELLED, self.now)

    @rule(
        pool=st.sampled_from(POOLS),
        pick=st.one_of(st.none(), st.integers(0, 10_000)),
        fresh=st.booleans(),
    )
    def requeue(self, pool: str, pick: int | None, fresh: bool) -> None:
        dead = [m for m in self.items.values() if m.pool == pool and m.state is ItemState.POISONED]
        cancelled = [m for m in self.items.values() if m.pool == pool and m.state is ItemState.CANCELLED]
        if pick is not None and cancelled and pick % 2:
            # Z3: a cancelled item comes back by its id, as a poisoned one does.
            m = cancelled[pick % len(cancelled)]
            assert self.run(self.hive.pool(pool).requeue([m.id])) == 1, f"requeue of cancelled {m.id}"
            self.unclaim(m, self.now)
            m.attempts, m.finished_at = 0, None
            return
        ids = None if pick is None or not dead else [dead[pick % len(dead)].id]
        if fresh and ids is not None and isinstance(self.hive.storage, KeepsSteps):
            # [ST5] requeue(fresh=True) of given ids: their steps go (an unknown id raises; these are poisoned).
            assert self.run(self.hive.pool(pool).requeue(ids, fresh=True)) == 1
            for m in dead:
                if m.id in ids:
                    self.unclaim(m, self.now)
                    m.attempts, m.finished_at, m.steps = 0, None, []
                    self.check_steps([m])
            return
        # Expired, exhausted items a lazy backend has not poisoned yet may be poisoned and requeued now.
        unsettled = [
            m for m in self.items.values() if m.pool == pool and self.expired(m) and m.attempts >= m.max_attempts
        ]
        count = self.run(self.hive.pool(pool).requeue(ids))
        chosen = dead if ids is None else [m for m in dead if m.id in ids]
        extra = 0
        if ids is None:
            for m in unsettled:
                seen = self.run(self.hive.storage.get(pool, m.id))
                if seen is not None and seen.state is ItemState.PENDING:
                    chosen.append(m)
                    extra += 1
        for m in chosen:
            self.unclaim(m, self.now)
            m.attempts, m.finished_at = 0, None
        assert count == len(chosen), f"requeue counted {count}; {len(chosen) - extra} poisoned (+{extra} lazily)"

    @rule(pool=st.sampled_from(POOLS), older_than=st.sampled_from([0.0, 5.0, 30.0]))
    def purge(self, pool: str, older_than: float) -> None:
        older_than *= self.scale
        cutoff = self.now - older_than
        finished = [
            (m, m.finished_at - cutoff)
            for m in self.items.values()
            if m.pool == pool
            and m.state in (ItemState.DONE, ItemState.POISONED, ItemState.CANCELLED)
            and m.finished_at is not None
        ]
        due = [m for m, early in finished if early < 0 and not (self.tol and -early <= self.tol)]
        maybe = [m for m, early in finished if self.tol and abs(early) <= self.tol]
        count = self.run(self.hive.pool(pool).purge(older_than))
        assert len(due) <= count <= len(due) + len(maybe), (
            f"purge(older_than={older_than}) deleted {count}; {len(due)} finished before it"
        )
        gone = due + [m for m in maybe if self.run(self.hive.storage.get(pool, m.id)) is None]
        assert len(gone) == count
        for m in gone:
            del self.items[m.id]
            self.purged[m.id] = m.pool
            if isinstance(self.hive.storage, KeepsSteps):  # [ST5] its steps went with it
                assert self.run(self.hive.storage.step_list(m.pool, m.id)) == [], f"purged {m.id} kept its steps"

    @precondition(lambda self: self.serves_groups)
    @rule(pool=st.sampled_from(POOLS), group=st.sampled_from(GROUPS), weight=st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    def set_group_weight(self, pool: str, group: str, weight: float) -> None:
        self.run(self.hive.pool(pool).set_group_weight(group, weight))
        self.groups[pool].weights[group] = weight

    @precondition(lambda self: self.serves_groups)
    @rule(
        pool=st.sampled_from(POOLS),
        group=st.sampled_from((None, *GROUPS)),
        limit=st.sampled_from((None, 1, 1, 2)),
    )
    def set_group_limit(self, pool: str, group: str | None, limit: int | None) -> None:
        """[GR6] a group's own limit, or (group None) the default of every named group without one."""
        settings = self.groups[pool]
        if group is None:
            self.run(self.hive.pool(pool).set_default_group_limit(limit))
            settings.default_limit = limit
            return
        self.run(self.hive.pool(pool).set_group_limit(group, limit))
        if limit is None:
            settings.limits.pop(group, None)
        else:
            settings.limits[group] = limit

    @precondition(lambda self: self.serves_groups)
    @rule(pool=st.sampled_from(POOLS), limit=st.sampled_from((None, 1, 2, 3)))
    def set_pool_limit(self, pool: str, limit: int | None) -> None:
        self.run(self.hive.pool(pool).set_limit(limit))
        self.groups[pool].pool_limit = limit

    @precondition(lambda self: self.serves_groups)
    @rule(pool=st.sampled_from(POOLS), group=st.sampled_from(GROUPS), seconds=st.sampled_from((None, 5.0, 11.0)))
    def pause_group(self, pool: str, group: str, seconds: float | None) -> None:
        """[GR8] claims skip the group until now + seconds (a multiple of the scale: never a blurred boundary)."""
        self.run(self.hive.pool(pool).pause_group(group, None if seconds is None else seconds * self.scale))
        if seconds is None:
            self.groups[pool].paused.pop(group, None)
        else:
            self.groups[pool].paused[group] = self.now + seconds * self.scale

    @precondition(lambda self: self.serves_groups)
    @rule(pool=st.sampled_from(POOLS))
    def group_report(self, pool: str) -> None:
        """[GR9] the report's counts, settings and groups are the model's (a rule: it may settle expired leases)."""
        report = self.run(self.hive.pool(pool).groups())
        settings = self.groups[pool]
        counts: dict[str | None, list[int]] = {}  # group -> [in flight, ready, waiting]
        for m in self.items.values():
            if m.pool != pool:
                continue
            if m.state is ItemState.CLAIMED:
                if not self.expired(m):
                    counts.setdefault(m.group, [0, 0, 0])[0] += 1
                elif m.attempts < m.max_attempts:  # an expired claim is ready again; a spent one is poisoned
                    counts.setdefault(m.group, [0, 0, 0])[1] += 1
            elif m.state is ItemState.PENDING:
                counts.setdefault(m.group, [0, 0, 0])[1 if m.available_at <= self.now else 2] += 1
        paused = {g: until for g, until in settings.paused.items() if until > self.now}
        names = set(counts) | set(settings.weights) | set(settings.limits) | set(paused)
        want = [
            (
                name,
                settings.weights.get(name, 1.0) if name is not None else 1.0,
                settings.limits.get(name) if name is not None else None,
                *counts.get(name, [0, 0, 0]),
            )
            for name in sorted(names, key=lambda g: (g is not None, g or ""))
        ]
        got = [(g.group, g.weight, g.limit, g.in_flight, g.ready, g.waiting) for g in report.groups]
        assert got == want, f"group_report({pool}) = {report}; the model has {want}"
        assert (report.pool, report.pool_limit, report.default_limit) == (
            pool,
            settings.pool_limit,
            settings.default_limit,
        ), report
        for g in report.groups:
            want_until = None if g.group is None else paused.get(g.group)
            assert self.close(g.paused_until, want_until), f"paused_until of {g.group}: {report}"

    def expect_lease_lost(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            self.run(coro)
        except LeaseLost:
            return
        raise AssertionError("a stale or expired claim was accepted; expected LeaseLost")

    # -- the check after every step --------------------------------------------
    @invariant()
    def backend_matches_model(self) -> None:
        if not hasattr(self, "items"):
            return
        for m in self.items.values():
            seen = self.run(self.hive.storage.get(m.pool, m.id))
            assert seen is not None, f"item {m.id} vanished"
            for other in POOLS:
                if other != m.pool:
                    assert self.run(self.hive.storage.get(other, m.id)) is None, f"{m.id} read through pool {other}"
            where = f"item {m.id} (model {m}, backend {seen})"
            assert seen.token == m.token, f"token differs: {where}"
            assert seen.attempts == m.attempts, f"attempts differ: {where}"
            assert seen.releases == m.releases, f"releases differ: {where}"
            assert seen.group == m.group, f"[GR1] group differs: {where}"
            if self.expired(m) and seen.state is not ItemState.CLAIMED:
                self.adopt_expiry(m, seen)
                continue
            assert seen.state is m.state, f"state differs: {where}"
            if m.state is ItemState.CLAIMED:
                assert seen.claimed_by == m.claimed_by, f"holder differs: {where}"
                assert self.close(seen.lease_expires_at, m.lease_expires_at), f"lease differs: {where}"
                m.seen_at = seen.lease_expires_at
                assert seen.lease_seconds == m.lease_seconds, f"lease_seconds differs: {where}"
            elif m.state is ItemState.PENDING:
                assert self.close(seen.available_at, m.available_at), f"available_at differs: {where}"
                m.seen_at = seen.available_at
                assert (seen.claimed_by, seen.lease_expires_at, seen.lease_seconds) == (None, None, None), where
            else:
                assert self.close(seen.finished_at, m.finished_at), f"finished_at differs: {where}"
                assert (seen.lease_expires_at, seen.lease_seconds) == (None, None), where
        for item_id, pool in self.purged.items():
            assert self.run(self.hive.storage.get(pool, item_id)) is None, f"purged item {item_id} is back"

    @rule()
    def stats(self) -> None:
        # A rule rather than part of the invariant: stats may settle expired
        # leases, which would hide a backend that accepts an expired claim.
        for pool in POOLS:
            got = self.run(self.hive.storage.stats(pool))
            want = {"pending": 0, "delayed": 0, "claimed": 0, "done": 0, "poisoned": 0, "cancelled": 0}
            ready_since: list[float] = []
            for m in self.items.values():
                if m.pool != pool:
                    continue
                if m.state is ItemState.PENDING:
                    ready = m.available_at <= self.now
                    want["pending" if ready else "delayed"] += 1
                    if ready:
                        ready_since.append(m.available_at)
                elif self.expired(m):  # counted as what it has become
                    spent = m.attempts >= m.max_attempts
                    want["poisoned" if spent else "pending"] += 1
                    if not spent:
                        assert m.lease_expires_at is not None
                        ready_since.append(m.lease_expires_at)
                else:
                    want[m.state.value] += 1
            seen = {k: getattr(got, k) for k in want}
            assert seen == want, f"stats({pool}) = {got}; the model counts {want}"
            oldest = min(ready_since, default=None)
            assert self.close(got.oldest_pending_at, oldest), f"stats({pool}).oldest_pending_at: {got}, want {oldest}"
        have_items = sorted({m.pool for m in self.items.values()})
        assert self.run(self.hive.pools()) == have_items


class StorageStatefulContract:
    """Subclass and override ``make_backend`` (same signature as ``StorageContract``'s).

    ``clock`` is always a ``ManualClock``: pass it as ``clock=`` (embedded
    backends) or as ``clock_offset=clock.offset`` (server backends, which also
    set ``clock_drift``)::

        class TestMyServerModel(StorageStatefulContract):
            clock_drift = 5.0  # one storage call never takes longer than this in real time

            def make_backend(self, clock, tmp_path):
                return MyServerStore(url, clock_offset=clock.offset)
    """

    #: examples and steps per example, per profile (HYPOTHESIS_PROFILE=ci or deep; anything else: default)
    max_examples: ClassVar[int] = 200
    ci_max_examples: ClassVar[int] = 75
    deep_max_examples: ClassVar[int] = 2000
    step_count: ClassVar[int] = 50
    deep_step_count: ClassVar[int] = 100
    #: 0 for a backend on the ManualClock (``clock=``). A server backend (``clock_offset=clock.offset``)
    #: sets the most seconds of real time one storage call may take: its server's clock keeps running,
    #: and so does the model's, so the two compare times within this much (plus a second).
    clock_drift: ClassVar[float] = 0.0
    #: on a running clock, every duration the model uses is a multiple of this many seconds: no
    #: example takes that long in real time, so no lease, delay or pause ends near a step by itself
    running_clock_scale: ClassVar[float] = 3600.0
    #: the clock a server backend's time runs on (its server on this machine: the wall clock); the
    #: model's runs on it too. A test of the suite itself may pass a clock that runs faster.
    server_clock: ClassVar[Callable[[], float]] = staticmethod(time.time)

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> StorageBackend:
        """Return an unopened backend whose time ``clock`` moves (``clock=clock`` or ``clock_offset=clock.offset``)."""
        raise NotImplementedError("override make_backend() in your StorageStatefulContract subclass")

    def test_storage_matches_the_model(self, tmp_path: pathlib.Path) -> None:
        """[F2][P2][P3][C1][A1][S1][X1][X2][G1][L3][T1][T2][T3][Q1][Q2][U1][W2][W3][W5][R1][ST1][ST2][ST4][ST5][Z1][Z2][Z3][GR1][GR5][GR6][GR7][GR8][GR9]
        random sequences of operations leave the backend where a reference model says they must.

        After every step each item's state, attempts, token and lease, the stats and the pools are
        compared with the model's (the table in ``workhive/storage.py`` lists these rules as [model]).
        """
        contract = self
        runs = itertools.count()

        tolerance = self.clock_drift + 1.0 if self.clock_drift else 0.0

        class Machine(_StorageMachine):
            tol = tolerance
            wall = staticmethod(contract.server_clock)  # type: ignore[misc]  # a plain function, not a method
            scale = max(contract.running_clock_scale, float(math.ceil(4 * tolerance))) if tolerance else 1.0

            def new_backend(self, clock: ManualClock) -> StorageBackend:
                directory = tmp_path / f"run-{next(runs)}"
                directory.mkdir()
                return contract.make_backend(clock, directory)

        profile = os.environ.get("HYPOTHESIS_PROFILE", "")
        examples, steps = {
            "ci": (self.ci_max_examples, self.step_count),
            "deep": (self.deep_max_examples, self.deep_step_count),
        }.get(profile, (self.max_examples, self.step_count))
        run_state_machine_as_test(Machine, settings=model_settings(profile, examples, steps))
