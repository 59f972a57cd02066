"""A claim's receipt (``"<id>.<token>"``) finishes it as the claimed WorkItem does: fenced, with events.

These run with the core alone, against a small backend that keeps items the
way the storage contract says (a change is accepted only with the current
token of a claimed item) and records every call, so each test can see what
reached storage and what did not.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import workhive
from workhive import Hive, ItemState, PluginManager, WorkItem
from workhive.errors import InvalidArgument, LeaseLost
from workhive.models import Ack
from workhive.storage import REQUIRED_METHODS

ID = "i000000000000002a"


def claimed_item(**overrides: Any) -> WorkItem:
    fields: dict[str, Any] = dict(
        id=ID,
        pool="p",
        payload='{"n": 1}',
        state=ItemState.CLAIMED,
        priority=0,
        attempts=2,
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


class OneItemBackend:
    """Holds items by id; accepts a change only from the current claim, as every backend must."""

    capabilities = frozenset()

    def __init__(self, *items: WorkItem) -> None:
        self.items = {i.id: i for i in items}
        self.calls: list[tuple[Any, ...]] = []

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def _current(self, pool: str, item_id: str, token: int) -> WorkItem | None:
        item = self.items.get(item_id)
        ok = item is not None and item.pool == pool and item.state is ItemState.CLAIMED and item.token == token
        return item if ok else None

    async def get(self, pool: str, item_id: str) -> WorkItem | None:
        self.calls.append(("get", item_id))
        item = self.items.get(item_id)
        return item if item is not None and item.pool == pool else None

    async def complete(self, pool: str, acks: list[Ack]) -> list[bool]:
        self.calls.append(("complete", *[(a.item_id, a.token, a.result) for a in acks]))
        done = []
        for ack in acks:
            item = self._current(pool, ack.item_id, ack.token)
            if item is not None:
                self.items[item.id] = attrs.evolve(item, state=ItemState.DONE, result_payload=ack.result)
            done.append(item is not None)
        return done

    async def fail(
        self, pool: str, item_id: str, token: int, error: str, retry_in: float, poison: bool
    ) -> ItemState | None:
        self.calls.append(("fail", item_id, token, error, retry_in, poison))
        item = self._current(pool, item_id, token)
        if item is None:
            return None
        state = ItemState.POISONED if poison or item.attempts >= item.max_attempts else ItemState.PENDING
        self.items[item_id] = attrs.evolve(item, state=state, error=error)
        return state

    async def release(self, pool: str, item_id: str, token: int, delay: float) -> bool:
        self.calls.append(("release", item_id, token, delay))
        item = self._current(pool, item_id, token)
        if item is not None:
            self.items[item_id] = attrs.evolve(item, state=ItemState.PENDING, attempts=item.attempts - 1)
        return item is not None

    async def extend(self, pool: str, item_id: str, token: int, lease: float) -> float | None:
        self.calls.append(("extend", item_id, token, lease))
        item = self._current(pool, item_id, token)
        if item is None:
            return None
        self.items[item_id] = attrs.evolve(item, lease_expires_at=1000.0 + lease)
        return 1000.0 + lease

    async def claim(self, pool: str, worker_id: str, limit: int, lease: float) -> list[WorkItem]:
        self.calls.append(("claim", worker_id))
        return []

    def writes(self) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] != "get"]


def _unused(name: str) -> Any:
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"these tests must not need storage.{name}")

    return method


# The rest of the storage contract exists (Hive checks it) but these tests never reach it.
for _name in REQUIRED_METHODS:
    if not hasattr(OneItemBackend, _name):
        setattr(OneItemBackend, _name, _unused(_name))


class Events:
    """An observer plugin that records the item every event hook was given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, WorkItem, Any]] = []

    @workhive.hookimpl
    def workhive_item_completed(self, pool: str, item: WorkItem) -> None:
        self.seen.append(("completed", item, None))

    @workhive.hookimpl
    def workhive_item_failed(self, pool: str, item: WorkItem, error: str, retry_in: float) -> None:
        self.seen.append(("failed", item, retry_in))

    @workhive.hookimpl
    def workhive_item_poisoned(self, pool: str, item: WorkItem, error: str) -> None:
        self.seen.append(("poisoned", item, error))


def make_hive(backend: OneItemBackend, events: Events | None = None, **options: Any) -> Hive:
    extra = [] if events is None else [("observer", events)]
    manager = PluginManager(entry_points=False, extra=extra)
    return Hive(backend, manager=manager, **options)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_complete_by_receipt_is_fenced_like_the_item() -> None:
    backend = OneItemBackend(claimed_item())
    pool = make_hive(backend).pool("p")
    await pool.complete(f"{ID}.3", {"ok": True})
    assert backend.writes() == [("complete", (ID, 3, '{"ok":true}'))]
    assert backend.items[ID].state is ItemState.DONE
    assert backend.calls[0][0] == "complete"  # no hook listens: no read before the write


