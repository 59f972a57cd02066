"""What the dashboard shows, read from a hive through the public API as plain JSON-ready data.

Nothing here holds or returns a secret: credentials are listed by name and
state from the fleet's shared cooldowns, never by key, and stored error texts
were scrubbed by the fleet before they were stored.
"""

from __future__ import annotations

import json
import time
from typing import Any

import attrs

from workhive.budgets import learned_rates
from workhive.credentials import DEFAULT_NAMESPACE
from workhive.envelope import data_text, headers
from workhive.errors import ConfigError, InvalidArgument, ItemNotFound, PoolNotFound
from workhive.group_status import gather_groups, has_groups
from workhive.hive import Hive
from workhive.item_progress import read_progress
from workhive.models import WorkerRecord, WorkerStatus, WorkItem
from workhive.storage import KeepsSteps

__all__ = ["RateTracker", "dead_items", "item_detail", "overview", "pool_groups", "require_pool"]

_GONE = (WorkerStatus.LOST, WorkerStatus.STOPPED)
# Fields of a credential's shared state that may be shown; anything else (the key's fingerprint) is not.
_CREDENTIAL_FIELDS = ("state", "until", "reason")


@attrs.define
class RateTracker:
    """Done-per-second per pool, from the difference between two overviews at least ``window`` apart."""

    window: float = 1.0
    _last: dict[str, tuple[float, int]] = attrs.field(factory=dict)
    _rates: dict[str, float] = attrs.field(factory=dict)

    def rate(self, pool: str, done: int, now: float) -> float | None:
        previous = self._last.get(pool)
        if previous is None:
            self._last[pool] = (now, done)
            return None
        then, count = previous
        if now - then >= self.window:
            self._rates[pool] = max(0.0, (done - count) / (now - then))
            self._last[pool] = (now, done)
        return self._rates.get(pool)


async def require_pool(hive: Hive, name: str) -> None:
    """``PoolNotFound`` (the dashboard answers 404) unless ``name`` is a pool with items."""
    hive.pool(name)  # a malformed name is InvalidName, answered 400
    known = await hive.pools()
    if name not in known:
        listing = ", ".join(sorted(known)) or "none yet"
        raise PoolNotFound(f"no pool named {name!r}; known pools: {listing}", pool=name, known=known)


def _worker(record: WorkerRecord, now: float, reap_after: float) -> dict[str, Any]:
    if record.status in _GONE:
        health = record.status.value
    else:
        health = "stale" if now - record.last_heartbeat >= reap_after else "active"
    return {
        "worker_id": record.worker_id,
        "host": record.host,
        "pid": record.pid,
        "pools": list(record.pools),
        "status": record.status.value,
        "health": health,
        "heartbeat_age": max(0.0, now - record.last_heartbeat),
        "detail": record.detail,
    }


def _credential(name: str, value: Any, now: float, learned: dict[str, Any] | None) -> dict[str, Any]:
    shown = {k: value.get(k) for k in _CREDENTIAL_FIELDS if isinstance(value, dict) and k in value}
    if learned is not None:
        shown["learned_rpm"] = learned["rpm"]
    until = shown.get("until")
    state = shown.get("state") or "unknown"
    if state in ("cooling", "parked") and isinstance(until, (int, float)) and until <= now:
        state = "available"
    return {
        "name": name,
        **shown,
        "state": state,
        "cooldown_remaining": max(0.0, until - now) if isinstance(until, (int, float)) else None,
    }


