"""``runtime.keys``: a worker takes a key for one item, reports a typed outcome, and gives it back.

No timing: a ``CredentialPool`` and an item in memory, events in a list.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

import workhive
from workhive.credentials import Credential, CredentialPool, Outcome
from workhive.errors import NoCredentialAvailable
from workhive.models import WorkItem
from workhive.runtime import events as ev
from workhive.runtime.handler import Handler
from workhive.runtime.keys import Keys
from workhive.runtime.options import FleetOptions


def handle(ctx: object) -> None:
    return None


def make_keys(pool: CredentialPool | None) -> tuple[Keys, ev.ListSink]:
    sink = ev.ListSink()
    keys = Keys(
        pool,
        None,
        handler=Handler(spec="tests:handle", function=handle, is_async=False),
        options=FleetOptions(pool="jobs", handler="tests:handle"),
        emit=sink,
        sleep=asyncio.sleep,
        stopping=lambda: False,
    )
    return keys, sink


@pytest_asyncio.fixture
async def item() -> AsyncIterator[WorkItem]:
    """A claimed item on an in-memory pool."""
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        await pool.push({"prompt": "hello"})
        claimed = await pool.claim("w1")
        assert claimed is not None
        yield claimed


def one_key_pool() -> CredentialPool:
    return CredentialPool([Credential("KEY_A", "sk-keys-test-secret", max_concurrency=1)])


@pytest.mark.asyncio
async def test_the_key_goes_back_when_the_block_ends_even_by_an_exception(item: WorkItem) -> None:
    pool = one_key_pool()
    keys, _ = make_keys(pool)
    key = await keys.take(item)
    assert key.credential is not None and key.credential.name == "KEY_A"
    with pytest.raises(NoCredentialAvailable):  # its one slot is taken while the block runs
        await pool.acquire(timeout=0)
    with pytest.raises(RuntimeError, match="handler blew up"):
        async with key:
            raise RuntimeError("handler blew up")
    again = await pool.acquire(timeout=0)  # given back: the slot is free
    assert again.name == "KEY_A"


@pytest.mark.asyncio
async def test_a_rate_limit_cools_the_key_and_says_so_once(item: WorkItem) -> None:
    pool = one_key_pool()
    keys, sink = make_keys(pool)
    async with await keys.take(item) as key:
        await key.report(Outcome.RATE_LIMITED, retry_after=120.0)
    (state,) = pool.snapshot()
    assert state.state == "cooling" and state.counts["rate_limited"] == 1
    assert sink.events == [[ev.RATE_LIMITED, "KEY_A"]]


@pytest.mark.asyncio
async def test_an_auth_failure_disables_the_key_with_its_reason(item: WorkItem) -> None:
    pool = one_key_pool()
    keys, sink = make_keys(pool)
    async with await keys.take(item) as key:
        await key.report(Outcome.AUTH_FAILED, reason="401 invalid key")
    (state,) = pool.snapshot()
    assert state.state == "disabled" and state.counts["auth_failed"] == 1
    assert sink.events == [[ev.DISABLED, "KEY_A", "401 invalid key"]]
    assert "sk-keys-test-secret" not in repr(sink.events)


@pytest.mark.asyncio
async def test_success_is_counted_and_sends_no_event(item: WorkItem) -> None:
    pool = one_key_pool()
    keys, sink = make_keys(pool)
    async with await keys.take(item) as key:
        await key.report(Outcome.OK)
    (state,) = pool.snapshot()
    assert state.state == "available" and state.counts["ok"] == 1 and state.counts["uses"] == 1
    assert sink.events == []


@pytest.mark.asyncio
async def test_without_keys_an_item_runs_keyless_and_a_rate_limit_is_still_an_event(item: WorkItem) -> None:
    keys, sink = make_keys(None)
    assert not keys.active
    async with await keys.take(item) as key:
        assert key.credential is None and key.name == "-"
        await key.report(Outcome.RATE_LIMITED, retry_after=5.0)
        await key.report(Outcome.OK)
    assert sink.events == [[ev.RATE_LIMITED, "-"]]


@pytest.mark.asyncio
async def test_a_late_429_of_a_burst_does_not_stretch_the_cooldown_its_first_429_began(item: WorkItem) -> None:
    now = [1000.0]
    pool = CredentialPool([Credential("KEY_A", "sk-keys-test-secret")], clock=lambda: now[0])
    keys, _ = make_keys(pool)
    early, late = await keys.take(item), await keys.take(item)  # both calls go at 1000.0
    async with early:
        now[0] += 0.2
        await early.report(Outcome.RATE_LIMITED, retry_after=1.0)  # cools until 1001.2
    async with late:
        now[0] += 0.5  # heard 0.7 s after its call went (a loaded machine)
        await late.report(Outcome.RATE_LIMITED, retry_after=1.0)
    (state,) = pool.snapshot()
    assert state.state == "cooling" and state.until == pytest.approx(1001.2)
