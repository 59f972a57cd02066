"""``workhive workers``: the registered workers, their status and last heartbeat."""

from __future__ import annotations

import re
from typing import Any

import click

from workhive.cli.context import CliContext, echo, emit_json, format_age, json_option, pass_cli, table
from workhive.cli.status_cmd import worker_health
from workhive.models import WorkerStatus

_STATUSES = [s.value for s in WorkerStatus]
_IN_FLIGHT = re.compile(r"^(\d+) in flight$")


def _capability(capabilities: tuple[str, ...], name: str) -> int | None:
    """The number a ``name=N`` capability holds (a fleet worker registers ``concurrency=N``), else None."""
    for capability in capabilities:
        key, _, value = capability.partition("=")
        if key == name and value.isdigit():
            return int(value)
    return None


def _in_flight(status: WorkerStatus, detail: str | None) -> int | None:
    """Items in flight as a busy fleet worker's detail says at its heartbeat (``"N in flight"``); idle: 0."""
    if status is WorkerStatus.IDLE:
        return 0
    match = _IN_FLIGHT.match(detail or "") if status is WorkerStatus.BUSY else None
    return int(match.group(1)) if match else None


@click.command("workers")
@click.option("--pool", default=None, help="Only workers serving this pool.")
@click.option("--status", "statuses", multiple=True, type=click.Choice(_STATUSES), help="Only these statuses.")
@click.option("--all", "show_all", is_flag=True, help="Include stopped and lost workers.")
@json_option
@pass_cli
def workers_cmd(cli: CliContext, pool: str | None, statuses: tuple[str, ...], show_all: bool, as_json: bool) -> None:
    """List workers: id, host, pid, pools, status, items in flight, health and heartbeat age.

    A fleet's worker process registers one worker that holds up to its
    ``--concurrency`` items in flight; IN FLIGHT shows ``n/concurrency`` as of
    its last heartbeat (``-`` when it does not say).

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
                    "concurrency": _capability(r.capabilities, "concurrency"),
                    "in_flight": _in_flight(r.status, r.detail),
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
    rows: list[tuple[Any, ...]] = [("WORKER", "HOST", "PID", "POOLS", "STATUS", "IN FLIGHT", "HEALTH", "HEARTBEAT")]
    for w in workers:
        in_flight = "-" if w["in_flight"] is None else str(w["in_flight"])
        if w["concurrency"] is not None:
            in_flight += f"/{w['concurrency']}"
        rows.append(
            (
                w["worker_id"],
                w["host"],
                w["pid"],
                ",".join(w["pools"]) or "-",
                w["status"],
                in_flight,
                w["health"],
                format_age(w["heartbeat_age"]) + " ago",
            )
        )
    table(rows)
