"""Example handlers for ``workhive work``: copy one and change the body.

A handler takes the item's context and returns a JSON-serialisable result
(kept with the item) or None. It may be ``async def`` (awaited on the
worker's event loop) or a plain function (run in a thread, so blocking I/O
never stalls heartbeats). Raise:

* ``workhive.RateLimited(retry_after=…)`` — the API said 429: the credential
  cools down fleet-wide and the item is retried without spending an attempt;
* ``workhive.AuthFailed(reason=…)`` — 401/403: the credential is disabled and
  the item retried with another;
* ``workhive.Permanent(…)`` — this item can never succeed: poisoned at once;
* anything else — retried with backoff until ``max_attempts``.

Run them from this directory::

    printf '{"text": "Bees build hives. They make honey."}\\n' | workhive push notes -
    workhive work notes --handler handlers:word_count --until-empty

The demo's summarisation handler (a real HTTP client against the local fake
LLM API, mapping 429/401 with ``workhive.credentials.classify``) lives in the
package as ``workhive.demo.handler:summarise`` so that ``workhive demo`` works
from an installed wheel; ``summarise`` below is it, re-exported.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import workhive
from workhive.demo.handler import summarise
from workhive.runtime import HandlerContext

__all__ = ["fingerprint", "slow_echo", "summarise", "word_count"]


def word_count(ctx: HandlerContext) -> dict[str, int]:
    """A plain function: counts the words of ``{"text": …}``; a missing text can never succeed."""
    text = ctx.data.get("text") if isinstance(ctx.data, dict) else None
    if not isinstance(text, str):
        raise workhive.Permanent(f"item {ctx.item_id} has no 'text' string")
    return {"words": len(text.split())}


async def slow_echo(ctx: HandlerContext) -> Any:
    """An async handler that takes its time (``{"seconds": 2}``): heartbeats keep its lease alive."""
    seconds = float(ctx.data.get("seconds", 1.0)) if isinstance(ctx.data, dict) else 1.0
    ctx.logger.info("item %s, attempt %d: sleeping %.1fs", ctx.item_id, ctx.attempt, seconds)
    await asyncio.sleep(seconds)
    return ctx.data


async def fingerprint(ctx: HandlerContext) -> dict[str, str]:
    """Serialise work on one resource across the fleet with a named lock (``{"repo": …, "text": …}``)."""
    async with ctx.lock(f"repo:{ctx.data['repo']}", ttl=60) as held:
        digest = hashlib.sha256(str(ctx.data.get("text", "")).encode()).hexdigest()
        return {"sha256": digest, "lock_token": str(held.token)}
