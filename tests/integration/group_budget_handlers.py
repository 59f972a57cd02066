"""Handlers for the tenant budget tests (imported by spec, ``group_budget_handlers:NAME``)."""

from __future__ import annotations

from typing import Any


def uses_tokens(ctx: Any) -> dict[str, Any]:
    """Reports the tokens its item says it used (no API key: the group's budget is charged alone)."""
    ctx.report_usage(tokens=ctx.data["tokens"])
    return {"group": ctx.item.group}