@pytest.mark.asyncio
async def test_the_receipt_property_round_trips() -> None:
    item = claimed_item()
    backend = OneItemBackend(item)
    await make_hive(backend).pool("p").complete(item.receipt)
    assert backend.items[ID].state is ItemState.DONE


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("current", "fragment"),
    [
        (claimed_item(token=4, claimed_by="w2"), "claimed again since (token 4, worker w2)"),
        (claimed_item(state=ItemState.DONE), "completed already"),
        (claimed_item(state=ItemState.POISONED), "poisoned"),
        (claimed_item(state=ItemState.PENDING, token=4), "claimed again since"),
        (None, "no longer exists in pool 'p'"),
    ],
)
async def test_a_stale_receipt_is_lease_lost_with_the_reason(current: WorkItem | None, fragment: str) -> None:
    backend = OneItemBackend(*([] if current is None else [current]))
    pool = make_hive(backend).pool("p")
    before = dict(backend.items)
    for action in (
        pool.complete(f"{ID}.3"),
        pool.complete_and_claim(f"{ID}.3", None, "w1"),
        pool.fail(f"{ID}.3", "boom", retry_in=1.0),
        pool.fail(f"{ID}.3", "boom"),
        pool.release(f"{ID}.3"),
        pool.extend(f"{ID}.3"),
    ):
        with pytest.raises(LeaseLost) as err:
            await action
        assert fragment in str(err.value)
        assert err.value.item_id == ID and err.value.token == 3  # type: ignore[attr-defined]
    assert backend.items == before
    assert ("claim", "w1") not in backend.calls  # a stale complete_and_claim claims nothing


@pytest.mark.asyncio
async def test_fail_release_extend_by_receipt() -> None:
    backend = OneItemBackend(claimed_item(), claimed_item(id="i000000000000002b", token=7))
    pool = make_hive(backend, backoff="constant?base=7&cap=7").pool("p")
    assert await pool.extend(f"{ID}.3", 30) == 1030.0
    # The backoff needs the claim's attempts: a receipt is read first to get them.
    assert await pool.fail(f"{ID}.3", ValueError("nope")) is ItemState.PENDING
    assert ("fail", ID, 3, "ValueError: nope", 7.0, False) in backend.calls
    await pool.release("i000000000000002b.7", delay=2)
    assert ("release", "i000000000000002b", 7, 2.0) in backend.calls
    assert backend.items["i000000000000002b"].state is ItemState.PENDING


@pytest.mark.asyncio
async def test_complete_many_mixes_items_and_receipts() -> None:
    second = claimed_item(id="i000000000000002b", token=1)
    backend = OneItemBackend(claimed_item(), second)
    pool = make_hive(backend).pool("p")
    assert await pool.complete_many([(f"{ID}.3", 1), (second, 2), ("i000000000000002b.9", 3)]) == [True, True, False]
    assert backend.writes() == [
        ("complete", (ID, 3, "1"), ("i000000000000002b", 1, "2"), ("i000000000000002b", 9, "3"))
    ]


@pytest.mark.asyncio
async def test_events_fire_for_receipts_with_the_item_as_claimed() -> None:
    events = Events()
    backend = OneItemBackend(
        claimed_item(),
        claimed_item(id="i000000000000002b", token=1),
        claimed_item(id="i000000000000002c", token=1, attempts=5),
        claimed_item(id="i000000000000002d", token=1),
        claimed_item(id="i000000000000002e", token=1),
    )
    pool = make_hive(backend, events).pool("p")
    as_item = backend.items["i000000000000002e"]
    await pool.complete(f"{ID}.3")
    await pool.complete(as_item)
    await pool.fail("i000000000000002b.1", "later", retry_in=4)
    await pool.fail("i000000000000002c.1", "dead")
    assert await pool.complete_many([("i000000000000002d.1", None), ("i000000000000002d.2", None)]) == [True, False]
    kinds = [(kind, item.id, item.state, extra) for kind, item, extra in events.seen]
    assert events.seen[1][1] is as_item and ("get", as_item.id) not in backend.calls  # given, never read again
    assert kinds == [
        ("completed", ID, ItemState.CLAIMED, None),
        ("completed", "i000000000000002e", ItemState.CLAIMED, None),
        ("failed", "i000000000000002b", ItemState.CLAIMED, 4.0),
        ("poisoned", "i000000000000002c", ItemState.CLAIMED, "dead"),
        ("completed", "i000000000000002d", ItemState.CLAIMED, None),
    ]


@pytest.mark.asyncio
async def test_no_event_for_a_stale_receipt() -> None:
    events = Events()
    backend = OneItemBackend(claimed_item(token=4))
    pool = make_hive(backend, events).pool("p")
    with pytest.raises(LeaseLost):
        await pool.complete(f"{ID}.3")
    assert events.seen == []


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("receipt", "fragment"),
    [
        (ID, "is an item id, not a receipt"),
        ("7", "receipt string like"),
        (f"{ID}.", "receipt string like"),
        (f"{ID}.x", "receipt string like"),
        (f"{ID}.-1", "receipt string like"),
        ("", "receipt string like"),
        (None, "receipt string like"),
        (42, "receipt string like"),
        ({"id": ID, "token": 3}, "receipt string like"),
        (f"{ID}.9223372036854775808", "not issued by workhive"),
        ("iffffffffffffffff.1", "not issued by workhive"),
    ],
)
async def test_a_bare_id_or_malformed_receipt_is_refused_before_storage(receipt: Any, fragment: str) -> None:
    backend = OneItemBackend(claimed_item())
    pool = make_hive(backend).pool("p")
    for action in (
        pool.complete(receipt),
        pool.complete_and_claim(receipt),
        pool.complete_many([(receipt, None)]),
        pool.fail(receipt, "x"),
        pool.release(receipt),
        pool.extend(receipt),
    ):
        with pytest.raises(InvalidArgument, match=fragment.replace(".", r"\.")):
            await action
    assert backend.calls == []
    assert backend.items[ID].state is ItemState.CLAIMED
