"""Handlers for the settlement tests (in-process: a test steers them through module state)."""

from __future__ import annotations

import asyncio
from typing import Any

import workhive

#: made by a test inside its event loop: an item with ``"gate": name`` waits until ``gates[name]`` is set
gates: dict[str, asyncio.Event] = {}


async def gated(ctx: Any) -> dict[str, Any]:
    """Returns the item's number; an item naming a gate first waits for the test to open it."""
    name = ctx.data.get("gate")
    if name is not None:
        await gates[name].wait()
    return {"n": ctx.data["n"]}


async def rate_limited_once(ctx: Any) -> dict[str, Any]:
    """A 429 without Retry-After on the first try (with backoff "none" the item is due again at once), then done."""
    if ctx.item.releases == 0:
        raise workhive.RateLimited()
    return {"n": ctx.data["n"]}
