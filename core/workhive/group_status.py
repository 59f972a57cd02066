"""The groups of a pool as plain data: what ``workhive status``, ``workhive group list`` and the dashboard show.

``gather_groups(hive, pool)`` joins ``Pool.groups()`` (settings and counts)
with the tenant budgets (``workhive.group_budgets``) into one JSON-ready
document; ``group_lines`` renders it for a terminal.

>>> row = {"group": "t-1", "weight": 1.0, "limit": None, "effective_limit": 2, "in_flight": 1, "ready": 4}
>>> doc = {"pool_limit": None, "default_limit": 2, "groups": [row | {"waiting": 0, "paused_for": None, "tpd": None}]}
>>> group_lines(doc)
['group t-1: 1/2 in flight, 4 ready']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workhive.group_budgets import group_budgets
from workhive.storage import ServesGroups

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = ["gather_groups", "group_lines", "has_groups"]


async def gather_groups(hive: Hive, pool: str) -> dict[str, Any] | None:
    """The pool's groups, their settings, counts and budgets; None when the storage has no groups.

    Each group's ``effective_limit`` is its own limit, else the pool's default
    for named groups; ``paused_for`` the seconds its pause has left (None: not
    paused); ``tpd``/``spent`` its token budget (None: it has none).

    >>> await gather_groups(hive, "agents")  # doctest: +SKIP
    {'pool': 'agents', 'pool_limit': None, 'default_limit': 2, 'groups': [...]}
    """
    if not isinstance(hive.storage, ServesGroups):
        return None
    report = await hive.pool(pool).groups()
    budgets = await group_budgets(hive, pool)
    now = await hive.now()
    groups = []
    named = {g.group for g in report.groups}
    for stats in report.groups:
        budget = budgets.get(stats.group) if stats.group is not None else None
        own = stats.limit
        groups.append(
            {
                "group": stats.group,
                "weight": stats.weight,
                "limit": own,
                "effective_limit": own if own is not None or stats.group is None else report.default_limit,
                "in_flight": stats.in_flight,
                "ready": stats.ready,
                "waiting": stats.waiting,
                "paused_for": None if stats.paused_until is None else max(0.0, stats.paused_until - now),
                "tpd": None if budget is None else budget.tpd,
                "spent": None if budget is None else round(budget.spent, 3),
            }
        )
    for name, budget in budgets.items():  # a budget set before its group had items or settings
        if name not in named:
            groups.append(
                {
                    "group": name,
                    "weight": 1.0,
                    "limit": None,
                    "effective_limit": report.default_limit,
                    "in_flight": 0,
                    "ready": 0,
                    "waiting": 0,
                    "paused_for": None,
                    "tpd": budget.tpd,
                    "spent": round(budget.spent, 3),
                }
            )
    groups.sort(key=lambda g: (g["group"] is not None, g["group"] or ""))
    return {
        "pool": pool,
        "pool_limit": report.pool_limit,
        "default_limit": report.default_limit,
        "groups": groups,
    }


def has_groups(doc: dict[str, Any] | None) -> bool:
    """Whether a pool uses groups at all: a named group, or a pool-wide setting (else status stays as it was)."""
    if doc is None:
        return False
    return any(g["group"] is not None for g in doc["groups"]) or doc["pool_limit"] is not None


def group_lines(doc: dict[str, Any]) -> list[str]:
    """One line per group: in flight / limit, ready (and waiting), paused, budget spent / tpd."""
    lines = []
    for g in doc["groups"]:
        name = "(ungrouped)" if g["group"] is None else g["group"]
        limit = "" if g["effective_limit"] is None else f"/{g['effective_limit']}"
        parts = [f"{g['in_flight']}{limit} in flight", f"{g['ready']} ready"]
        if g["waiting"]:
            parts.append(f"{g['waiting']} delayed")
        if g["weight"] != 1.0:
            parts.append(f"weight {g['weight']:g}")
        if g["paused_for"] is not None:
            parts.append(f"paused {g['paused_for']:.0f} s more")
        if g["tpd"] is not None:
            parts.append(f"budget {g['spent']:,.0f}/{g['tpd']:,.0f} tokens/day spent")
        lines.append(f"group {name}: " + ", ".join(parts))
    return lines
