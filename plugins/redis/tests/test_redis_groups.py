"""Groups on Redis, read through a backdoor: the turn index holds only groups a claim may serve.

The contract (rules GR1-GR9, in test_redis_contract.py) checks what claims
take; these check how: a claim reads the first entry of the turn index and
never walks the groups, so a group that cannot be served must not sit in it
(paused or at its limit: parked), a pool without groups must take the old
path, and a worker waiting on a full group must not be told to look again
until something can change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis_server import new_prefix, url_for
from workhive_redis import RedisStorage

import workhive
from workhive import Hive
from workhive.testing.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest_asyncio.fixture
async def hive(clock: ManualClock) -> AsyncIterator[Hive]:
    """A hive whose scripts read the test's clock in place of TIME (exact times, moved by hand)."""
    async with workhive.open(RedisStorage(url_for(new_prefix()), clock=clock)) as opened:
        yield opened


def _storage(hive: Hive) -> RedisStorage:
    storage = hive.storage
    assert isinstance(storage, RedisStorage)
    return storage


async def _raw(hive: Hive, *command: Any) -> Any:
    return await _storage(hive)._client.command(*command)


async def _index(hive: Hive, pool: str) -> dict[str, list[str]]:
    """The turn index: priority -> its groups in turn order."""
    base = _storage(hive)._pk(pool).base
    levels = await _raw(hive, "ZRANGE", base + "gqp", 0, -1)
    return {level: list(await _raw(hive, "ZRANGE", base + "gq:" + level, 0, -1)) for level in levels}


@pytest.mark.asyncio
async def test_the_turn_index_holds_each_ready_group_once_at_its_best_priority(hive: Hive) -> None:
    pool = hive.pool("jobs")
    await pool.push_many(["a1", "a2"], group="a")
    await pool.push("b-urgent", group="b", priority=5)
    await pool.push("b-later", group="b")
    await pool.push("c-later", group="c", delay=60)
    assert await _index(hive, "jobs") == {"5": ["b"], "0": ["a"]}, "c has nothing ready; b sits at its best"
    first = await pool.claim("w1")
    assert first is not None and first.group == "b"
    assert await _index(hive, "jobs") == {"0": ["a", "b"]}, "b moved down to its next item's priority"
    claimed = await pool.claim_many(10, "w1")
    # b's turn at priority 5 moved its virtual time (one clock for all priorities): a catches up first
    assert [item.data for item in claimed] == ["a1", "a2", "b-later"]
    assert await _index(hive, "jobs") == {}, "no group has a ready item: the index is empty"


@pytest.mark.asyncio
async def test_a_group_at_its_limit_or_paused_leaves_the_index_and_comes_back(hive: Hive, clock: ManualClock) -> None:
    pool = hive.pool("jobs")
    base = _storage(hive)._pk("jobs").base
    await pool.set_group_limit("a", 1)
    await pool.push_many(["a1", "a2"], group="a")
    await pool.push_many(["b1", "b2", "b3"], group="b")
    held = await pool.claim_many(3, "w1")
    assert [item.data for item in held] == ["a1", "b1", "b2"], "a's second turn found it full"
    assert await _index(hive, "jobs") == {"0": ["b"]}
    assert await _raw(hive, "SMEMBERS", base + "gfull") == ["a"]
    await pool.complete(held[0])  # a's claim ends: its slot is free, it takes turns again
    assert await _raw(hive, "SMEMBERS", base + "gfull") == []
    assert await _index(hive, "jobs") == {"0": ["a", "b"]}

    await pool.pause_group("a", 30)
    assert (await pool.claim("w1")).data == "b3"  # type: ignore[union-attr]
    assert await pool.claim("w1") is None, "a is paused: nothing else is claimable"
    assert await _index(hive, "jobs") == {}
    assert await _raw(hive, "ZRANGE", base + "gpaused", 0, -1) == ["a"]
    clock.advance(30)
    assert (await pool.claim("w1")).data == "a2"  # type: ignore[union-attr]
    assert await _raw(hive, "ZRANGE", base + "gpaused", 0, -1) == []


@pytest.mark.asyncio
async def test_a_pool_without_groups_claims_without_touching_the_turn_state(hive: Hive) -> None:
    """The fast path: ungrouped items and no pool limit never write the groups' keys."""
    pool = hive.pool("plain")
    base = _storage(hive)._pk("plain").base
    await pool.push_many(range(5))
    first = await pool.claim("w1")
    assert first is not None and (await pool.complete_and_claim(first, None, "w1")) is not None
    assert len(await pool.claim_many(5, "w1")) == 3
    assert await _raw(hive, "EXISTS", base + "gpool") == 0, "the fast path keeps no virtual time"
    await pool.set_limit(10)  # a pool limit takes every claim through the turns
    await pool.push("more")
    assert await pool.claim("w1") is not None
    assert await _raw(hive, "HEXISTS", base + "gpool", "uvt") == 1


@pytest.mark.asyncio
async def test_a_worker_waiting_on_a_full_group_waits_for_a_lease_or_a_wake_up(hive: Hive) -> None:
    """``due`` must not say 0 while the only ready items belong to a full group (a waiter would spin)."""
    storage = _storage(hive)
    k = storage._pk("jobs")
    pool = hive.pool("jobs")
    await pool.set_group_limit("a", 1)
    await pool.push_many(["a1", "a2"], group="a")
    held = await pool.claim("w1", lease=40)
    assert held is not None and await pool.claim("w1") is None  # a parked at its limit

    async def due() -> float:
        return float(await storage._client.run("due", (k.ready, k.delayed, k.leases), (storage._off(),)))

    assert await due() == 40.0, "the next change is the lease's expiry"
    await pool.set_limit(1)
    await pool.push("plain")
    assert await due() == 40.0, "an ungrouped item is ready, but the pool is at its limit"
    await pool.complete(held)
    assert await due() == 0.0
