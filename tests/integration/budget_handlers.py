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
