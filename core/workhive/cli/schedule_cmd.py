"""``workhive schedule add|list|rm``: recurring items stored in the hive, fired by every running supervisor."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

import click

from workhive.cli.context import CliContext, echo, emit_json, json_option, pass_cli, table
from workhive.errors import InvalidItem
from workhive.schedules import MAX_CATCH_UP, Schedule

__all__ = ["schedule_cmd"]


def _when(seconds: float, tz: str) -> str:
    import zoneinfo

    return dt.datetime.fromtimestamp(seconds, zoneinfo.ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M:%S %Z")


def default_name(pool: str, cron: str | None, every: str | None, tz: str, data: str | None) -> str:
    """A name from what the schedule does, so adding the same schedule twice is refused as a duplicate.

    >>> default_name("reports", "0 3 * * *", None, "UTC", None)
    'reports-faf740f3'
    """
    spec = json.dumps([cron, every, tz, data])
    return f"{pool}-{hashlib.sha256(spec.encode()).hexdigest()[:8]}"


@click.group("schedule")
def schedule_cmd() -> None:
    """Recurring items: add, list and remove schedules.

    Every running `workhive work` supervisor fires the hive's schedules; each tick
    pushes its item once, however many run.

    \b
    Examples:
      workhive schedule add reports --cron '0 3 * * *' --tz Europe/Berlin --data '{"kind": "daily"}'
      workhive schedule add feeds --every 30s --name poll-feeds
      workhive schedule list
      workhive schedule rm poll-feeds
    """


@schedule_cmd.command("add")
@click.argument("pool")
@click.option("--cron", metavar="EXPR", help="A five-field cron expression, e.g. '*/5 * * * *'.")
@click.option("--every", metavar="DURATION", help="An interval instead of --cron: 30s, 5m, 1h, 1d (at least 1s).")
@click.option("--tz", default="UTC", show_default=True, help="The time zone --cron is read in (IANA name).")
@click.option("--data", metavar="JSON", help="The data of each tick's item (JSON; default null).")
@click.option("--name", metavar="NAME", help="The schedule's name (default: the pool and a hash of the rest).")
@click.option(
    "--catch-up",
    type=click.IntRange(0, MAX_CATCH_UP),
    default=0,
    show_default=True,
    help="After downtime, fire at most this many missed ticks; 0 skips to now (fires the latest only).",
)
@json_option
@pass_cli
def add_cmd(
    cli: CliContext,
    pool: str,
    cron: str | None,
    every: str | None,
    tz: str,
    data: str | None,
    name: str | None,
    catch_up: int,
    as_json: bool,
) -> None:
    """Add a schedule that pushes --data to POOL on every tick of --cron (or --every)."""
    value: Any = None
    if data is not None:
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise InvalidItem(f'--data is not valid JSON ({exc}); e.g. --data \'{{"kind": "daily"}}\'') from None
    chosen = name if name is not None else default_name(pool, cron, every, tz, data)

    async def add() -> Schedule:
        async with cli.hive() as hive:
            return await hive.schedules().add(
                chosen, pool, cron=cron, every=every, tz=tz, data=value, catch_up=catch_up
            )

    schedule = cli.run(add)
    if as_json:
        emit_json(schedule.to_json())
    else:
        echo(f"schedule {schedule.name}: {pool} {_spec(schedule)}, next at {_when(schedule.next_tick(), schedule.tz)}")


def _spec(schedule: Schedule) -> str:
    if schedule.cron is not None:
        return f"cron '{schedule.cron}' ({schedule.tz})"
    return f"every {schedule.every:g}s"


@schedule_cmd.command("list")
@json_option
@pass_cli
def list_cmd(cli: CliContext, as_json: bool) -> None:
    """List the hive's schedules with their next fire time."""

    async def read() -> list[Schedule]:
        async with cli.hive(create=False) as hive:
            return await hive.schedules().list()

    schedules = cli.run(read)
    if as_json:
        emit_json([s.to_json() for s in schedules])
        return
    if not schedules:
        echo("no schedules (add one with: workhive schedule add POOL --cron '*/5 * * * *')")
        return
    rows: list[tuple[Any, ...]] = [("NAME", "POOL", "WHEN", "MISFIRE", "NEXT", "LAST")]
    for s in schedules:
        last = "-" if s.last_tick is None else _when(s.last_tick, s.tz)
        rows.append((s.name, s.pool, _spec(s), s.misfire, _when(s.next_tick(), s.tz), last))
    table(rows)


@schedule_cmd.command("rm")
@click.argument("name")
@json_option
@pass_cli
def rm_cmd(cli: CliContext, name: str, as_json: bool) -> None:
    """Remove the schedule NAME (items it pushed stay)."""

    async def remove() -> None:
        async with cli.hive(create=False) as hive:
            await hive.schedules().remove(name)

    cli.run(remove)
    if as_json:
        emit_json({"removed": name})
    else:
        echo(f"removed schedule {name}")
