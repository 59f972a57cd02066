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
from workhive.errors import ConfigError, InvalidArgument, InvalidItem, InvalidName, LeaseLost, PluginNotFound


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
