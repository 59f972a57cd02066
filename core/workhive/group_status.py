"""The groups of a pool as plain data: what ``workhive status``, ``workhive group list`` and the dashboard show.

``gather_groups(hive, pool)`` joins ``Pool.groups()`` (settings and counts)
with the tenant budgets (``workhive.group_budgets``) into one JSON-ready
document (``workhive.cli.group_cmd.group_lines`` renders it for a terminal).

>>> await gather_groups(hive, "agents")  # doctest: +SKIP
{'pool': 'agents', 'pool_limit': None, 'default_limit': 2, 'groups': [...]}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workhive.group_budgets import group_budgets
from workhive.storage import ServesGroups

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = ["gather_groups", "has_groups"]


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
