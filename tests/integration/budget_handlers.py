"""Handlers for the rate-budget runtime tests (imported by spec, ``budget_handlers:NAME``)."""

from __future__ import annotations

from typing import Any

from workhive.errors import RateLimited


def reports_usage(ctx: Any) -> dict[str, Any]:
    ctx.report_usage(tokens=100)
    return {"key": ctx.credential.name}


def reports_usage_of_another_key(ctx: Any) -> None:
    ctx.report_usage(tokens=100, credential="SOMEONE_ELSES_KEY")


def huge_estimate(ctx: Any) -> None:
    return None


huge_estimate.estimate_tokens = lambda data: 10**9  # type: ignore[attr-defined]


def bad_estimate(ctx: Any) -> None:
    return None


bad_estimate.estimate_tokens = lambda data: "lots"  # type: ignore[attr-defined]


def rate_limited_once(ctx: Any) -> str:
    if ctx.item.releases == 0:
        raise RateLimited(retry_after=0.001)
    return "ok"


#: call start times of ``first_call_refused_late`` (time.time()), and when its 429 was raised
CALLS: list[float] = []
REFUSED: list[float] = []


async def first_call_refused_late(ctx: Any) -> str:
    """The first call takes 0.9 s and ends in a 429 asking for 2 s; later calls succeed at once.

    Meanwhile the other workers have reserved slots at the old rate and sleep until them.
    """
    import asyncio
    import time

    CALLS.append(time.time())
    if len(CALLS) == 1:
        await asyncio.sleep(0.9)
        REFUSED.append(time.time())
        raise RateLimited(retry_after=2.0)
    return "ok"
