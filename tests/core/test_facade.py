"""The facade validates before a backend is touched, and explains lost leases.

These run with the core alone: the backend here records calls and refuses
writes, so any bad input that reached it would fail the test.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import workhive
from workhive import Hive, ItemState, Job, PluginManager, WorkItem
from workhive.errors import (
    ConfigError,
    InvalidArgument,
    InvalidItem,
    InvalidName,
    ItemNotFound,
    LeaseLost,
    PluginNotFound,
)


class RefusingBackend:
    """Fails the test on any call except the ones a test allows."""

    capabilities = frozenset()

    def __init__(self, current: WorkItem | None = None) -> None:
        self.current = current
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name in ("open", "close"):
                return None
            if name == "get":
                return self.current
            if name in ("complete",):
                return [False]
            if name in ("fail", "extend"):
                return None
            if name == "release":
                return False
            raise AssertionError(f"backend.{name} must not be called")

        return call


def make_item(**overrides: Any) -> WorkItem:
    fields: dict[str, Any] = dict(
        id="7",
        pool="p",
        payload="{}",
        state=ItemState.CLAIMED,
        priority=0,
        attempts=1,
        max_attempts=5,
        token=3,
        created_at=0.0,
        available_at=0.0,
        claimed_by="w1",
        lease_expires_at=100.0,
        lease_seconds=60.0,
    )
    fields.update(overrides)
    return WorkItem(**fields)


@pytest.fixture
def hive() -> Hive:
    return Hive(RefusingBackend(), manager=PluginManager(entry_points=False))  # type: ignore[arg-type]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"data": {1, 2}}, InvalidItem),
        ({"data": math.nan}, InvalidItem),
        ({"data": object()}, InvalidItem),
        ({"data": 1, "priority": -1}, InvalidArgument),
        ({"data": 1, "priority": 1.5}, InvalidArgument),
        ({"data": 1, "delay": -3}, InvalidArgument),
        ({"data": 1, "delay": math.inf}, InvalidArgument),
        ({"data": 1, "max_attempts": 0}, InvalidArgument),
        ({"data": 1, "dedup_key": ""}, InvalidArgument),
    ],
)
async def test_bad_push_is_refused_before_the_backend(hive: Hive, kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        await hive.pool("p").push(**kwargs)
    assert hive.storage.calls == []  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_one_bad_item_in_a_batch_pushes_nothing(hive: Hive) -> None:
    with pytest.raises(InvalidItem):
        await hive.pool("p").push_many([{"ok": 1}, Job({"ok": 2}, priority=3), {"bad": {1}}])
    assert hive.storage.calls == []  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_bad_claim_arguments(hive: Hive) -> None:
    with pytest.raises(InvalidArgument):
        await hive.pool("p").claim("w", lease=-1)
    with pytest.raises(InvalidArgument):
        await hive.pool("p").claim_many(0, "w")
    with pytest.raises(InvalidArgument):
        await hive.pool("p").items("nonsense")
    assert hive.storage.calls == []  # type: ignore[attr-defined]


def test_bad_pool_name(hive: Hive) -> None:
    with pytest.raises(InvalidName):
        hive.pool("../etc")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("current", "fragment"),
    [
        (None, "no longer exists"),
        (make_item(state=ItemState.DONE), "completed already"),
        (make_item(state=ItemState.POISONED), "poisoned"),
        (make_item(token=4, claimed_by="w2"), "claimed again since (token 4, worker w2)"),
        (make_item(state=ItemState.PENDING), "released back"),
        (make_item(), "lease expired"),
    ],
)
async def test_lease_lost_explains_why(current: WorkItem | None, fragment: str) -> None:
    hive = Hive(RefusingBackend(current), manager=PluginManager(entry_points=False))  # type: ignore[arg-type]
    mine = make_item()
    for action in (hive.pool("p").complete(mine), hive.pool("p").fail(mine, "x"), hive.pool("p").extend(mine)):
        with pytest.raises(LeaseLost) as err:
            await action
        assert fragment in str(err.value)
        assert err.value.item_id == "7" and err.value.token == 3  # type: ignore[attr-defined]
    with pytest.raises(LeaseLost):
        await hive.pool("p").release(mine)


def test_open_with_unknown_or_malformed_urls() -> None:
    manager = PluginManager(entry_points=False)
    with pytest.raises(PluginNotFound, match="pip install workhive-redis"):
        workhive.open("redis://localhost", manager=manager)
    with pytest.raises(ConfigError, match="no scheme"):
        workhive.open("just-a-path.db", manager=manager)


def test_backoff_spec_is_resolved_through_plugins() -> None:
    manager = PluginManager(entry_points=False)
    hive = Hive(RefusingBackend(), manager=manager, backoff="full-jitter?base=0.5&cap=2")  # type: ignore[arg-type]
    assert all(0 <= hive.backoff.delay(n) <= 2 for n in range(1, 50))
    with pytest.raises(PluginNotFound):
        Hive(RefusingBackend(), manager=manager, backoff="no-such-strategy")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must be a number"):
        Hive(RefusingBackend(), manager=manager, backoff="full-jitter?base=fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Hive(RefusingBackend(), manager=manager, backoff="full-jitter?speed=2")  # type: ignore[arg-type]


def test_hive_options_are_validated() -> None:
    manager = PluginManager(entry_points=False)
    for bad in ({"lease": 0}, {"max_attempts": 0}, {"reap_after": -1}):
        with pytest.raises(InvalidArgument):
            Hive(RefusingBackend(), manager=manager, **bad)  # type: ignore[arg-type]


def deep(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


BAD_DATA = [
    pytest.param({1: "a"}, "the key 1 (int)", id="int-key"),
    pytest.param({"a": {None: 1}}, "the key None (NoneType) at ['a']", id="nested-none-key"),
    pytest.param({"a": "\ud800"}, "lone surrogate", id="surrogate"),
    pytest.param(deep(100_000), "nested more than 256 levels", id="100k-levels"),
    pytest.param({"n": 10**4301}, "more than 4300 digits", id="huge-int"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("data", "fragment"), BAD_DATA)
async def test_data_json_cannot_store_faithfully_is_refused_and_nothing_written(
    hive: Hive, data: Any, fragment: str
) -> None:
    pool = hive.pool("p")
    attempts = (
        pool.push(data),
        pool.push_many([{"ok": 1}, data]),
        pool.push_many([Job({"ok": 1}), Job(data, priority=2)]),
        hive.shared("ns").put("k", data),
    )
    for attempt in attempts:
        with pytest.raises(InvalidItem) as err:
            await attempt
        assert fragment in str(err.value)
    assert hive.storage.calls == []  # type: ignore[attr-defined]


@pytest.mark.asyncio
@pytest.mark.parametrize(("result", "fragment"), BAD_DATA)
async def test_results_json_cannot_store_faithfully_are_refused_and_nothing_written(result: Any, fragment: str) -> None:
    backend = RefusingBackend()
    pool = Hive(backend, manager=PluginManager(entry_points=False)).pool("p")  # type: ignore[arg-type]
    mine = make_item(id="i0000000000000007")
    for attempt in (
        pool.complete(mine, result),
        pool.complete(mine.receipt, result),
        pool.complete_and_claim(mine, result, "w1"),
        pool.complete_many([(mine, None), (mine, result)]),
    ):
        with pytest.raises(InvalidItem, match=r"^result must be") as err:
            await attempt
        assert fragment in str(err.value)
    assert backend.calls == []


@pytest.mark.asyncio
@pytest.mark.parametrize("key", ["k\ud800", "", "x" * 1001, 7], ids=["surrogate", "empty", "too-long", "not-a-string"])
async def test_bad_dedup_keys_are_refused_and_nothing_written(hive: Hive, key: Any) -> None:
    pool = hive.pool("p")
    with pytest.raises(InvalidArgument, match="dedup_key"):
        await pool.push({"ok": 1}, dedup_key=key)
    with pytest.raises(InvalidArgument, match="dedup_key"):
        await pool.push_many([Job(1, dedup_key="fine"), Job(2, dedup_key=key)])
    assert hive.storage.calls == []  # type: ignore[attr-defined]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("batch", "fragment"),
    [
        ("abc", "got a str: iterating it would give its characters"),
        ({"a": 1, "b": 2}, "got a dict: iterating it would give its keys"),
        (b"abc", "got a bytes: iterating it would give its bytes"),
        (bytearray(b"ab"), "got a bytearray"),
        (42, "got a int"),
    ],
    ids=["str", "dict", "bytes", "bytearray", "int"],
)
async def test_push_many_refuses_what_is_not_a_batch(hive: Hive, batch: Any, fragment: str) -> None:
    with pytest.raises(InvalidArgument, match="push_many takes a list") as err:
        await hive.pool("p").push_many(batch)
    assert fragment in str(err.value)
    assert hive.storage.calls == []  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_push_many_still_takes_any_iterable(hive: Hive) -> None:
    pushed: list[Any] = []

    async def push(pool: str, items: Any) -> list[str]:
        pushed.extend(i.payload for i in items)
        return [f"i{n:016x}" for n in range(1, len(items) + 1)]

    hive.storage.push = push  # type: ignore[attr-defined]
    assert len(await hive.pool("p").push_many(range(3))) == 3
    assert len(await hive.pool("p").push_many(x for x in ("a", "b"))) == 2
    assert await hive.pool("p").push_many([]) == []
    assert pushed == ["0", "1", "2", '"a"', '"b"']


@pytest.mark.asyncio
async def test_an_error_text_that_is_not_valid_unicode_is_kept_escaped() -> None:
    texts: list[str] = []

    class Recording(RefusingBackend):
        async def fail(self, pool: str, item_id: str, token: int, error: str, *rest: Any) -> ItemState:
            texts.append(error)
            return ItemState.PENDING

    pool = Hive(Recording(), manager=PluginManager(entry_points=False)).pool("p")  # type: ignore[arg-type]
    await pool.fail(make_item(), ValueError("bad byte \udcff in output"), retry_in=0)
    await pool.fail(make_item(), "told \ud800", retry_in=0)
    assert texts == ["ValueError: bad byte \\udcff in output", "told \\ud800"]
    for text in texts:
        text.encode("utf-8")


class ItemsBackend(RefusingBackend):
    """Answers ``get`` from a dict and records ``requeue``; any other call fails the test."""

    def __init__(self, *items: WorkItem) -> None:
        super().__init__()
        self.items = {i.id: i for i in items}

    async def get(self, pool: str, item_id: str) -> WorkItem | None:
        return self.items.get(item_id)

    async def requeue(self, pool: str, item_ids: list[str] | None) -> int:
        self.calls.append("requeue")
        return len(self.items) if item_ids is None else len(item_ids)


DEAD = make_item(id="i0000000000000001", state=ItemState.POISONED)
DEAD_TOO = make_item(id="i0000000000000002", state=ItemState.POISONED)
RUNNING = make_item(id="i0000000000000003", state=ItemState.CLAIMED)
FINISHED = make_item(id="i0000000000000004", state=ItemState.DONE)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("ids", "error", "fragment"),
    [
        (["nope"], ItemNotFound, "no item 'nope' in pool 'p'; nothing was requeued"),
        ([DEAD.id, "nope", "i00000000000000ff"], ItemNotFound, "no item 'nope', 'i00000000000000ff' in pool 'p'"),
        ([DEAD.id, RUNNING.id, FINISHED.id], InvalidArgument, f"item {RUNNING.id} is claimed, {FINISHED.id} is done"),
        ([DEAD.id, 5], InvalidArgument, "item ids are strings, got 5"),
        (DEAD.id, InvalidArgument, "requeue takes a list"),
        ({DEAD.id: 1}, InvalidArgument, "requeue takes a list"),
    ],
)
async def test_requeue_names_ids_that_are_not_poisoned_items_and_changes_nothing(
    ids: Any, error: type, fragment: str
) -> None:
    backend = ItemsBackend(DEAD, DEAD_TOO, RUNNING, FINISHED)
    pool = Hive(backend, manager=PluginManager(entry_points=False)).pool("p")  # type: ignore[arg-type]
    with pytest.raises(error) as err:
        await pool.requeue(ids)
    assert fragment in str(err.value)
    assert "requeue" not in backend.calls


@pytest.mark.asyncio
async def test_requeue_of_poisoned_ids_reaches_the_backend_once_per_id() -> None:
    backend = ItemsBackend(DEAD, DEAD_TOO, RUNNING)
    pool = Hive(backend, manager=PluginManager(entry_points=False)).pool("p")  # type: ignore[arg-type]
    assert await pool.requeue([DEAD.id, DEAD_TOO.id, DEAD.id]) == 2
    assert await pool.requeue([]) == 0
    assert await pool.requeue() == 3
    assert backend.calls == ["requeue", "requeue"]


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        (
            "constant?delay=1",
            ["constant has no parameter 'delay'", "it takes base, cap, max-attempts, max-retry-after"],
        ),
        ("full-jitter?speed=2&base=1", ["full-jitter has no parameter 'speed'"]),
        ("none?rng=1", ["none has no parameter 'rng'"]),
        ("constant?base=-1", ["'constant?base=-1'", "base must be a finite number > 0"]),
    ],
)
def test_a_backoff_spec_with_a_wrong_parameter_says_which_parameters_exist(spec: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        Hive(RefusingBackend(), manager=PluginManager(entry_points=False), backoff=spec)  # type: ignore[arg-type]
    for fragment in fragments:
        assert fragment in str(err.value)
    assert "__init__" not in str(err.value)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"host": "box\ud800"}, "host contains the lone surrogate"),
        ({"host": 7}, "host must be a string"),
        ({"capabilities": ["llm", "gpu\udc80"]}, "capability contains the lone surrogate"),
        ({"capabilities": ["llm", 3]}, "capabilities are strings"),
    ],
)
async def test_a_registration_storage_cannot_keep_is_refused_before_the_backend(
    hive: Hive, fields: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(InvalidArgument, match=fragment):
        await hive.workers.register(worker_id="w1", **fields)
    assert hive.storage.calls == []  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_a_status_detail_that_is_not_valid_unicode_is_kept_escaped() -> None:
    details: list[str | None] = []

    class Recording(RefusingBackend):
        async def set_worker_status(self, worker_id: str, status: Any, detail: str | None) -> None:
            details.append(detail)

    hive = Hive(Recording(), manager=PluginManager(entry_points=False))  # type: ignore[arg-type]
    await hive.workers.update_status("w1", "busy", "item i1: bad \udcff")
    await hive.workers.update_status("w1", "idle")
    assert details == ["item i1: bad \\udcff", None]
    with pytest.raises(InvalidArgument, match="detail must be a string"):
        await hive.workers.update_status("w1", "idle", 5)  # type: ignore[arg-type]
