"""Groups: rules GR1-GR9 of the storage contract (the optional ``ServesGroups`` capability).

Items carry a group (a tenant); claims serve the groups with ready items in
turn (weighted), inside priority, under per-group and per-pool limits on items
in flight, skipping paused groups. Backends without ``ServesGroups`` skip this
family, except the test that the facade refuses groups on them.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
docs/groups.md explains the semantics.
"""

from __future__ import annotations

import asyncio
import math
import pathlib
import time
from collections import Counter

import pytest

from workhive.errors import ConfigError, InvalidArgument, InvalidName
from workhive.hive import Hive
from workhive.models import GroupReport, GroupStats, ItemState, Job, WorkItem
from workhive.pool import Pool
from workhive.storage import Cancels, ServesGroups
from workhive.testing.clock import ManualClock
from workhive.testing.storage.base import ContractBase


def _groups(items: list[WorkItem]) -> list[str | None]:
    return [item.group for item in items]


class GroupRules(ContractBase):
    """Rules GR1-GR9: groups, turns, weights, limits, pauses and the group report."""

    @staticmethod
    def needs_groups(hive: Hive) -> None:
        if not isinstance(hive.storage, ServesGroups):
            pytest.skip("the backend does not serve groups (the optional workhive.storage.ServesGroups)")

    async def claim_each(self, pool: Pool, count: int, lease: float) -> list[WorkItem]:
        """``count`` one-item claims in a row, each of which must find an item."""
        return [await self.must_claim(pool, "w1", lease=lease) for _ in range(count)]

    # -- GR1 ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_groups_are_kept_by_push_claim_get_and_every_way_back_to_pending(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[GR1] push, push_many, Job, claim and get keep the group (None stays None); dedup spans groups;
        fail, release, expiry, release_by_worker and requeue keep it."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        plain = await pool.push("plain")
        one = await pool.push("one", group="t1")
        many = await pool.push_many(["m0", Job("m1", group="t2"), Job("m2")], group="t1")
        loose = await pool.push_many(["l0", Job("l1", group="t2")])
        expected = {plain: None, one: "t1", many[0]: "t1", many[1]: "t2", many[2]: "t1", loose[0]: None}
        expected[loose[1]] = "t2"
        for item_id, group in expected.items():
            assert (await pool.get(item_id)).group == group, item_id
        assert await pool.push("again", dedup_key="k", group="t1") == await pool.push("dup", dedup_key="k", group="t2")
        assert await pool.push("three", dedup_key="k") == await pool.push("four", dedup_key="k", group="t1")
        deduped = await pool.push("five", dedup_key="k")
        expected[deduped] = "t1"
        claimed = await pool.claim_many(len(expected), "w1", lease=lease * 100)
        assert sorted(item.id for item in claimed) == sorted(expected)
        for item in claimed:
            assert item.group == expected[item.id]
            assert (await self.raw(hive, "jobs", item.id)).group == expected[item.id]
        by_id = {item.id: item for item in claimed}
        await pool.fail(by_id[one], "boom", retry_in=0)
        await pool.release(by_id[many[1]])
        await pool.fail(by_id[many[0]], "dead", poison=True)
        assert await pool.requeue([many[0]]) == 1
        await pool.release_by_worker("w1", spend_attempt=False)  # the rest go back too
        again = await pool.claim_many(len(expected), "w2", lease=lease)
        assert {item.id: item.group for item in again} == expected
        await self.elapse(clock, lease * 1.5)  # every one of these leases expires
        for item_id, group in expected.items():
            assert (await self.raw(hive, "jobs", item_id)).group == group
        after = await pool.claim_many(len(expected), "w3", lease=lease * 100)
        assert {item.id: item.group for item in after} == expected

    # -- GR2 ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_equal_groups_take_turns_in_a_fixed_rotation(self, hive: Hive, lease: float) -> None:
        """[GR2] three backlogged groups of equal weight (the ungrouped items one of them) pushed one after
        another are served in strict rotation, each group's items in push order."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        pushed: dict[str | None, list[str]] = {}
        for group in ("a", "b", None):
            pushed[group] = await pool.push_many([f"{group}-{n}" for n in range(6)], group=group)
        claims = await self.claim_each(pool, 18, lease * 100)
        order = _groups(claims)
        assert set(order[:3]) == {"a", "b", None}, f"the first turn did not visit each group once: {order}"
        assert all(order[n] == order[n % 3] for n in range(18)), f"not a fixed rotation: {order}"
        for group, ids in pushed.items():
            assert [item.id for item in claims if item.group == group] == ids, f"group {group} out of order"

    @pytest.mark.asyncio
    async def test_a_batch_claim_takes_turns_as_single_claims_would(self, hive: Hive, lease: float) -> None:
        """[GR2] ``claim_many(n)`` takes from the groups as n one-item claims in a row would."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        first = await pool.push_many([f"a-{n}" for n in range(4)], group="a")
        second = await pool.push_many([f"b-{n}" for n in range(4)], group="b")
        batch = await pool.claim_many(4, "w1", lease=lease * 100)
        assert Counter(_groups(batch)) == {"a": 2, "b": 2}, _groups(batch)
        assert sorted(item.id for item in batch) == sorted(first[:2] + second[:2])
        single = await self.claim_each(pool, 2, lease * 100)
        assert Counter(_groups(single)) == {"a": 1, "b": 1}, _groups(single)
        rest = await pool.claim_many(2, "w1", lease=lease * 100)
        assert Counter(_groups(rest)) == {"a": 1, "b": 1}, _groups(rest)

    @pytest.mark.asyncio
    async def test_a_run_of_turns_leaves_what_single_claims_leave(self, hive: Hive, lease: float) -> None:
        """[GR2][GR5][GR6] a batch whose turns go to one group for a while (alone at its priority, then at
        its limit, then the last with ready items) takes the same items, in the same order, as
        one-item claims do, and leaves the same turns behind it for the claims after it.

        Backends may deal such a run of turns at once rather than one at a time; the group's virtual
        time after it must be what the single claims left, or the rotation after the batch differs.
        """
        self.needs_groups(hive)
        long = lease * 100

        async def fill(pool: Pool) -> None:
            await pool.set_group_limit("c", 2)
            await pool.push_many([Job(f"a5-{n}", group="a", priority=5) for n in range(6)])
            await pool.push_many([Job(f"a1-{n}", group="a", priority=1) for n in range(8)])
            await pool.push_many([Job(f"b1-{n}", group="b", priority=1) for n in range(3)])
            await pool.push_many([Job(f"u1-{n}", priority=1) for n in range(2)])
            await pool.push_many([Job(f"c3-{n}", group="c", priority=3) for n in range(4)])

        async def both(claims: int) -> list[str]:
            taken = await batched.claim_many(claims, "w1", lease=long)
            one_by_one = await self.claim_each(single, len(taken), long)
            assert [item.data for item in taken] == [item.data for item in one_by_one]
            for pool, items in ((batched, taken), (single, one_by_one)):
                for item in items:
                    if item.group == "c":
                        await pool.complete(item)  # c's slots free for the next round
            return [str(item.data) for item in taken]

        batched, single = hive.pool("batched"), hive.pool("single")
        for pool in (batched, single):
            await fill(pool)
        first = await both(12)
        assert first[:8] == [*(f"a5-{n}" for n in range(6)), "c3-0", "c3-1"], first
        rest = await both(30)  # c's last two, then the priority-1 rotation until a alone is left
        assert len(first) + len(rest) == 23 and rest[-1] == "a1-7", rest
        for pool in (batched, single):
            await pool.push_many([Job(f"a1-more-{n}", group="a", priority=1) for n in range(4)])
            await pool.push_many([Job(f"b1-more-{n}", group="b", priority=1) for n in range(4)])
        after = await both(8)  # the turns a's run left: where a stands against b, which comes back
        assert sorted(after) == sorted([*(f"a1-more-{n}" for n in range(4)), *(f"b1-more-{n}" for n in range(4))])
        assert await single.claim("w1", lease=long) is None

    # -- GR3 ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_weights_share_the_claims(self, hive: Hive, lease: float) -> None:
        """[GR3] while backlogged, after n claims each group has taken n * w / sum(w) items, within 1 + groups."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        weights = {"a": 3.0, "b": 1.0, "c": 2.0}
        for group, weight in weights.items():
            await pool.set_group_weight(group, weight)
        for group in weights:
            await pool.push_many([f"{group}-{n}" for n in range(30)], group=group)
        taken: Counter[str | None] = Counter()
        total = sum(weights.values())
        for n in range(1, 49):
            taken[(await self.must_claim(pool, "w1", lease=lease * 100)).group] += 1
            for group, weight in weights.items():
                share = n * weight / total
                assert abs(taken[group] - share) <= 1 + len(weights), (
                    f"after {n} claims group {group} (weight {weight}) took {taken[group]}, its share is {share:.1f}"
                )

    # -- GR4 ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_a_group_that_becomes_ready_gets_no_banked_credit(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[GR4] a group whose items come due while others are backlogged is served within k claims and then
        takes no more than its share + 2; so is a group pushed to afterwards."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        await pool.push_many([f"a-{n}" for n in range(40)], group="a")
        await pool.push_many([f"b-{n}" for n in range(40)], group="b")
        # On a real clock c comes due `lease` after this moment at the earliest (the server stamps the
        # push later than it). A slow machine may not finish the early claims by then: each claim
        # records when it was asked and answered, so the rules are judged against when c was due,
        # not against how fast the claims ran.
        due_at = time.monotonic() + lease
        await pool.push_many([Job(f"c-{n}", delay=lease, group="c") for n in range(20)])
        timed: list[tuple[float, float, str | None]] = []  # (asked, answered, group) per claim

        async def claim_timed(count: int) -> None:
            for _ in range(count):
                asked = time.monotonic()
                item = await self.must_claim(pool, "w1", lease=lease * 100)
                timed.append((asked, time.monotonic(), item.group))

        await claim_timed(20)
        early = [group for asked, answered, group in timed if clock is not None or answered < due_at]
        assert "c" not in early, f"group c was claimed before it came due: {early}"  # not due yet
        await self.elapse(clock, lease * 1.5)
        # The first claim asked surely after c came due: the next one, unless a slow machine
        # already made some of the early claims after that (on a manual clock c is due only now).
        late = [n for n, (asked, _, _) in enumerate(timed) if asked >= due_at] if clock is None else []
        served_from = late[0] if late else len(timed)
        await claim_timed(15 - (len(timed) - served_from))
        after = [group for _, _, group in timed[served_from:]]
        assert "c" in after[:3], f"group c came due but was not served within 3 claims: {after}"
        for m in range(1, len(after) + 1):
            assert after[:m].count("c") <= m / 3 + 2, f"group c took a burst after coming due: {after}"
        await pool.push_many([f"d-{n}" for n in range(20)], group="d")
        later = _groups(await self.claim_each(pool, 16, lease * 100))
        assert "d" in later[:4], f"group d was pushed but not served within 4 claims: {later}"
        for m in range(1, 17):
            assert later[:m].count("d") <= m / 4 + 2, f"group d took a burst after its push: {later}"

    # -- GR5 ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_a_higher_priority_goes_first_whatever_the_turns(self, hive: Hive, lease: float) -> None:
        """[GR5][GR6] every admissible item of a higher priority is claimed before any of a lower one; a group
        at its limit is no obstacle (its items wait, lower priorities of other groups are served)."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        low = await pool.push_many([f"low-{n}" for n in range(3)], group="a")
        high = await pool.push_many([Job(f"high-{n}", priority=5, group="b") for n in range(3)])
        late = await pool.push("late-high", priority=5, group="c")
        first = await self.claim_each(pool, 4, lease * 100)
        assert sorted(item.id for item in first) == sorted([*high, late]), [item.data for item in first]
        assert late in [item.id for item in first[:2]], "group c's turn came later than one round"
        assert [item.id for item in await self.claim_each(pool, 3, lease * 100)] == low
        # A limit makes a group inadmissible: its high-priority items wait while lower ones go.
        await pool.set_group_limit("b", 1)
        held = await pool.push_many([Job(f"more-{n}", priority=9, group="b") for n in range(2)])
        lower = await pool.push_many([f"lower-{n}" for n in range(2)], group="a")
        # b already holds 3 claims (more than 1): nothing of b may be claimed.
        assert [item.id for item in await pool.claim_many(4, "w1", lease=lease * 100)] == lower
        assert await pool.claim("w1") is None
        assert (await pool.get(held[0])).state is ItemState.PENDING

    # -- GR6 ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_a_group_limit_caps_its_claims_and_every_settlement_frees_a_slot(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[GR6] never more than n unexpired claims of the group; complete, fail, release, cancel,
        release_by_worker and an expired lease each free a slot; lowering takes nothing back; None lifts it."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        await pool.set_group_limit("a", 2)
        await pool.push_many([f"a-{n}" for n in range(12)], group="a")
        await pool.push_many([f"b-{n}" for n in range(3)], group="b")
        first = await pool.claim_many(10, "w1", lease=lease * 100)
        assert Counter(_groups(first)) == {"a": 2, "b": 3}
        assert await pool.claim("w1") is None, "group a is at its limit: nothing else is claimable"
        held = [item for item in first if item.group == "a"]
        assert all(await pool.complete_many([(item, None) for item in first if item.group == "b"]))

        async def swap(settle: object) -> None:
            """Settle one held claim of a, then exactly one more claim of a fits."""
            item = held.pop(0)
            await settle(item)  # type: ignore[operator]
            again = await pool.claim_many(3, "w1", lease=lease * 100)
            assert _groups(again) == ["a"], f"after settling one claim of a, a claim took {_groups(again)}"
            held.append(again[0])

        await swap(lambda item: pool.complete(item))
        await swap(lambda item: pool.fail(item, "boom", retry_in=lease * 100))
        await swap(lambda item: pool.release(item, delay=lease * 100))
        if isinstance(hive.storage, Cancels):
            await swap(lambda item: pool.cancel([item.id]))
        # release_by_worker (what reap does to a lost worker) frees every slot its worker held
        assert await pool.release_by_worker("w1") == 2
        taken = await pool.claim_many(5, "w2", lease=lease)
        assert _groups(taken) == ["a", "a"]
        await self.elapse(clock, lease * 1.5)  # both leases expire: their slots are free
        renewed = await pool.claim_many(5, "w1", lease=lease * 100)
        assert _groups(renewed) == ["a", "a"]
        await pool.set_group_limit("a", 1)  # lowered below the 2 in flight: nothing is taken back
        assert [(await pool.get(item.id)).state for item in renewed] == [ItemState.CLAIMED] * 2
        assert await pool.claim("w1") is None
        await pool.complete(renewed[0])
        assert await pool.claim("w1") is None, "1 claim of a is still in flight: a is at its lowered limit"
        await pool.complete(renewed[1])
        assert _groups(await pool.claim_many(5, "w1", lease=lease * 100)) == ["a"]
        await pool.set_group_limit("a", None)
        assert len(await pool.claim_many(3, "w1", lease=lease * 100)) == 3

    @pytest.mark.asyncio
    async def test_a_default_group_limit_binds_every_named_group_without_its_own(
        self, hive: Hive, lease: float
    ) -> None:
        """[GR6] ``set_group_limit(None, n)`` caps each named group without its own limit; ungrouped items
        are bound only by the pool limit; a group's own limit overrides the default either way."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        await pool.set_default_group_limit(1)
        await pool.set_group_limit("big", 3)
        for group in ("x", "y", "big", None):
            await pool.push_many([f"{group}-{n}" for n in range(4)], group=group)
        claimed = await pool.claim_many(20, "w1", lease=lease * 100)
        assert Counter(_groups(claimed)) == {"x": 1, "y": 1, "big": 3, None: 4}
        await pool.set_default_group_limit(None)
        rest = await pool.claim_many(20, "w1", lease=lease * 100)
        assert Counter(_groups(rest)) == {"x": 3, "y": 3}  # big stays at its own limit of 3

    @pytest.mark.asyncio
    async def test_a_limit_set_while_claims_are_in_flight_counts_them(self, hive: Hive, lease: float) -> None:
        """[GR6] claims taken while a group had no limit count against the limit set later, its own or the
        default (a backend that counts only the claims of limited groups must count these too)."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        await pool.push_many([f"a-{n}" for n in range(5)], group="a")
        await pool.push_many([f"b-{n}" for n in range(5)], group="b")
        first = await pool.claim_many(6, "w1", lease=lease * 100)
        assert Counter(_groups(first)) == {"a": 3, "b": 3}
        await pool.set_group_limit("a", 2)
        await pool.set_default_group_limit(3)
        assert await pool.claim("w1") is None, "a holds 3 claims against its limit of 2, b 3 against the default 3"
        held_a = [item for item in first if item.group == "a"]
        held_b = [item for item in first if item.group == "b"]
        await pool.complete(held_a[0])
        assert await pool.claim("w1") is None, "a still holds 2 claims: at its limit"
        await pool.complete(held_b[0])
        assert _groups(await pool.claim_many(5, "w1", lease=lease * 100)) == ["b"]
        await pool.complete(held_a[1])
        assert _groups(await pool.claim_many(5, "w1", lease=lease * 100)) == ["a"]

    @pytest.mark.asyncio
    async def test_group_and_pool_limits_hold_under_concurrent_tasks(self, hive: Hive, lease: float) -> None:
        """[GR6][GR7] tasks claiming at once never hold more claims of a group, or of the pool, than its limit;
        every item is done once."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        limits: dict[str | None, int | None] = {"a": 2, "b": 3, None: None}
        await pool.set_group_limit("a", 2)
        await pool.set_default_group_limit(3)
        await pool.set_limit(5)
        pushed = []
        for group in limits:
            pushed += await pool.push_many([f"{group}-{n}" for n in range(15)], group=group)
        holding: Counter[str | None] = Counter()
        breaches: list[str] = []
        done: list[str] = []

        async def worker(name: str) -> None:
            while len(done) < len(pushed):
                batch = await pool.claim_many(2, name, lease=lease * 100)
                if not batch:
                    await asyncio.sleep(0.001)
                    continue
                holding.update(_groups(batch))
                for group, limit in limits.items():
                    if limit is not None and holding[group] > limit:
                        breaches.append(f"{holding[group]} claims of {group} held (limit {limit})")
                if sum(holding.values()) > 5:
                    breaches.append(f"{sum(holding.values())} claims held (pool limit 5)")
                await asyncio.sleep(0)
                holding.subtract(_groups(batch))  # before completing: the count never runs ahead of the store
                accepted = await pool.complete_many([(item, None) for item in batch])
                assert all(accepted)
                done.extend(item.id for item in batch)

        await asyncio.wait_for(asyncio.gather(*(worker(f"w{n}") for n in range(8))), timeout=120)
        assert not breaches, breaches[:10]
        assert sorted(done) == sorted(pushed)

    @pytest.mark.asyncio
    async def test_group_and_pool_limits_hold_across_processes(
        self, clock: ManualClock | None, tmp_path: pathlib.Path
    ) -> None:
        """[GR6][GR7] "multiprocess": processes claiming from one store never hold more claims of a group, or of
        the pool, than its limit; every item is done exactly once."""
        probe = self.make_backend(clock, tmp_path / "probe")
        if "multiprocess" not in probe.capabilities:
            pytest.skip("the backend does not declare the 'multiprocess' capability")
        if not isinstance(probe, ServesGroups):
            pytest.skip("the backend does not serve groups (the optional workhive.storage.ServesGroups)")
        from workhive.testing.group_processes import LimitedFleet, drain_groups_in_processes

        url, options = self.multiprocess_store(tmp_path)
        fleet = LimitedFleet(
            groups={"a": 15, "b": 15, "c": 15, None: 15}, group_limits={"a": 1}, default_limit=2, pool_limit=4
        )
        await drain_groups_in_processes(url, options, tmp_path, fleet, processes=3)

    # -- GR7 ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_a_pool_limit_caps_the_claims_of_every_group(
        self, hive: Hive, clock: ManualClock | None, lease: float
    ) -> None:
        """[GR7] never more than n unexpired claims in the pool, grouped or not; settling or expiry frees slots."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        other = hive.pool("other")
        await pool.set_limit(3)
        for group in ("a", "b", None):
            await pool.push_many([f"{group}-{n}" for n in range(3)], group=group)
        await other.push_many(list(range(4)))
        first = await pool.claim_many(9, "w1", lease=lease)
        assert len(first) == 3 and set(_groups(first)) == {"a", "b", None}
        assert await pool.claim("w1") is None
        assert len(await other.claim_many(9, "w1", lease=lease * 100)) == 4  # another pool has no limit
        await pool.complete(first[0])
        assert len(await pool.claim_many(9, "w1", lease=lease * 100)) == 1
        await self.elapse(clock, lease * 1.5)  # the two left of the first claim expire
        assert len(await pool.claim_many(9, "w1", lease=lease * 100)) == 2
        assert await pool.claim("w1") is None
        await pool.set_limit(None)
        assert len(await pool.claim_many(9, "w1", lease=lease * 100)) == 5

    # -- GR8 ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_a_paused_group_waits_and_resumes(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[GR8] claims skip a paused group until backend now + seconds; its items wait unharmed; None resumes."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        waiting = await pool.push_many(["a-0", "a-1", "a-2"], group="a")
        await pool.push_many(["b-0", "b-1"], group="b")
        before = await hive.now()
        await pool.pause_group("a", lease)
        after = await hive.now()
        paused = (await pool.groups()).group("a")
        assert paused is not None and self.within(paused.paused_until, before + lease, after + lease), paused
        assert _groups(await pool.claim_many(5, "w1", lease=lease * 100)) == ["b", "b"]
        assert await pool.claim("w1") is None
        for item_id in waiting:
            item = await pool.get(item_id)
            assert (item.state, item.attempts, item.error) == (ItemState.PENDING, 0, None)
        await self.elapse(clock, lease * 1.5)
        assert (await pool.groups()).group("a").paused_until is None  # type: ignore[union-attr]
        assert (await self.must_claim(pool, "w1", lease=lease * 100)).id == waiting[0]
        await pool.pause_group("a", 1_000_000)
        assert await pool.claim("w1") is None
        await pool.pause_group("a", None)
        assert (await self.must_claim(pool, "w1", lease=lease * 100)).id == waiting[1]
        if clock is not None and not self.clock_drift:  # at exactly now + seconds the pause is over
            await pool.pause_group("a", 10.0)
            clock.advance(9.5)
            assert await pool.claim("w1") is None
            clock.advance(0.5)
            assert (await self.must_claim(pool, "w1", lease=lease * 100)).id == waiting[2]

    # -- GR9 ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_settings_made_before_any_item_are_kept(self, hive: Hive, lease: float) -> None:
        """[GR9] weights, limits and pauses set before a group (or its pool) has items are kept and reported,
        and apply once items come."""
        self.needs_groups(hive)
        pool = hive.pool("fresh")
        await pool.set_group_weight("later", 2.5)
        await pool.set_group_limit("later", 1)
        await pool.set_default_group_limit(5)
        await pool.set_limit(7)
        before = await hive.now()
        await pool.pause_group("sleepy", 1_000_000)
        after = await hive.now()
        report = await pool.groups()
        assert (report.pool, report.pool_limit, report.default_limit) == ("fresh", 7, 5)
        assert [g.group for g in report.groups] == ["later", "sleepy"]
        assert report.groups[0] == GroupStats("later", 2.5, 1, 0, 0, 0, None)
        sleepy = report.groups[1]
        assert (sleepy.weight, sleepy.limit, sleepy.in_flight, sleepy.ready, sleepy.waiting) == (1.0, None, 0, 0, 0)
        assert self.within(sleepy.paused_until, before + 1_000_000, after + 1_000_000)
        await pool.push_many(["l-0", "l-1", "l-2"], group="later")
        await pool.push("s-0", group="sleepy")
        assert _groups(await pool.claim_many(5, "w1", lease=lease * 100)) == ["later"]
        assert await hive.pool("empty").groups() == GroupReport("empty", None, None, ())

    @pytest.mark.asyncio
    async def test_the_group_report_counts_exactly(self, hive: Hive, clock: ManualClock | None, lease: float) -> None:
        """[GR9] per group: weight, own limit, unexpired claims in flight, ready (expired claims included),
        waiting; groups with a live item or a setting, sorted, ungrouped first; finished groups drop out."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        gone = await pool.push("done", group="finished")
        await pool.complete(await self.must_claim(pool, "w1", lease=lease * 100))
        assert (await pool.get(gone)).state is ItemState.DONE
        await pool.set_group_weight("b", 2.5)
        await pool.set_group_limit("b", 9)
        pushed: dict[str | None, int] = {"zz": 2, "b": 3, None: 2, "a": 3}
        for group, count in pushed.items():
            await pool.push_many([f"{group}-{n}" for n in range(count)], group=group)
        await pool.push_many([Job(f"later-{n}", delay=lease * 100, group="a") for n in range(2)])
        brief = await pool.claim_many(3, "w1", lease=lease)
        held = await pool.claim_many(4, "w1", lease=lease * 100)
        await self.elapse(clock, lease * 1.5)  # the brief claims expire: ready again, not in flight
        in_flight = Counter(_groups(held))
        report = await pool.groups()
        assert (report.pool, report.pool_limit, report.default_limit) == ("jobs", None, None)
        assert [g.group for g in report.groups] == [None, "a", "b", "zz"], report
        for stats in report.groups:
            group = stats.group
            assert stats.in_flight == in_flight[group], (stats, _groups(brief), _groups(held))
            assert stats.ready == pushed[group] - in_flight[group], stats
            assert stats.waiting == (2 if group == "a" else 0), stats
            assert stats.weight == (2.5 if group == "b" else 1.0), stats
            assert stats.limit == (9 if group == "b" else None), stats
            assert stats.paused_until is None, stats

    @pytest.mark.asyncio
    async def test_bad_group_input_is_refused_and_changes_nothing(self, hive: Hive) -> None:
        """[GR9] a bad group name (InvalidName), weight, limit or pause (InvalidArgument) is refused before the
        backend is called: nothing is pushed and no setting changes."""
        self.needs_groups(hive)
        pool = hive.pool("jobs")
        await pool.push("keep", group="ok")
        await pool.set_group_limit("ok", 2)
        before = (await self._snapshot(hive), await pool.groups())
        for name in ("", " ", "bad name", "a/b", "-dash", "x" * 201, 5, b"bytes"):
            with pytest.raises(InvalidName):
                await pool.push("x", group=name)  # type: ignore[arg-type]
            with pytest.raises(InvalidName):
                await pool.push_many(["x"], group=name)  # type: ignore[arg-type]
            with pytest.raises(InvalidName):
                await pool.push_many(["fine", Job("x", group=name)])  # type: ignore[arg-type]
            with pytest.raises(InvalidName):
                await pool.set_group_weight(name, 2)  # type: ignore[arg-type]
            with pytest.raises(InvalidName):
                await pool.set_group_limit(name, 2)  # type: ignore[arg-type]
            with pytest.raises(InvalidName):
                await pool.pause_group(name, 10)  # type: ignore[arg-type]
        for weight in (0, -1, 0.0, math.nan, math.inf, -math.inf, "2", True, None):
            with pytest.raises(InvalidArgument, match="weight"):
                await pool.set_group_weight("ok", weight)  # type: ignore[arg-type]
        for limit in (0, -1, 1.5, 2.0, True, "3", 2**31):
            with pytest.raises(InvalidArgument, match="limit"):
                await pool.set_group_limit("ok", limit)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match="limit"):
                await pool.set_default_group_limit(limit)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match="limit"):
                await pool.set_limit(limit)  # type: ignore[arg-type]
        for seconds in (0, -1, math.nan, math.inf, "5", True):
            with pytest.raises(InvalidArgument):
                await pool.pause_group("ok", seconds)  # type: ignore[arg-type]
        assert (await self._snapshot(hive), await pool.groups()) == before

    @pytest.mark.asyncio
    async def test_groups_on_a_backend_without_them_are_a_config_error(self, hive: Hive) -> None:
        """[GR9] without ``ServesGroups`` a group or any group setting is a ConfigError naming the backend;
        nothing is stored."""
        if isinstance(hive.storage, ServesGroups):
            pytest.skip("the backend serves groups")
        pool = hive.pool("jobs")
        attempts = [
            pool.push("x", group="t1"),
            pool.push_many(["x"], group="t1"),
            pool.push_many(["x", Job("y", group="t1")]),
            pool.set_group_weight("t1", 2),
            pool.set_group_limit("t1", 2),
            pool.set_default_group_limit(2),
            pool.set_limit(2),
            pool.pause_group("t1", 10),
            pool.groups(),
        ]
        for attempt in attempts:
            with pytest.raises(ConfigError, match="does not support groups"):
                await attempt
        assert await hive.pools() == []
        assert (await pool.get(await pool.push("plain"))).group is None
