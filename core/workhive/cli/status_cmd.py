"""``workhive status [POOL]``: item counts per pool and the health of the worker fleet."""

from __future__ import annotations

from typing import Any

import click

from workhive.budgets import learned_rates
from workhive.cli.context import CliContext, echo, emit_json, format_age, json_option, pass_cli, require_pool, table
from workhive.cli.group_cmd import group_lines
from workhive.group_status import gather_groups, has_groups
from workhive.hive import Hive
from workhive.item_progress import read_progress
from workhive.liveness import process_gone
from workhive.models import ItemState, PoolStats, WorkerRecord, WorkerStatus
from workhive.urls import redact_url

_GONE = (WorkerStatus.LOST, WorkerStatus.STOPPED)


def worker_health(record: WorkerRecord, now: float, reap_after: float) -> str:
    """``active``, ``dead`` (its process on this host is gone), ``stale`` (silent longer than
    ``reap_after``, not yet reaped), ``lost`` or ``stopped``."""
    if record.status in _GONE:
        return record.status.value
    if process_gone(record.host, record.pid):
        return "dead"
    return "stale" if now - record.last_heartbeat >= reap_after else "active"


def pool_json(stats: PoolStats, now: float) -> dict[str, Any]:
    oldest = None if stats.oldest_pending_at is None else max(0.0, now - stats.oldest_pending_at)
    return {
        "pool": stats.pool,
        "pending": stats.pending,
        "delayed": stats.delayed,
        "claimed": stats.claimed,
        "done": stats.done,
        "poisoned": stats.poisoned,
        "cancelled": stats.cancelled,
        "oldest_pending_age": oldest,
    }


async def _progress(hive: Hive, pool: str, limit: int = 100) -> dict[str, Any]:
    """The reported progress (``ctx.progress``) of up to ``limit`` claimed items of ``pool``, by item id."""
    found: dict[str, Any] = {}
    for item in await hive.pool(pool).items(ItemState.CLAIMED, limit=limit):
        value = await read_progress(hive, pool, item.id)
        if value is not None and value.get("token") == item.token:
            found[item.id] = value
    return found


async def gather_status(hive: Hive, pool: str | None) -> dict[str, Any]:
    """What ``status`` shows, as plain data (the ``--json`` document)."""
    if pool is not None:
        await require_pool(hive, pool)
    names = [pool] if pool is not None else sorted(await hive.pools())
    now = await hive.now()
    pools = []
    for name in names:
        doc = pool_json(await hive.pool(name).stats(), now) | {"progress": await _progress(hive, name)}
        groups = await gather_groups(hive, name)
        if has_groups(groups):  # a pool without groups reads as it always did
            doc["groups"] = groups
        pools.append(doc)
    records = await hive.workers.list(pool=pool) if pool is not None else await hive.workers.list()
    counts = {"active": 0, "dead": 0, "stale": 0, "lost": 0, "stopped": 0}
    for record in records:
        counts[worker_health(record, now, hive.reap_after)] += 1
    # Optional backend method: one-line facts about the store itself (e.g. a Redis that persists nothing).
    notices = getattr(hive.storage, "notices", None)
    return {
        "pools": pools,
        "workers": counts,
        "notices": list(await notices()) if notices is not None else [],
        "key_rates": await learned_rates(hive),
    }


@click.command("status")
@click.argument("pool", required=False)
@json_option
@pass_cli
def status_cmd(cli: CliContext, pool: str | None, as_json: bool) -> None:
    """Show pending, claimed, done, poisoned and cancelled items per pool, and active, stale and lost workers.

    With POOL, only that pool (and the workers serving it).
    """

    async def status() -> dict[str, Any]:
        async with cli.hive(create=False) as hive:
            return await gather_status(hive, pool)

    data = cli.run(status)
    if as_json:
        emit_json(data)
        return
    if not data["pools"]:
        echo(f"no pools yet in {redact_url(cli.config['storage'])} (push some work: workhive push POOL FILE)")
    else:
        rows: list[tuple[Any, ...]] = [
            ("POOL", "PENDING", "DELAYED", "CLAIMED", "DONE", "POISONED", "CANCELLED", "OLDEST")
        ]
        for p in data["pools"]:
            rows.append(
                (
                    p["pool"],
                    p["pending"],
                    p["delayed"],
                    p["claimed"],
                    p["done"],
                    p["poisoned"],
                    p["cancelled"],
                    format_age(p["oldest_pending_age"]),
                )
            )
        table(rows)
        for p in data["pools"]:
            if "groups" in p:
                for line in group_lines(p["groups"]):
                    echo(f"{p['pool']}: {line}")
    w = data["workers"]
    dead = f"{w['dead']} dead (process gone; `workhive reap` releases their items), " if w["dead"] else ""
    echo(f"workers: {w['active']} active, {dead}{w['stale']} stale, {w['lost']} lost, {w['stopped']} stopped")
    for notice in data["notices"]:
        echo(f"note: {notice}")
    for name, rate in data["key_rates"].items():
        how = "ramping up" if rate["ramping"] else f"after {rate['decreases']} slow-down(s) on 429s"
        echo(f"key {name}: {rate['rpm']:g} requests/min effective rate ({how})")
