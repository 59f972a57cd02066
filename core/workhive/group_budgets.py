"""Tenant token budgets: a budget of tokens per day (``tpd``) for each group of a pool.

``set_group_budget`` stores the setting in the hive's shared state (every
engine has it); ``GroupBudgets`` is a worker process's side: it charges the
tokens a handler reported (``ctx.report_usage``) to the item's group and,
once the group's budget is spent, pauses the group (``Pool.pause_group``)
until it refills: its items wait, they are not failed, and items already
running finish. ``group_budgets`` reads settings and spend back for
``workhive status``, ``workhive group list`` and the dashboard.

The spend is a GCRA budget (``workhive.budgets.TakesBudget``) keyed by pool
and group: one atomic storage call per charge, on the backend's clock, across
the whole fleet. It is a bucket of ``tpd`` tokens that refills continuously
over 24 hours (a rolling day, not a calendar day: no midnight stampede where
every tenant's budget comes back at once). Why not a counter in shared
state: shared state has no atomic increment, and a read-modify-write from
many processes loses charges.

>>> budget_key("agents", "tenant-42")
'group-tpd/agents/tenant-42'
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from workhive.budgets import BudgetTake, TakesBudget
from workhive.errors import ConfigError, InvalidArgument, WorkhiveError
from workhive.storage import ServesGroups
from workhive.validation import check_group, check_name

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = [
    "DAY",
    "GROUP_BUDGET_NAMESPACE",
    "GroupBudget",
    "GroupBudgets",
    "budget_key",
    "check_tpd",
    "group_budgets",
    "set_group_budget",
]

log = logging.getLogger("workhive.group_budgets")

#: the shared-state namespace the settings live in, one key ``POOL/GROUP`` each
GROUP_BUDGET_NAMESPACE = "workhive-group-budgets"
#: the period a ``tpd`` budget refills over (seconds)
DAY = 86400.0
#: how long a worker process trusts the settings it read (seconds): a change reaches the fleet within this
SETTINGS_TTL = 5.0


def budget_key(pool: str, group: str) -> str:
    """The ``TakesBudget`` key of a group's spend (names hold no ``/``, so no two pools or groups share one)."""
    return f"group-tpd/{pool}/{group}"


def check_tpd(tpd: object) -> float | None:
    """A budget of tokens per day: a finite number > 0, or None (no budget); else ``InvalidArgument``.

    >>> check_tpd(1_000_000)
    1000000.0
    >>> check_tpd(0)
    Traceback (most recent call last):
    ...
    workhive.errors.InvalidArgument: tpd (tokens per day) must be a finite number > 0, ... got 0
    """
    if tpd is None:
        return None
    if isinstance(tpd, bool) or not isinstance(tpd, (int, float)) or not math.isfinite(tpd) or tpd <= 0:
        raise InvalidArgument(
            f"tpd (tokens per day) must be a finite number > 0, or none to remove the budget; got {tpd!r}", value=tpd
        )
    return float(tpd)


@attrs.frozen
class GroupBudget:
    """A group's budget as stored and spent: ``spent`` tokens of the last day not yet refilled, of ``tpd``.

    ``spent`` may pass ``tpd`` a little: items already running when the budget
    ran out finish and are charged. ``refills_in`` is how many seconds until
    the group is under its budget again (0: it is).
    """

    pool: str
    group: str
    tpd: float
    spent: float
    refills_in: float

    def to_json(self) -> dict[str, Any]:
        return {"tpd": self.tpd, "spent": round(self.spent, 3), "refills_in": round(self.refills_in, 3)}


def _storage(hive: Hive) -> TakesBudget:
    storage = hive.storage
    if not isinstance(storage, TakesBudget) or not isinstance(storage, ServesGroups):
        raise ConfigError(
            f"storage {type(storage).__name__} cannot keep group budgets (it needs groups and rate budgets): "
            "use memory, sqlite, postgres or redis"
        )
    return storage


async def _debt(storage: TakesBudget, key: str) -> float:
    """Seconds of refill the spend of ``key`` is ahead of now (0: nothing spent), read without changing it.

    A take whose cost fills the whole tolerance waits exactly the debt; a
    ``max_wait`` below 0 makes every backend store nothing (``gcra_choose``).
    """
    _, wait = await storage.take_budget([[BudgetTake(key, 1.0, DAY, DAY)]], -1.0)
    return max(0.0, wait)


async def _move_debt(storage: TakesBudget, key: str, seconds: float) -> None:
    if seconds:
        await storage.take_budget([[BudgetTake(key, 1.0, DAY, seconds)]], math.inf)


