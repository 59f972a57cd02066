"""A hive with something to show: pending, claimed, done and dead items, workers, a cooled-down key."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

import workhive
from workhive.budgets import BUDGET_NAMESPACE, KeyRate
from workhive.credentials import DEFAULT_NAMESPACE

T = TypeVar("T")


def run(work: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion in a thread of its own: Playwright's sync API owns this thread's loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work()).result()  # type: ignore[arg-type]


async def _populate(url: str) -> dict[str, Any]:
    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        await pool.push_many([{"n": i} for i in range(8)])
        me = await hive.workers.register(worker_id="w-busy", pools=["jobs"])
        await hive.workers.register(worker_id="w-gone", pools=["jobs"])
        await hive.workers.deregister("w-gone")
        for n in range(2):
            item = await pool.claim(me.worker_id)
            assert item is not None
            await pool.complete(item, {"ok": n})
        dead = await pool.claim(me.worker_id)
        assert dead is not None
        await pool.put_step(dead, "search", {"hits": ["<i>a</i>"]})  # a durable step (ctx.step), shown with the item
        await pool.fail(dead, "RuntimeError: the model refused <b>twice</b>", poison=True)
        held = await pool.claim(me.worker_id, lease=600)
        assert held is not None
        now = await hive.now()
        shared = hive.shared(DEFAULT_NAMESPACE)
        await shared.put(
            "OPENAI_KEY_2", {"state": "cooling", "until": now + 300, "reason": "HTTP 429", "fp": "f1"}, ttl=300
        )
        await shared.put("OPENAI_KEY_3", {"state": "disabled", "until": None, "reason": "HTTP 401", "fp": "f2"})
        learned = KeyRate(base=2.0, since=time.time(), version=1, ramping=False, fp="f1")  # 2/s after a 429
        await hive.shared(BUDGET_NAMESPACE).put("OPENAI_KEY_2", learned.to_json())
        return {"dead": dead.id, "held": held.id, "done": 2, "pending": 4}


@pytest.fixture
def hive_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hive.db'}"


@pytest.fixture
def populated(hive_url: str) -> dict[str, Any]:
    return run(lambda: _populate(hive_url))


def stored_item(url: str, item_id: str) -> workhive.WorkItem:
    async def go() -> workhive.WorkItem:
        async with workhive.open(url) as hive:
            return await hive.pool("jobs").get(item_id)

    return run(go)
