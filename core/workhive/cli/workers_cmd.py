"""``workhive workers``: the registered workers, their status and last heartbeat."""

from __future__ import annotations

from typing import Any

import click

from workhive.cli.context import CliContext, echo, emit_json, format_age, json_option, pass_cli, table
from workhive.cli.status_cmd import worker_health
from workhive.models import WorkerStatus

_STATUSES = [s.value for s in WorkerStatus]


@click.command("workers")
@click.option("--pool", default=None, help="Only workers serving this pool.")
@click.option("--status", "statuses", multiple=True, type=click.Choice(_STATUSES), help="Only these statuses.")
@click.option("--all", "show_all", is_flag=True, help="Include stopped and lost workers.")
@json_option
@pass_cli
def workers_cmd(cli: CliContext, pool: str | None, statuses: tuple[str, ...], show_all: bool, as_json: bool) -> None:
    """List workers: id, host, pid, pools, status, health and heartbeat age.

    Health is ``active``, ``dead`` (its process on this host is gone; `workhive reap`
    releases its items at once), ``stale`` (silent longer than reap_after; `workhive reap`
    will declare it lost), ``lost`` or ``stopped``.
    """

    async def listing() -> list[dict[str, Any]]:
        async with cli.hive(create=False) as hive:
            wanted = frozenset(WorkerStatus(s) for s in statuses) if statuses else None
            if wanted is None and not show_all:
                wanted = frozenset(s for s in WorkerStatus if s not in (WorkerStatus.LOST, WorkerStatus.STOPPED))
            records = await hive.workers.list(statuses=wanted, pool=pool)
            now = await hive.now()
            return [
                {
                    "worker_id": r.worker_id,
                    "host": r.host,
                    "pid": r.pid,
                    "pools": list(r.pools),
                    "capabilities": list(r.capabilities),
                    "status": r.status.value,
                    "health": worker_health(r, now, hive.reap_after),
                    "heartbeat_age": max(0.0, now - r.last_heartbeat),
                    "registered_at": r.registered_at,
                    "detail": r.detail,
                }
                for r in records
            ]

    workers = cli.run(listing)
    if as_json:
        emit_json(workers)
        return
    if not workers:
        echo("no workers" + ("" if show_all else " running (--all includes stopped and lost ones)"))
        return
    rows: list[tuple[Any, ...]] = [("WORKER", "HOST", "PID", "POOLS", "STATUS", "HEALTH", "HEARTBEAT")]
    for w in workers:
        rows.append(
            (
                w["worker_id"],
                w["host"],
                w["pid"],
                ",".join(w["pools"]) or "-",
                w["status"],
                w["health"],
                format_age(w["heartbeat_age"]) + " ago",
            )
        )
    table(rows)
