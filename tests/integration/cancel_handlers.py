"""Handlers for the cancellation and timeout tests, run in-process: they report through module state.

Each waits for something that never comes (an event nobody sets), so only a
cancellation or a timeout ends it; the test waits on ``started``/``stopped``
events, never on time.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

#: item id -> set when the handler started / saw it was stopped (threading: sync handlers run in threads)
started: dict[str, threading.Event] = {}
stopped: dict[str, threading.Event] = {}
#: item id -> how the handler saw its end ("cancelled-task", "ctx.cancelled", ...)
seen: dict[str, str] = {}
#: the safety bound of the sync handlers' waits: never reached when the mechanism works
NEVER = 120.0
#: set by the test at its end: the stuck handler's thread then returns
release = threading.Event()


def reset() -> None:
    release.set()  # a stuck handler of the last test returns
    release.clear()
    started.clear()
    stopped.clear()
    seen.clear()


def _mark(table: dict[str, threading.Event], item_id: str) -> None:
    table.setdefault(item_id, threading.Event()).set()


async def wait_forever_async(ctx: Any) -> Any:
    _mark(started, ctx.item_id)
    try:
        await asyncio.Event().wait()  # nobody sets it
    except asyncio.CancelledError:
        seen[ctx.item_id] = f"cancelled-task, ctx.cancelled={ctx.cancelled}"
        _mark(stopped, ctx.item_id)
        raise
    return {"never": True}


def wait_for_cancel_sync(ctx: Any) -> Any:
    """A sync handler that cannot be interrupted: it waits on ctx.cancelled, then returns a (late) result."""
    _mark(started, ctx.item_id)
    cancelled = ctx.wait_cancelled(NEVER)
    seen[ctx.item_id] = f"ctx.cancelled={cancelled}"
    _mark(stopped, ctx.item_id)
    return {"late": True}


async def quick_async(ctx: Any) -> Any:
    return {"n": ctx.data}


def stuck_sync(ctx: Any) -> Any:
    """A sync handler that ignores ctx.cancelled: only its process ending (or the test) stops it."""
    _mark(started, ctx.item_id)
    release.wait(NEVER)
    return {"late": True}


def progress_sync(ctx: Any) -> Any:
    """Reports two steps, waits for the test to have seen them, then reports the last one and returns."""
    ctx.progress(1, 3, "one")
    ctx.progress(2, 3, "two")
    _mark(started, ctx.item_id)
    release.wait(NEVER)
    ctx.progress(3, 3, "done")
    return {"ok": True}
