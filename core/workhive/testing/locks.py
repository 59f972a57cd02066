"""The lock contract suite: every lock provider's tests subclass ``LockContract``.

A provider's test module overrides one method, ``make_provider(self, tmp_path)``,
a plain (synchronous) method returning a fresh, unopened ``LockProvider``.
Called twice with the same ``tmp_path`` it must return two providers over
the same locks (same directory, same named store) — the suite uses that to
check that tokens survive re-creation when ``persistent_tokens`` is True::

    from workhive.testing.locks import LockContract
    from my_package.locks import MyLocks

    class TestMyLocks(LockContract):
        persistent_tokens = True          # tokens survive a new provider

        def make_provider(self, tmp_path):
            return MyLocks(f"mylocks:///{tmp_path}/locks")

Capability flags (class attributes):

* ``persistent_tokens`` — a new provider over the same locks continues the
  fencing tokens instead of starting again.

The suite is the definition of a lock provider; the semantics it checks are
listed in ``workhive.locks``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from workhive.errors import InvalidArgument, InvalidName, LockNotHeld, LockTimeout
from workhive.hive import Hive
from workhive.locks import HeldLock, LockHolder, LockProvider
from workhive.plugin_manager import PluginManager

__all__ = ["HOSTILE_NAMES", "LockContract"]

#: names that must each be a distinct, safe lock
HOSTILE_NAMES = [
    "plain",
    "a/b",
    "a_b",
    "A/B",
    "../../../etc/passwd",
    "..",
    ".",
    "/",
    "/absolute/path",
    "nul\x00inside",
    "x" * 10_240,
    "ünïcødé ☃ 日本語",
    "lone \ud800 surrogate",
    " ",
    "line\nbreak",
    "C:\\windows\\style",
    "name.lock",
]


class _NoStorage:
    """Stands in for a storage backend: ``Hive.lock`` never touches storage beyond open and close."""

    capabilities: frozenset[str] = frozenset()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        # Every other method of the protocol exists (Hive() checks) and must not be called.
        async def untouched(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"Hive.lock called storage.{name}")

        return untouched


class LockContract:
    """Base class of a lock provider's tests; override ``make_provider``."""

    persistent_tokens: bool = False

    def make_provider(self, tmp_path: Path) -> LockProvider:
        raise NotImplementedError("override make_provider(self, tmp_path) to return a fresh LockProvider")

    @pytest_asyncio.fixture
    async def locks(self, tmp_path: Path) -> AsyncIterator[LockProvider]:
        provider = self.make_provider(tmp_path)
        try:
            yield provider
        finally:
            await provider.close()

    @pytest_asyncio.fixture
    async def other(self, tmp_path: Path) -> AsyncIterator[LockProvider]:
        """A second provider over the same locks (another "process" as far as it can tell)."""
        provider = self.make_provider(tmp_path)
        try:
            yield provider
        finally:
            await provider.close()

    @staticmethod
    async def take(provider: LockProvider, name: str, **kw: Any) -> HeldLock:
        kw.setdefault("ttl", None)
        kw.setdefault("timeout", 5.0)
        kw.setdefault("worker_id", None)
        return await provider.acquire(name, **kw)

    # -- acquire / release ----------------------------------------------------
    @pytest.mark.asyncio
    async def test_acquire_returns_a_held_lock_with_a_positive_token(self, locks: LockProvider) -> None:
        before = time.time()
        held = await self.take(locks, "repo:acme", ttl=30.0)
        assert isinstance(held, HeldLock)
        assert held.name == "repo:acme"
        assert held.token >= 1
        assert held.ttl == 30.0
        assert before - 1 <= held.acquired_at <= time.time() + 1
        await locks.release(held)

    @pytest.mark.asyncio
    async def test_released_lock_can_be_taken_again_at_once(self, locks: LockProvider) -> None:
        first = await self.take(locks, "n")
        await locks.release(first)
        second = await self.take(locks, "n", timeout=0)
        assert second.token > first.token
        await locks.release(second)

    @pytest.mark.asyncio
    async def test_try_on_a_held_lock_raises_lock_timeout_naming_the_holder(
        self, locks: LockProvider, other: LockProvider
    ) -> None:
        held = await self.take(locks, "busy", ttl=60.0, worker_id="worker-7")
        with pytest.raises(LockTimeout) as info:
            await self.take(other, "busy", timeout=0)
        err = info.value
        assert str(os.getpid()) in str(err) and socket.gethostname() in str(err)
        assert "worker-7" in str(err)
        holder = err.holder  # type: ignore[attr-defined]
        assert isinstance(holder, LockHolder)
        assert (holder.pid, holder.host, holder.worker_id, holder.token) == (
            os.getpid(),
            socket.gethostname(),
            "worker-7",
            held.token,
        )
        await locks.release(held)

    @pytest.mark.asyncio
    async def test_waiting_times_out_without_blocking_the_event_loop(
        self, locks: LockProvider, other: LockProvider
    ) -> None:
        held = await self.take(locks, "slow")
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        with pytest.raises(LockTimeout):
            await self.take(other, "slow", timeout=0.3)
        stop.set()
        await task
        # A waiter that blocked the loop would leave the ticker at one or two ticks.
        assert ticks >= 10
        await locks.release(held)

    @pytest.mark.asyncio
    async def test_a_waiter_gets_the_lock_when_the_holder_releases(
        self, locks: LockProvider, other: LockProvider
    ) -> None:
        held = await self.take(locks, "handoff")
        waiter = asyncio.create_task(self.take(other, "handoff", timeout=10.0))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await locks.release(held)
        got = await asyncio.wait_for(waiter, 10.0)
        assert got.token > held.token
        await other.release(got)

    @pytest.mark.asyncio
    async def test_timeout_none_waits_until_released(self, locks: LockProvider, other: LockProvider) -> None:
        held = await self.take(locks, "forever")
        waiter = asyncio.create_task(other.acquire("forever", ttl=None, timeout=None, worker_id=None))
        await asyncio.sleep(0.1)
        assert not waiter.done()
        await locks.release(held)
        await other.release(await asyncio.wait_for(waiter, 10.0))

    @pytest.mark.asyncio
    async def test_double_release_raises_lock_not_held(self, locks: LockProvider) -> None:
        held = await self.take(locks, "twice")
        await locks.release(held)
        with pytest.raises(LockNotHeld):
            await locks.release(held)
        # and the lock is free, not corrupted
        again = await self.take(locks, "twice", timeout=0)
        await locks.release(again)

    @pytest.mark.asyncio
    async def test_releasing_a_forged_or_foreign_lock_raises_lock_not_held(
        self, locks: LockProvider, other: LockProvider
    ) -> None:
        held = await self.take(locks, "mine")
        with pytest.raises(LockNotHeld):
            await locks.release(HeldLock(name="mine", token=held.token, acquired_at=held.acquired_at, ttl=None))
        with pytest.raises(LockNotHeld):
            await other.release(held)
        # still held by the rightful holder
        with pytest.raises(LockTimeout):
            await self.take(other, "mine", timeout=0)
        await locks.release(held)

    @pytest.mark.asyncio
    async def test_cancelled_waiter_leaves_nothing_held(self, locks: LockProvider, other: LockProvider) -> None:
        held = await self.take(locks, "cancel")
        waiter = asyncio.create_task(self.take(other, "cancel", timeout=None))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await locks.release(held)
        again = await self.take(locks, "cancel", timeout=0)
        await locks.release(again)

    @pytest.mark.asyncio
    async def test_close_releases_locks_still_held(self, tmp_path: Path, other: LockProvider) -> None:
        provider = self.make_provider(tmp_path)
        await self.take(provider, "left-open")
        await provider.close()
        again = await self.take(other, "left-open", timeout=2.0)
        await other.release(again)

    # -- Hive.lock --------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_hive_lock_context_manager_holds_for_the_block_and_releases_on_error(
        self, locks: LockProvider, other: LockProvider
    ) -> None:
        hive = Hive(_NoStorage(), locks=locks, manager=PluginManager(entry_points=False))  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="boom"):
            async with hive.lock("ctx", ttl=10.0, worker_id="w") as held:
                assert held.token >= 1
                with pytest.raises(LockTimeout):
                    await self.take(other, "ctx", timeout=0)
                raise RuntimeError("boom")
        async with hive.lock("ctx", timeout=0) as again:
            assert again.token > held.token
        assert await locks.holder("ctx") is None

    # -- fencing tokens ---------------------------------------------------------
    @pytest.mark.asyncio
    async def test_tokens_rise_strictly_with_every_acquisition(self, locks: LockProvider, other: LockProvider) -> None:
        tokens = []
        for i in range(20):
            provider = locks if i % 2 else other
            held = await self.take(provider, "fence")
            tokens.append(held.token)
            await provider.release(held)
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)

    @pytest.mark.asyncio
    async def test_tokens_rise_across_provider_recreation_when_persistent(self, tmp_path: Path) -> None:
        if not self.persistent_tokens:
            pytest.skip("provider does not declare persistent_tokens")
        first = self.make_provider(tmp_path)
        held = await self.take(first, "persist")
        await first.release(held)
        await first.close()
        second = self.make_provider(tmp_path)
        try:
            again = await self.take(second, "persist")
            assert again.token > held.token
            await second.release(again)
        finally:
            await second.close()

    # -- holder info, ttl ---------------------------------------------------------
    @pytest.mark.asyncio
    async def test_holder_info_is_readable_by_others_while_held(self, locks: LockProvider, other: LockProvider) -> None:
        assert await other.holder("info") is None
        held = await self.take(locks, "info", ttl=120.0, worker_id="w-1")
        holder = await other.holder("info")
        assert holder is not None
        assert holder.name == "info"
        assert holder.token == held.token
        assert holder.pid == os.getpid()
        assert holder.host == socket.gethostname()
        assert holder.worker_id == "w-1"
        assert holder.ttl == 120.0
        assert abs(holder.acquired_at - held.acquired_at) < 1.0
        assert not holder.overdue(time.time())
        await locks.release(held)
        assert await other.holder("info") is None

    @pytest.mark.asyncio
    async def test_overdue_holder_is_reported_and_never_broken(
        self, locks: LockProvider, other: LockProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        held = await self.take(locks, "overdue", ttl=0.05)
        await asyncio.sleep(0.1)
        holder = await other.holder("overdue")
        assert holder is not None and holder.overdue(time.time())
        with caplog.at_level(logging.WARNING, logger="workhive.locks"):
            with pytest.raises(LockTimeout) as info:
                await self.take(other, "overdue", timeout=0.1)
        assert "OVERDUE" in str(info.value)
        warnings = [r.getMessage() for r in caplog.records if r.name == "workhive.locks"]
        assert any("ttl" in m and str(os.getpid()) in m and socket.gethostname() in m for m in warnings)
        listed = await other.list_locks()
        assert [h.name for h in listed if h.overdue(time.time())] == ["overdue"]
        await locks.release(held)  # the holder still owns it

    # -- names ----------------------------------------------------------------------
    @pytest.mark.asyncio
    @pytest.mark.parametrize("name", HOSTILE_NAMES, ids=lambda n: repr(n)[:30])
    async def test_any_nonempty_string_is_a_lock_name(self, locks: LockProvider, name: str) -> None:
        held = await self.take(locks, name, timeout=0)
        holder = await locks.holder(name)
        assert holder is not None and holder.name == name
        assert [h.name for h in await locks.list_locks()] == [name]
        await locks.release(held)
        assert await locks.holder(name) is None

    @pytest.mark.asyncio
    async def test_distinct_hostile_names_are_distinct_locks(self, locks: LockProvider) -> None:
        held = [await self.take(locks, name, timeout=0) for name in HOSTILE_NAMES]
        assert sorted(h.name for h in await locks.list_locks()) == sorted(HOSTILE_NAMES)
        for h in held:
            await locks.release(h)
        assert await locks.list_locks() == []

    @pytest.mark.asyncio
    @pytest.mark.parametrize("name", ["", None, b"bytes", 5, ["a"]])
    async def test_empty_or_non_string_names_raise_invalid_name(self, locks: LockProvider, name: Any) -> None:
        with pytest.raises(InvalidName):
            await locks.acquire(name, ttl=None, timeout=0, worker_id=None)
        assert await locks.list_locks() == []

    @pytest.mark.asyncio
    @pytest.mark.parametrize(
        ("ttl", "timeout"), [(0, None), (-1, None), (float("nan"), None), (None, -1), (None, float("inf")), ("1", None)]
    )
    async def test_bad_ttl_or_timeout_raise_invalid_argument(self, locks: LockProvider, ttl: Any, timeout: Any) -> None:
        with pytest.raises(InvalidArgument):
            await locks.acquire("args", ttl=ttl, timeout=timeout, worker_id=None)
        assert await locks.holder("args") is None

    # -- listing ----------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_list_locks_shows_current_holders_sorted_by_name(
        self, locks: LockProvider, other: LockProvider
    ) -> None:
        b = await self.take(locks, "b", worker_id="wb")
        a = await self.take(other, "a", worker_id="wa")
        gone = await self.take(locks, "c")
        await locks.release(gone)
        listed = await locks.list_locks()
        assert [(h.name, h.worker_id, h.token) for h in listed] == [("a", "wa", a.token), ("b", "wb", b.token)]
        await locks.release(b)
        await other.release(a)
        assert await other.list_locks() == []

    # -- concurrency ------------------------------------------------------------------
    @pytest.mark.asyncio
    async def test_many_tasks_exclude_each_other_and_tokens_follow_entry_order(
        self, locks: LockProvider, other: LockProvider
    ) -> None:
        inside: list[int] = []
        entered: list[int] = []
        overlaps = 0

        async def worker(i: int) -> None:
            nonlocal overlaps
            provider = locks if i % 2 else other
            for _ in range(4):
                held = await self.take(provider, "crowd", timeout=30.0)
                if inside:
                    overlaps += 1
                inside.append(i)
                entered.append(held.token)
                await asyncio.sleep(0)
                inside.remove(i)
                await provider.release(held)

        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(24))), 60.0)
        assert overlaps == 0
        assert len(entered) == 96
        assert entered == sorted(entered) and len(set(entered)) == len(entered)

    @pytest.mark.asyncio
    async def test_different_names_do_not_wait_for_each_other(self, locks: LockProvider) -> None:
        held = [await self.take(locks, f"n{i}", timeout=0) for i in range(10)]
        for h in held:
            await locks.release(h)
