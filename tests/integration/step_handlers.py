"""Handlers that make durable steps (``ctx.step``), for tests/integration/test_runtime_steps.py.

Every call a step makes is counted in ``CALLS`` by (item's name, step key); the
tests run the runtime in-process, so they read the counts back directly.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any

import workhive

CALLS: collections.Counter[tuple[str, str]] = collections.Counter()
_lock = threading.Lock()


def _called(ctx: Any, key: str) -> None:
    with _lock:
        CALLS[ctx.data["name"], key] += 1


def search(ctx: Any, query: str) -> dict[str, Any]:
    _called(ctx, "search")
    return {"hits": [query, query.upper()]}


async def read(ctx: Any, hit: str) -> str:
    _called(ctx, f"read-{hit}")
    await asyncio.sleep(0)
    return f"text of {hit}"


def draft(ctx: Any, texts: list[str]) -> str:
    _called(ctx, "draft")
    return " / ".join(texts)


def three_steps_sync(ctx: Any) -> dict[str, Any]:
    """search, one read per hit, draft; fails once (first attempt) between the reads and the draft."""
    hits = ctx.step("search", search, ctx, ctx.data["q"])["hits"]
    texts = [ctx.step(f"read-{hit}", _sync_read, ctx, hit) for hit in hits]
    if ctx.attempt == 1 and ctx.data.get("fail_once"):
        raise RuntimeError("the worker fell over after the reads")
    return {"draft": ctx.step("draft", draft, ctx, texts), "key": ctx.step_key("draft")}


def _sync_read(ctx: Any, hit: str) -> str:
    _called(ctx, f"read-{hit}")
    return f"text of {hit}"


async def three_steps_async(ctx: Any) -> dict[str, Any]:
    """three_steps_sync as an async handler: a sync, an async and a sync step function."""
    hits = (await ctx.step("search", search, ctx, ctx.data["q"]))["hits"]
    texts = [await ctx.step(f"read-{hit}", read, ctx, hit) for hit in hits]
    if ctx.attempt == 1 and ctx.data.get("fail_once"):
        raise RuntimeError("the worker fell over after the reads")
    return {"draft": await ctx.step("draft", draft, ctx, texts), "key": ctx.step_key("draft")}


def _refuse(ctx: Any) -> str:
    _called(ctx, "check")
    raise workhive.Permanent("the input names no document")


def permanent_step(ctx: Any) -> str:
    """A step that raises Permanent: stored as failed, raised again on every later claim."""
    ctx.step("search", search, ctx, "q")
    return str(ctx.step("check", _refuse, ctx))


async def bad_steps(ctx: Any) -> Any:
    """Each item does one wrong thing with steps, named by its data."""
    what = ctx.data["do"]
    if what == "repeat":
        await ctx.step("same", search, ctx, "a")
        await ctx.step("same", search, ctx, "b")
    elif what == "not_json":
        await ctx.step("set", lambda: {1, 2})
    elif what == "empty_key":
        await ctx.step("", search, ctx, "a")
    elif what == "too_large":
        await ctx.step("big", lambda: "x" * (300 * 1024))
    return "unreachable"


async def retry_inside(ctx: Any) -> str:
    """A step that fails once within the run and is retried under the same key: allowed (nothing was stored)."""
    tries = []

    def flaky() -> str:
        _called(ctx, "flaky")
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("reset by peer")
        return "ok"

    for _ in range(2):
        try:
            return str(await ctx.step("flaky", flaky))
        except ConnectionError:
            continue
    return "gave up"


def _logged(ctx: Any, key: str) -> str:
    """A step that writes one line per call to $STEP_CALLS (processes append; small writes stay whole)."""
    import os

    with open(os.environ["STEP_CALLS"], "a") as log:
        log.write(f"{ctx.data['name']} {key} {ctx.item.token}\n")
    return f"{key} of {ctx.data['name']}"


def killed_mid_item(ctx: Any) -> list[str]:
    """Three steps; on its first claim an item marked "kill" SIGKILLs its own process after the second."""
    import os
    import signal

    done = [ctx.step("a", _logged, ctx, "a"), ctx.step("b", _logged, ctx, "b")]
    if ctx.data.get("kill") and ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    done.append(ctx.step("c", _logged, ctx, "c"))
    return done