async def set_group_budget(hive: Hive, pool: str, group: str, tpd: float | None) -> None:
    """Set (or with ``tpd=None`` remove) the token budget per day of ``group`` in ``pool``.

    Tokens already spent count against the new budget: spend is kept in
    tokens, so raising the budget of a group that ran out lets it go on at
    once, and lowering it may pause it. Removing the budget resumes the group.
    Bad input (``InvalidName``, ``InvalidArgument``; ``ConfigError`` on a
    storage without groups) changes nothing.

    >>> await set_group_budget(hive, "agents", "tenant-42", 2_000_000)  # doctest: +SKIP
    """
    check_name("pool name", pool)
    check_group(group)
    value = check_tpd(tpd)
    storage = _storage(hive)
    shared = hive.shared(GROUP_BUDGET_NAMESPACE)
    name = f"{pool}/{group}"
    old = await shared.get(name)
    old_tpd = old.get("tpd") if isinstance(old, dict) else None
    target = hive.pool(pool)
    if value is None:
        await shared.delete(name)
        await target.pause_group(group, None)
        return
    await shared.put(name, {"tpd": value})
    key = budget_key(pool, group)
    debt = await _debt(storage, key)
    if isinstance(old_tpd, (int, float)) and old_tpd > 0 and debt > 0:
        # The debt is kept in seconds of refill at the old rate: restate it at the new one.
        rescaled = debt * float(old_tpd) / value
        await _move_debt(storage, key, rescaled - debt)
        debt = rescaled
    over = debt - DAY
    await target.pause_group(group, over if over > 0 else None)


async def group_budgets(hive: Hive, pool: str) -> dict[str, GroupBudget]:
    """Every group of ``pool`` with a budget, by group name, with what it spent (one read per group).

    >>> await group_budgets(hive, "agents")  # doctest: +SKIP
    {'tenant-42': GroupBudget(pool='agents', group='tenant-42', tpd=2000000.0, spent=1250.0, refills_in=0.0)}
    """
    stored = await hive.shared(GROUP_BUDGET_NAMESPACE).items()
    storage = hive.storage
    out: dict[str, GroupBudget] = {}
    prefix = f"{pool}/"
    for name, value in sorted(stored.items()):
        if not name.startswith(prefix) or not isinstance(value, dict):
            continue
        tpd = value.get("tpd")
        if isinstance(tpd, bool) or not isinstance(tpd, (int, float)) or not tpd > 0:
            continue  # written by something else: not a budget this workhive understands
        group = name[len(prefix) :]
        debt = await _debt(storage, budget_key(pool, group)) if isinstance(storage, TakesBudget) else 0.0
        out[group] = GroupBudget(pool, group, float(tpd), debt * float(tpd) / DAY, max(0.0, debt - DAY))
    return out


class GroupBudgets:
    """A worker process's side of the group budgets of one pool: charge usage, pause a spent group.

    >>> budgets = GroupBudgets(hive, "agents")  # doctest: +SKIP
    >>> await budgets.charge("tenant-42", 1500)  # doctest: +SKIP
    0.0
    """

    def __init__(
        self, hive: Hive, pool: str, *, settings_ttl: float = SETTINGS_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._hive = hive
        self.pool = pool
        self._settings_ttl = settings_ttl
        self._clock = clock
        self._read_at = -math.inf
        self._tpd: dict[str, float] = {}

    async def tpd(self, group: str) -> float | None:
        """The group's budget as last read (settings are re-read at most every ``settings_ttl`` seconds)."""
        now = self._clock()
        if now - self._read_at >= self._settings_ttl:
            stored = await self._hive.shared(GROUP_BUDGET_NAMESPACE).items()
            prefix = f"{self.pool}/"
            fresh: dict[str, float] = {}
            for name, value in stored.items():
                tpd = value.get("tpd") if isinstance(value, dict) and name.startswith(prefix) else None
                if isinstance(tpd, (int, float)) and not isinstance(tpd, bool) and tpd > 0:
                    fresh[name[len(prefix) :]] = float(tpd)
            self._tpd, self._read_at = fresh, now
        return self._tpd.get(group)

    async def charge(self, group: str | None, tokens: float | None) -> float:
        """Charge ``tokens`` to ``group``; if that spent its budget, pause it until it refills.

        Returns the pause in seconds (0: the group is within its budget, has
        none, or nothing was charged). A storage hiccup is logged, never
        raised: the item it came from is done, and is not worth losing.
        """
        if group is None or not tokens or tokens <= 0:
            return 0.0
        try:
            tpd = await self.tpd(group)
            if tpd is None:
                return 0.0
            storage = _storage(self._hive)
            take = BudgetTake(budget_key(self.pool, group), DAY / tpd, DAY, float(tokens))
            _, wait = await storage.take_budget([[take]], math.inf)
            if wait > 0:
                # Another process may pause it at once for as long: the longer pause is the right one
                # either way, and the next charge after a shorter one pauses the group again.
                await self._hive.pool(self.pool).pause_group(group, wait)
                log.info("group %s of pool %s spent its %g tokens/day; paused %.0f s", group, self.pool, tpd, wait)
            return max(0.0, wait)
        except WorkhiveError as exc:
            log.warning("charging %g tokens to group %s of pool %s failed: %s", tokens, group, self.pool, exc)
            return 0.0
