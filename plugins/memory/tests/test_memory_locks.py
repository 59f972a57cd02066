"""The lock contract, run against in-process memory locks."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from pathlib import Path

import pytest

import workhive
from workhive.errors import ConfigError, LockTimeout
from workhive.locks import LockProvider
from workhive.testing.locks import LockContract
from workhive_memory.locks import MemoryLocks


class TestMemoryLockContract(LockContract):
    # Providers made for the same tmp_path share the named store memory://<hash>.
    persistent_tokens = True

    def make_provider(self, tmp_path: Path) -> LockProvider:
        return MemoryLocks("memory://locks-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16])


@pytest.mark.asyncio
async def test_private_stores_do_not_share_locks() -> None:
    a, b = MemoryLocks("memory://"), MemoryLocks("memory://")
    held_a = await a.acquire("x", ttl=None, timeout=0, worker_id=None)
    held_b = await b.acquire("x", ttl=None, timeout=0, worker_id=None)
    await a.release(held_a)
    await b.release(held_b)


@pytest.mark.parametrize("url", ["sqlite:///x", "memory://a/b", "memory://a?x=1", 5])
def test_malformed_urls_raise_config_error(url: object) -> None:
    with pytest.raises(ConfigError):
        MemoryLocks(url)  # type: ignore[arg-type]


async def queued(locks: MemoryLocks, name: str, n: int) -> None:
    """Let the event loop run until ``n`` tasks wait for ``name`` (they queue on their first step)."""
    # The waiters are futures in the provider's store: there is no event to wait on.
    while len(locks._store.waiters.get(name, [])) < n:  # noqa: ASYNC110
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_a_release_hands_the_lock_to_the_longest_waiter_not_to_a_quick_reacquirer() -> None:
    locks = MemoryLocks("memory://")
    first = await locks.acquire("x", worker_id="a")
    waiters = [asyncio.create_task(locks.acquire("x", worker_id=w)) for w in ("b", "c")]
    await queued(locks, "x", 2)  # both waiting, in order
    await locks.release(first)
    with pytest.raises(LockTimeout):
        await locks.acquire("x", timeout=0, worker_id="a")  # owed to b: a cannot jump the queue
    b = await waiters[0]
    assert (b.token, (await locks.holder("x")).worker_id) == (first.token + 1, "b")
    await locks.release(b)
    c = await waiters[1]
    assert c.token == first.token + 2
    await locks.release(c)
    again = await locks.acquire("x", timeout=0, worker_id="a")  # nobody waits now
    assert again.token == first.token + 3


@pytest.mark.asyncio
async def test_a_waiter_cancelled_after_the_handover_passes_the_lock_on() -> None:
    locks = MemoryLocks("memory://")
    first = await locks.acquire("x")
    doomed = asyncio.create_task(locks.acquire("x", worker_id="doomed"))
    patient = asyncio.create_task(locks.acquire("x", worker_id="patient"))
    await queued(locks, "x", 2)
    await locks.release(first)  # handed to doomed, which is cancelled before it runs
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    held = await asyncio.wait_for(patient, 60)
    assert (await locks.holder("x")).worker_id == "patient" and held.token == first.token + 1


@pytest.mark.asyncio
async def test_two_tasks_that_reacquire_at_once_take_turns() -> None:
    locks = MemoryLocks("memory://")
    order: list[str] = []

    async def loop(who: str) -> None:
        for _ in range(50):
            held = await locks.acquire("x", worker_id=who)
            order.append(who)
            await asyncio.sleep(0)  # while held: the other task queues
            await locks.release(held)  # and re-acquire at once, with no pause

    await asyncio.gather(loop("a"), loop("b"))
    assert order[:100] == ["a", "b"] * 50, order  # a waiter never watches the other take the lock twice


# -- passwords in mistyped URLs, options given twice (issue 24) ---------------------------------
@pytest.mark.parametrize("char", ["@", "?", "#", "/", ":"])
def test_a_password_in_a_mistyped_lock_url_is_never_shown(char: str) -> None:
    url = f"memory://user:ssCANARY1{char}ssCANARY2{char}ssCANARY3@host"
    try:
        locks = MemoryLocks(url)
    except ConfigError as exc:  # / ? # make it a path or options: refused
        texts = [str(exc), repr(exc), repr(vars(exc))]
    else:  # @ and : are a store name like any other (memory locks have no password to use)
        texts = [repr(locks)]
    for text in texts:
        assert "CANARY" not in text, text


def test_a_lock_url_with_options_given_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="no options"):
        MemoryLocks("memory://dup?lease=1&lease=2")


@pytest.mark.asyncio
async def test_hives_on_one_named_store_share_their_default_locks() -> None:
    # The default lock provider follows the storage URL (workhive.defaults): memory://NAME's
    # locks are shared by every hive of the process on that store, as its items are.
    url = f"memory://default-locks-{uuid.uuid4().hex[:12]}"
    async with workhive.open(url) as first, workhive.open(url) as second:
        assert first.locks().url == second.locks().url == url  # type: ignore[attr-defined]
        async with first.lock("shared", timeout=0) as held:
            with pytest.raises(LockTimeout):
                async with second.lock("shared", timeout=0):
                    pass
        async with second.lock("shared", timeout=0) as again:
            assert again.token == held.token + 1  # one token sequence for the store


@pytest.mark.asyncio
async def test_private_memory_hives_keep_private_default_locks() -> None:
    async with workhive.open("memory://") as first, workhive.open("memory://") as second:
        async with first.lock("x", timeout=0), second.lock("x", timeout=0) as held:
            assert held.token == 1
