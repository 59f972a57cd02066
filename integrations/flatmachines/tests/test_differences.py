"""Where the adapter behaves differently from flatmachines' own backends, on purpose.

Each test runs the same steps on flatmachines' backend and on the adapter and
asserts both outcomes, so a change on either side shows up here.
"""

from __future__ import annotations

import copy
import json

import pytest
from flatmachines.distributed import WorkerRegistration

import workhive
from conftest import Backends

pytestmark = pytest.mark.asyncio


async def hive_of(backends: Backends) -> workhive.Hive:
    assert backends.handle is not None
    return await backends.handle.hive()


async def test_a_stale_completion_is_refused(backends: Backends) -> None:
    """A worker whose job was released and claimed again cannot complete it.

    flatmachines lets it, and deletes the new claim.
    """
    pool = backends.work.pool("jobs")
    await pool.push({"task": 1})
    first = await pool.claim("slow-worker")
    assert await pool.release_by_worker("slow-worker") == 1  # the reaper's step
    second = await pool.claim("fast-worker")
    assert second is not None and second.data == {"task": 1}
    assert first.id == second.id  # the id push returned, on both
    if backends.is_workhive:
        # The slow worker's id carries its claim's token: refused, with an error `except KeyError` catches.
        with pytest.raises(KeyError, match="claimed again") as refused:
            await pool.complete(first.id, {"by": "slow"})
        assert isinstance(refused.value, workhive.LeaseLost)
        await pool.complete(second.id, {"by": "fast"})
        item = await (await hive_of(backends)).pool("jobs").get(second.id)
        assert item.state is workhive.ItemState.DONE and item.result == {"by": "fast"}
    else:
        await pool.complete(first.id, {"by": "slow"})  # accepted: it deletes fast-worker's claim
        with pytest.raises(KeyError):
            await pool.complete(second.id, {"by": "fast"})


async def test_exhausted_items_are_poisoned_on_release(backends: Backends) -> None:
    """An item that used its last attempt and lost its worker is dead-lettered, not looped forever."""
    pool = backends.work.pool("jobs")
    await pool.push({"task": 1}, {"max_retries": 1})
    await pool.claim("crashy")
    assert await pool.release_by_worker("crashy") == 1
    if backends.is_workhive:
        assert await pool.size() == 0
        dead = await (await hive_of(backends)).pool("jobs").dead()
        assert [d.data for d in dead] == [{"task": 1}]
    else:
        assert await pool.size() == 1
        assert (await pool.claim("crashy")).attempts == 2  # type: ignore[union-attr]


async def test_retries_go_behind_waiting_items(backends: Backends) -> None:
    pool = backends.work.pool("jobs")
    await pool.push({"n": "a"})
    await pool.push({"n": "b"})
    await pool.fail((await pool.claim("w")).id, "boom")  # type: ignore[union-attr]
    nxt = await pool.claim("w")
    assert nxt is not None
    assert nxt.data == ({"n": "b"} if backends.is_workhive else {"n": "a"})


async def test_finished_items_are_kept_until_purged(backends: Backends) -> None:
    pool = backends.work.pool("jobs")
    pushed = await pool.push({"task": 1})
    claimed = await pool.claim("w")
    await pool.complete(claimed.id, {"answer": 42})
    if backends.is_workhive:
        hive_pool = (await hive_of(backends)).pool("jobs")
        kept = await hive_pool.get(pushed)
        assert (kept.state, kept.result) == (workhive.ItemState.DONE, {"answer": 42})
        with pytest.raises(KeyError, match="completed already") as twice:
            await pool.complete(claimed.id)
        assert isinstance(twice.value, workhive.LeaseLost)
        assert await hive_pool.purge(0) == 1
        with pytest.raises(workhive.ItemNotFound):
            await hive_pool.get(pushed)
    else:
        with pytest.raises(KeyError):
            await pool.complete(claimed.id)


async def test_a_claimed_id_is_the_pushed_id_and_carries_the_claims_token(backends: Backends) -> None:
    pool = backends.work.pool("jobs")
    pushed = await pool.push({"task": 1})
    claimed = await pool.claim("w")
    await pool.fail(claimed.id, "again")
    again = await pool.claim("w")
    assert claimed.id == again.id == pushed  # type: ignore[union-attr]
    assert json.dumps({"job_id": again.id}) == json.dumps({"job_id": pushed})  # type: ignore[union-attr]
    if backends.is_workhive:
        assert (claimed.id.receipt, again.id.receipt) == (f"{pushed}.1", f"{pushed}.2")  # type: ignore[union-attr]
        assert copy.deepcopy(again.id).token == 2  # type: ignore[union-attr]


async def test_unknown_status_strings_are_refused(backends: Backends) -> None:
    await backends.registry.register(WorkerRegistration(worker_id="w1"))
    if backends.is_workhive:
        with pytest.raises(workhive.InvalidArgument, match="unknown worker status 'banana'"):
            await backends.registry.update_status("w1", "banana")
        assert (await backends.registry.get("w1")).status == "active"  # type: ignore[union-attr]
    else:
        await backends.registry.update_status("w1", "banana")
        assert (await backends.registry.get("w1")).status == "banana"  # type: ignore[union-attr]


async def test_unknown_push_options_are_refused(backends: Backends) -> None:
    pool = backends.work.pool("jobs")
    if backends.is_workhive:
        with pytest.raises(workhive.InvalidArgument, match=r"unknown push option.*'max_retry'"):
            await pool.push({"task": 1}, {"max_retry": 5})
        assert await pool.size() == 0
        await pool.push({"task": 2}, {"priority": 5, "max_retries": 4})
        assert (await pool.claim("w")).max_retries == 4  # type: ignore[union-attr]
    else:
        await pool.push({"task": 1}, {"max_retry": 5})
        assert await pool.size() == 1


async def test_a_reaped_workers_heartbeat_is_refused(backends: Backends) -> None:
    await backends.registry.register(WorkerRegistration(worker_id="w1"))
    await backends.registry.update_status("w1", "lost")
    if backends.is_workhive:
        before = (await backends.registry.get("w1")).last_heartbeat  # type: ignore[union-attr]
        with pytest.raises(workhive.WorkerLost, match="'w1'"):
            await backends.registry.heartbeat("w1", {"still": "here"})
        after = await backends.registry.get("w1")
        assert (after.status, after.last_heartbeat, after.metadata) == ("lost", before, None)  # type: ignore[union-attr]
    else:
        await backends.registry.heartbeat("w1", {"still": "here"})


async def test_pool_names_workhive_cannot_store_are_refused(backends: Backends) -> None:
    if backends.is_workhive:
        with pytest.raises(workhive.InvalidName, match="'my pool/1'"):
            backends.work.pool("my pool/1")
    else:
        await backends.work.pool("my pool/1").push({"task": 1})
