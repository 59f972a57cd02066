"""What flatmachines code relies on: ids, the exceptions it catches, capability filters, one hive per URL.

Each test fails on the adapter before flatmachines 4.2.1 support (claimed ids
were receipts, refusals plain ``LeaseLost``/``InvalidItem``, capability
filters exact, every hooks object its own hive handle).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from engines import Place
from flatmachines.distributed import SQLiteRegistrationBackend, WorkerFilter, WorkerRegistration

import workhive
from workhive_flatmachines import (
    HiveHandle,
    WorkhiveRegistrationBackend,
    WorkhiveWorkBackend,
    WorkhiveWorkerHooks,
    backends,
)

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def handle(place: Place) -> AsyncIterator[HiveHandle]:
    h = HiveHandle(place.url, **place.options)
    yield h
    await h.aclose()


async def test_complete_by_the_id_push_returned(handle: HiveHandle) -> None:
    pool = WorkhiveWorkBackend(handle).pool("jobs")
    pushed = await pool.push({"task": 1})
    claimed = await pool.claim("w1")
    assert claimed is not None and claimed.id == pushed
    await pool.complete(pushed, {"ok": True})  # the plain str push returned, as flatmachines code does
    item = await (await handle.hive()).pool("jobs").get(pushed)
    assert (item.state, item.result) == (workhive.ItemState.DONE, {"ok": True})


async def test_fail_by_the_id_push_returned(handle: HiveHandle) -> None:
    pool = WorkhiveWorkBackend(handle).pool("jobs")
    pushed = await pool.push({"task": 1}, {"max_retries": 2})
    await pool.claim("w1")
    await pool.fail(pushed, "boom")
    assert await pool.size() == 1


async def test_a_plain_id_is_fenced_when_this_process_holds_the_claim(handle: HiveHandle) -> None:
    """The claim this process holds was taken away (a reaper elsewhere): the plain id is refused."""
    pool = WorkhiveWorkBackend(handle).pool("jobs")
    pushed = await pool.push({"task": 1})
    await pool.claim("slow")
    hive = await handle.hive()
    # Another process's reaper: released in the hive, behind this process's back.
    assert await hive.pool("jobs").release_by_worker("slow") == 1
    other = await hive.pool("jobs").claim("fast")
    assert other is not None
    with pytest.raises(KeyError, match="claimed again") as refused:
        await pool.complete(pushed, {"by": "slow"})
    assert isinstance(refused.value, workhive.LeaseLost)
    assert (await hive.pool("jobs").get(pushed)).claimed_by == "fast"
    await hive.pool("jobs").complete(other, {"by": "fast"})


async def test_completing_twice_is_a_key_error_and_a_lease_lost(handle: HiveHandle) -> None:
    pool = WorkhiveWorkBackend(handle).pool("jobs")
    await pool.push({"task": 1})
    claimed = await pool.claim("w1")
    assert claimed is not None
    await pool.complete(claimed.id)
    for again in (claimed.id, str(claimed.id)):
        try:
            await pool.complete(again)
        except KeyError as exc:  # what flatmachines code catches
            assert isinstance(exc, workhive.LeaseLost)
            assert "completed already" in str(exc) and not str(exc).startswith(("'", '"'))
        else:
            pytest.fail("a second completion was accepted")
    with pytest.raises(KeyError, match="completed already"):
        await pool.fail(claimed.id, "late")


async def test_data_json_cannot_hold_is_a_type_error_and_stores_nothing(handle: HiveHandle) -> None:
    pool = WorkhiveWorkBackend(handle).pool("jobs")
    with pytest.raises(TypeError) as refused:
        await pool.push({"when": object()})
    assert isinstance(refused.value, workhive.InvalidItem)
    assert await pool.size() == 0


async def test_a_result_json_cannot_hold_is_a_type_error_and_the_claim_stays(handle: HiveHandle) -> None:
    pool = WorkhiveWorkBackend(handle).pool("jobs")
    pushed = await pool.push({"task": 1})
    claimed = await pool.claim("w1")
    assert claimed is not None
    with pytest.raises(TypeError):
        await pool.complete(claimed.id, {"answer": {1, 2}})
    assert (await (await handle.hive()).pool("jobs").get(pushed)).state is workhive.ItemState.CLAIMED
    await pool.complete(claimed.id, {"answer": [1, 2]})


async def test_metadata_json_cannot_hold_is_a_type_error(handle: HiveHandle) -> None:
    registry = WorkhiveRegistrationBackend(handle)
    await registry.register(WorkerRegistration(worker_id="w1"))
    with pytest.raises(TypeError):
        await registry.heartbeat("w1", {"load": object()})
    assert (await registry.get("w1")).metadata is None  # type: ignore[union-attr]


WORKERS = {
    "w-dash": ["gpu-small", "pdf"],
    "w-under": ["gpu_small"],
    "w-gpu": ["gpu"],
    "w-upper": ["GPU-Large"],
    "w-none": [],
}
FILTERS = ["gpu_small", "gpu-small", "gpu", "GPU", "gpu%", "gpu_large", "pdf", "p_f", "small", "x"]


@pytest.mark.parametrize("wanted", FILTERS)
async def test_capability_filters_match_as_flatmachines_sqlite_backend_does(
    handle: HiveHandle, tmp_path: Path, wanted: str
) -> None:
    """The same workers and filter on flatmachines' SQLite registry (the reference) and on the hive."""
    reference = SQLiteRegistrationBackend(db_path=str(tmp_path / "reference.sqlite"))
    ours = WorkhiveRegistrationBackend(handle)
    for worker_id, caps in WORKERS.items():
        for registry in (reference, ours):
            await registry.register(WorkerRegistration(worker_id=worker_id, capabilities=caps or None))
    expected = sorted(w.worker_id for w in await reference.list(WorkerFilter(capability=wanted)))
    got = sorted(w.worker_id for w in await ours.list(WorkerFilter(capability=wanted)))
    assert got == expected


async def test_gpu_small_finds_gpu_dash_small(handle: HiveHandle) -> None:
    registry = WorkhiveRegistrationBackend(handle)
    await registry.register(WorkerRegistration(worker_id="w1", capabilities=["gpu-small"]))
    found = await registry.list(WorkerFilter(capability="gpu_small"))
    assert [w.worker_id for w in found] == ["w1"]
    assert await registry.list(WorkerFilter(capability="gpu")) == []


async def test_hooks_and_backends_from_one_url_share_one_hive(place: Place) -> None:
    """Every state's hooks (flatmachines 4.x builds one per state) and the code route open the hive once."""
    first = WorkhiveWorkerHooks(place.url, **place.options)
    second = WorkhiveWorkerHooks(place.url, **place.options)
    registration, work = backends(place.url, **place.options)
    separately = (
        WorkhiveRegistrationBackend(place.url, **place.options),
        WorkhiveWorkBackend(place.url, **place.options),
    )
    assert first.handle is second.handle is registration.handle is work.handle
    assert separately[0].handle is separately[1].handle is first.handle  # the old README's code route too
    assert await first.handle.hive() is await second.handle.hive()
    await first.aclose()


async def test_on_action_takes_both_flatmachines_signatures(place: Place) -> None:
    hooks = WorkhiveWorkerHooks(place.url, **place.options)
    legacy = await hooks.on_action("register_worker", {"worker_id": "w1"})
    current = await hooks.on_action("register", "register_worker", {"worker_id": "w2"})
    assert legacy["status"] == current["status"] == "active"
    with pytest.raises(TypeError, match="on_action takes"):
        await hooks.on_action("register_worker")
    await hooks.aclose()
