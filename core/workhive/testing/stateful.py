"""The storage model test: random operation sequences against a reference model.

A Hypothesis ``RuleBasedStateMachine`` drives push, claim, complete, fail,
release, extend, heartbeat, reap, requeue and the passing of time against a
backend through the public facade, mirrors each step on a small pure-Python
model, and after every step checks each item's state, attempts, token and
lease against what the backend reports.

Where the contract lets a backend choose (an expired lease may be settled
lazily: the item reads as CLAIMED until something looks at it, or already as
PENDING/POISONED), the model accepts both and adopts what it observes.

    from workhive.testing import StorageStatefulContract

    class TestMyBackendModel(StorageStatefulContract):
        def make_backend(self, clock, tmp_path):
            return MyBackend(f"mystore:///{tmp_path}/db", clock=clock)

The backend must honour the injected clock (``ManualClock``). Hypothesis rules
are synchronous, so the machine owns an asyncio loop and runs each call on it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pathlib
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, TypeVar

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from workhive.errors import LeaseLost, WorkerLost
from workhive.hive import Hive
from workhive.models import ItemState, WorkItem
from workhive.plugin_manager import PluginManager
from workhive.storage import StorageBackend
from workhive.testing.clock import ManualClock

__all__ = ["StorageStatefulContract"]

T = TypeVar("T")
POOLS = ("p", "q")
WORKERS = ("w1", "w2")
MAX_ATTEMPTS = 3
REAP_AFTER = 20.0


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


@attrs.define
class _Worker:
    last_heartbeat: float
    lost: bool = False


class _StorageMachine(RuleBasedStateMachine):
    """Subclassed per test run with ``new_backend`` bound to the contract's ``make_backend``."""

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
        self.items: dict[str, _Item] = {}
        self.claims: list[WorkItem] = []  # every claim ever returned, stale ones included
        self.workers: dict[str, _Worker] = {}
        for worker_id in WORKERS:
            record = self.run(self.hive.workers.register(worker_id=worker_id, pools=POOLS))
            self.workers[worker_id] = _Worker(record.last_heartbeat)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            self.run(self.hive.close())
        finally:
            self.loop.close()

    @property
    def now(self) -> float:
        return self.clock()

    # -- model helpers --------------------------------------------------------
    def pick_claim(self, i: int) -> WorkItem:
        """Half the time one of the latest claims (likely still live), else any claim ever made."""
        if i % 2:
            return self.claims[-1 - (i // 2) % min(4, len(self.claims))]
        return self.claims[(i // 2) % len(self.claims)]

    def holds(self, claim: WorkItem) -> bool:
        """Whether ``claim`` is still the live, unexpired claim of its item."""
        m = self.items[claim.id]
        return (
            m.state is ItemState.CLAIMED
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

    def candidates(self, pool: str) -> list[_Item]:
        return [
            m
            for m in self.items.values()
            if m.pool == pool
            and (
                (m.state is ItemState.PENDING and m.available_at <= self.now)
                or (self.expired(m) and m.attempts < m.max_attempts)
            )
        ]

    # -- rules ----------------------------------------------------------------
    @rule(
        pool=st.sampled_from(POOLS),
        priority=st.integers(0, 2),
        delay=st.sampled_from([0.0, 0.0, 5.0]),
        max_attempts=st.integers(1, MAX_ATTEMPTS),
    )
    def push(self, pool: str, priority: int, delay: float, max_attempts: int) -> None:
        item_id = self.run(
            self.hive.pool(pool).push(len(self.items), priority=priority, delay=delay, max_attempts=max_attempts)
        )
        assert item_id not in self.items, "push returned the id of an existing item"
        pushed = self.run(self.hive.storage.get(pool, item_id))
        assert pushed is not None
        self.items[item_id] = _Item(
            item_id, pool, priority, max_attempts, token=pushed.token, available_at=self.now + delay
        )

    @rule(
        pool=st.sampled_from(POOLS),
        worker=st.sampled_from(WORKERS),
        lease=st.sampled_from([10.0, 30.0]),
        n=st.integers(1, 3),
    )
    def claim(self, pool: str, worker: str, lease: float, n: int) -> None:
        candidates = self.candidates(pool)
        claimed = self.run(self.hive.pool(pool).claim_many(n, worker, lease=lease))
        assert len(claimed) == min(n, len(candidates)), (
            f"claim_many({n}) returned {len(claimed)} items; the model has {len(candidates)} claimable"
        )
        remaining = {m.id: m for m in candidates}
        for item in claimed:
            assert item.id in remaining, f"claimed {item.id}, which is not claimable (or was claimed twice)"
            best = max(m.priority for m in remaining.values())
            m = remaining.pop(item.id)
            assert m.priority == best, f"claimed priority {m.priority} while priority {best} was claimable"
            assert item.token > m.token, "a claim must raise the fencing token"
            m.state, m.claimed_by, m.token = ItemState.CLAIMED, worker, item.token
            m.attempts += 1
            m.lease_seconds, m.lease_expires_at = lease, self.now + lease
            assert (item.state, item.attempts, item.claimed_by) == (ItemState.CLAIMED, m.attempts, worker)
            assert item.lease_expires_at == m.lease_expires_at
            self.claims.append(item)

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000), with_result=st.booleans())
    def complete(self, i: int, with_result: bool) -> None:
        claim = self.pick_claim(i)
        pool = self.hive.pool(claim.pool)
        if self.holds(claim):
            self.run(pool.complete(claim, {"i": i} if with_result else None))
            m = self.items[claim.id]
            m.state = ItemState.DONE
            m.lease_expires_at = m.lease_seconds = None
        else:
            self.expect_lease_lost(pool.complete(claim))

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000), retry_in=st.sampled_from([0.0, 5.0]), poison=st.booleans())
    def fail(self, i: int, retry_in: float, poison: bool) -> None:
        claim = self.pick_claim(i)
        pool = self.hive.pool(claim.pool)
        if not self.holds(claim):
            self.expect_lease_lost(pool.fail(claim, "boom", retry_in=retry_in, poison=poison))
            return
        state = self.run(pool.fail(claim, "boom", retry_in=retry_in, poison=poison))
        m = self.items[claim.id]
        if poison or m.attempts >= m.max_attempts:
            assert state is ItemState.POISONED
            m.state = ItemState.POISONED
            m.lease_expires_at = m.lease_seconds = None
        else:
            assert state is ItemState.PENDING
            self.unclaim(m, self.now + retry_in)

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000), delay=st.sampled_from([0.0, 5.0]))
    def release(self, i: int, delay: float) -> None:
        claim = self.pick_claim(i)
        pool = self.hive.pool(claim.pool)
        if not self.holds(claim):
            self.expect_lease_lost(pool.release(claim, delay=delay))
            return
        self.run(pool.release(claim, delay=delay))
        m = self.items[claim.id]
        m.attempts -= 1
        self.unclaim(m, self.now + delay)

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000), lease=st.sampled_from([10.0, 30.0]))
    def extend(self, i: int, lease: float) -> None:
        claim = self.pick_claim(i)
        pool = self.hive.pool(claim.pool)
        if not self.holds(claim):
            self.expect_lease_lost(pool.extend(claim, lease))
            return
        expiry = self.run(pool.extend(claim, lease))
        m = self.items[claim.id]
        m.lease_seconds, m.lease_expires_at = lease, self.now + lease
        assert expiry == m.lease_expires_at

    @rule(seconds=st.sampled_from([1.0, 5.0, 11.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: self.claims)
    @rule(i=st.integers(0, 10_000))
    def expire(self, i: int) -> None:
        """Move the clock exactly to a claim's expiry: the boundary where it stops being valid."""
        m = self.items[self.pick_claim(i).id]
        if m.state is ItemState.CLAIMED and m.lease_expires_at is not None and m.lease_expires_at > self.now:
            self.clock.advance(m.lease_expires_at - self.now)

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
        assert record.last_heartbeat == self.now
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
        due = {wid for wid, w in self.workers.items() if not w.lost and self.now - w.last_heartbeat > REAP_AFTER}
        reaped = self.run(self.hive.workers.reap(threshold=REAP_AFTER))
        assert {r.worker_id for r in reaped} == due
        for r in reaped:
            held = [m for m in self.items.values() if m.state is ItemState.CLAIMED and m.claimed_by == r.worker_id]
            live = sum(1 for m in held if not self.expired(m))
            assert live <= r.released + r.poisoned <= len(held), (
                f"reap of {r.worker_id} released {r.released} and poisoned {r.poisoned}; it held {len(held)} "
                f"items ({live} with unexpired leases)"
            )
            self.workers[r.worker_id].lost = True
            for m in held:
                if m.attempts >= m.max_attempts:
                    m.state = ItemState.POISONED
                    m.lease_expires_at = m.lease_seconds = None
                else:
                    self.unclaim(m, self.now)

    @rule(pool=st.sampled_from(POOLS), pick=st.one_of(st.none(), st.integers(0, 10_000)))
    def requeue(self, pool: str, pick: int | None) -> None:
        dead = [m for m in self.items.values() if m.pool == pool and m.state is ItemState.POISONED]
        ids = None if pick is None or not dead else [dead[pick % len(dead)].id]
        # Expired, exhausted items a lazy backend has not poisoned yet may be poisoned and requeued now.
        unsettled = [
            m for m in self.items.values() if m.pool == pool and self.expired(m) and m.attempts >= m.max_attempts
        ]
        count = self.run(self.hive.pool(pool).requeue(ids))
        chosen = dead if ids is None else [m for m in dead if m.id in ids]
        for m in chosen:
            m.state, m.attempts, m.available_at = ItemState.PENDING, 0, self.now
        extra = 0
        if ids is None:
            for m in unsettled:
                seen = self.run(self.hive.storage.get(pool, m.id))
                if seen is not None and seen.state is ItemState.PENDING:
                    m.state, m.attempts, m.available_at = ItemState.PENDING, 0, self.now
                    m.claimed_by = m.lease_expires_at = m.lease_seconds = None
                    extra += 1
        assert count == len(chosen) + extra

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
            where = f"item {m.id} (model {m}, backend {seen})"
            assert seen.token == m.token, f"token differs: {where}"
            assert seen.attempts == m.attempts, f"attempts differ: {where}"
            if self.expired(m) and seen.state is not ItemState.CLAIMED:
                # A lazily settled expiry: adopt it if it is the one the contract allows.
                if m.attempts >= m.max_attempts:
                    assert seen.state is ItemState.POISONED, f"exhausted expired item not poisoned: {where}"
                    m.state = ItemState.POISONED
                    m.lease_expires_at = m.lease_seconds = None
                else:
                    assert seen.state is ItemState.PENDING, f"expired item neither claimed nor pending: {where}"
                    assert m.lease_expires_at is not None
                    self.unclaim(m, m.lease_expires_at)
                continue
            assert seen.state is m.state, f"state differs: {where}"
            if m.state is ItemState.CLAIMED:
                assert seen.claimed_by == m.claimed_by, f"holder differs: {where}"
                assert seen.lease_expires_at == m.lease_expires_at, f"lease differs: {where}"
            elif m.state is ItemState.PENDING and m.available_at > self.now:
                assert seen.available_at == m.available_at, f"available_at differs: {where}"

    @rule()
    def stats(self) -> None:
        # A rule rather than part of the invariant: stats may settle expired
        # leases, which would hide a backend that accepts an expired claim.
        totals = [self.run(self.hive.storage.stats(p)) for p in POOLS]
        assert sum(s.total for s in totals) == len(self.items)
        done = sum(1 for m in self.items.values() if m.state is ItemState.DONE)
        assert sum(s.done for s in totals) == done
        claimed = [m for m in self.items.values() if m.state is ItemState.CLAIMED and not self.expired(m)]
        assert sum(s.claimed for s in totals) >= len(claimed)


class StorageStatefulContract:
    """Subclass and override ``make_backend`` (same signature as ``StorageContract``'s)."""

    #: the model moves time by hand; a backend on its server's clock cannot run it
    supports_manual_clock: ClassVar[bool] = True
    #: examples and steps per example; HYPOTHESIS_PROFILE=ci uses the smaller pair
    max_examples: ClassVar[int] = 200
    ci_max_examples: ClassVar[int] = 75
    step_count: ClassVar[int] = 50

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> StorageBackend:
        """Return an unopened backend that uses ``clock``."""
        raise NotImplementedError("override make_backend() in your StorageStatefulContract subclass")

    def test_storage_matches_the_model(self, tmp_path: pathlib.Path) -> None:
        if not self.supports_manual_clock:
            pytest.skip("the model test needs a backend that honours an injected clock (supports_manual_clock)")
        contract = self
        runs = itertools.count()

        class Machine(_StorageMachine):
            def new_backend(self, clock: ManualClock) -> StorageBackend:
                directory = tmp_path / f"run-{next(runs)}"
                directory.mkdir()
                return contract.make_backend(clock, directory)

        ci = os.environ.get("HYPOTHESIS_PROFILE") == "ci"
        run_state_machine_as_test(
            Machine,
            settings=settings(
                max_examples=self.ci_max_examples if ci else self.max_examples,
                stateful_step_count=self.step_count,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