async def overview(hive: Hive, rates: RateTracker, worker_limit: int = 500) -> dict[str, Any]:
    """Pools (depth by state, done rate, oldest pending age), workers, and credential states."""
    now = await hive.now()
    wall = time.time()
    pools = []
    for name in sorted(await hive.pools()):
        stats = await hive.pool(name).stats()
        groups = await gather_groups(hive, name)
        pools.append(
            {
                "pool": name,
                "pending": stats.pending,
                "delayed": stats.delayed,
                "claimed": stats.claimed,
                "done": stats.done,
                "poisoned": stats.poisoned,
                "cancelled": stats.cancelled,
                "oldest_pending_age": None
                if stats.oldest_pending_at is None
                else max(0.0, now - stats.oldest_pending_at),
                "done_per_second": rates.rate(name, stats.done, wall),
                # the same figures as `workhive group list` (None: the pool uses no groups)
                "groups": groups if has_groups(groups) else None,
            }
        )
    records = await hive.workers.list()
    workers = [_worker(r, now, hive.reap_after) for r in records]
    # Live ones first, most recently heard from first; a long history of stopped ones is cut.
    order = {"active": 0, "stale": 1, "lost": 2, "stopped": 3}
    workers.sort(key=lambda w: (order.get(w["health"], 4), w["heartbeat_age"]))
    counts = {h: sum(1 for w in workers if w["health"] == h) for h in order}
    shared = await hive.shared(DEFAULT_NAMESPACE).items()
    learned = await learned_rates(hive)
    credentials = [
        _credential(name, shared.get(name, {"state": "available"}), now, learned.get(name))
        for name in sorted(set(shared) | set(learned))
    ]
    return {
        "now": now,
        "pools": pools,
        "workers": workers[:worker_limit],
        "worker_counts": counts,
        "workers_total": len(workers),
        "credentials": credentials,
    }


def _item(item: WorkItem, now: float) -> dict[str, Any]:
    return {
        "id": item.id,
        "pool": item.pool,
        "state": item.state.value,
        "priority": item.priority,
        "attempts": item.attempts,
        "max_attempts": item.max_attempts,
        "token": item.token,
        "claimed_by": item.claimed_by,
        "created_at": item.created_at,
        "available_at": item.available_at,
        "lease_expires_at": item.lease_expires_at,
        "finished_at": item.finished_at,
        "age": max(0.0, now - item.created_at),
        "releases": item.releases,
        "dedup_key": item.dedup_key,
        "error": item.error,
        "data": data_text(item.payload),  # as pushed, without the envelope
        "trace": headers(item.payload).get("traceparent"),  # the W3C trace it was pushed in, to look it up
        "result": item.result_payload,
    }


async def dead_items(hive: Hive, pool: str, limit: int, offset: int) -> dict[str, Any]:
    """Poisoned items of ``pool``, oldest first, with their error text."""
    await require_pool(hive, pool)
    now = await hive.now()
    items = await hive.pool(pool).dead(limit=limit, offset=offset)
    total = (await hive.pool(pool).stats()).poisoned
    return {"pool": pool, "total": total, "offset": offset, "items": [_item(i, now) for i in items]}


async def item_detail(hive: Hive, pool: str, item_id: str) -> dict[str, Any]:
    """One item, whatever its state (``ItemNotFound`` → 404)."""
    await require_pool(hive, pool)
    try:
        item = await hive.pool(pool).get(item_id)
    except ItemNotFound:
        raise ItemNotFound(f"no item {item_id!r} in pool {pool!r}", item_id=item_id, pool=pool) from None
    progress = await read_progress(hive, pool, item.id)  # ctx.progress, as the handler last reported it
    detail = _item(item, await hive.now()) | {"progress": None if progress is None else json.dumps(progress)}
    if isinstance(hive.storage, KeepsSteps):  # its durable steps (ctx.step), in store order; JSON text, as data is
        detail["steps"] = [
            {"key": s.key, "value": s.payload, "failed": s.failed, "token": s.token, "stored_at": s.stored_at}
            for s in await hive.pool(pool).steps(item.id)
        ]
    return detail


async def pool_groups(hive: Hive, pool: str) -> dict[str, Any]:
    """The groups of ``pool`` (``workhive group list --json``); settings may exist before any item.

    A storage without groups is bad input for this call (400, saying which
    engines have them), not a storage failure (503).
    """
    hive.pool(pool)  # a malformed name is InvalidName, answered 400
    doc = await gather_groups(hive, pool)
    if doc is None:
        try:
            await hive.pool(pool).groups()  # raises ConfigError, naming the engines that have groups
        except ConfigError as exc:
            raise InvalidArgument(str(exc)) from None
    assert doc is not None
    return doc
