"""``workhive group set|default-limit|pool-limit|budget|list``: the groups (tenants) of a pool.

Settings may be made before a group has items; they are kept in the hive.
"""

from __future__ import annotations

from typing import Any

import click

from workhive.cli.context import CliContext, echo, emit_json, format_age, json_option, pass_cli, table
from workhive.group_budgets import check_tpd
from workhive.group_status import gather_groups
from workhive.validation import check_group, check_limit, check_weight

__all__ = ["group_cmd", "group_lines"]


class _LimitOrNone(click.ParamType):
    """An integer limit, or ``none`` to remove it (range checks are the facade's, with its message)."""

    name = "N|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        if str(value).strip().lower() == "none":
            return None
        try:
            return int(str(value).strip())
        except ValueError:
            self.fail(f"{value!r} is not a whole number of items in flight, nor 'none' (no limit)", param, ctx)


class _TpdOrNone(click.ParamType):
    name = "N|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float | None:
        if value is None or isinstance(value, float):
            return value
        if str(value).strip().lower() == "none":
            return None
        try:
            return float(str(value).strip())
        except ValueError:
            self.fail(f"{value!r} is not a number of tokens per day, nor 'none' (no budget)", param, ctx)


LIMIT = _LimitOrNone()
TPD = _TpdOrNone()


@click.group("group")
def group_cmd() -> None:
    """Groups (tenants) of a pool: weights, limits on items in flight, token budgets.

    Claims serve the groups with ready items in turn (weighted); a group at its
    limit, or paused because its token budget is spent, waits while the others go on.

    \b
    Examples:
      workhive push agents jobs.jsonl --group-field tenant
      workhive group set agents tenant-42 --weight 2 --limit 4
      workhive group default-limit agents 2
      workhive group pool-limit agents 16
      workhive group budget agents tenant-42 --tpd 2000000
      workhive group list agents
    """


@group_cmd.command("set")
@click.argument("pool")
@click.argument("group")
@click.option("--weight", type=float, metavar="W", help="Its share of claims while backlogged (> 0; default 1).")
@click.option("--limit", type=LIMIT, metavar="N|none", help="Items of it in flight at once, fleet-wide; none removes.")
@pass_cli
def set_cmd(cli: CliContext, pool: str, group: str, weight: float | None, limit: int | str | None) -> None:
    """Set GROUP's weight and/or its limit on items in flight in POOL."""
    source = click.get_current_context().get_parameter_source("limit")
    limit_given = source is not None and source.name != "DEFAULT"
    if weight is None and not limit_given:
        raise click.UsageError("give --weight and/or --limit")
    # Every value is checked before anything is stored: a bad --limit leaves the weight unchanged too.
    check_group(group)
    if weight is not None:
        check_weight(weight)
    if limit_given:
        check_limit("a group limit", limit)  # type: ignore[arg-type]

    async def run() -> None:
        async with cli.hive(create=False) as hive:
            target = hive.pool(pool)
            if weight is not None:
                await target.set_group_weight(group, weight)
            if limit_given:
                await target.set_group_limit(group, limit)  # type: ignore[arg-type]

    cli.run(run)
    said = [f"weight {weight:g}"] if weight is not None else []
    if limit_given:
        said.append("no limit" if limit is None else f"limit {limit}")
    echo(f"group {group} of {pool}: {', '.join(said)}")


@group_cmd.command("default-limit")
@click.argument("pool")
@click.argument("limit", type=LIMIT, metavar="N|none")
@pass_cli
def default_limit_cmd(cli: CliContext, pool: str, limit: int | None) -> None:
    """The limit on items in flight of every named group of POOL without one of its own (none removes it)."""

    async def run() -> None:
        async with cli.hive(create=False) as hive:
            await hive.pool(pool).set_default_group_limit(limit)

    cli.run(run)
    echo(f"{pool}: default group limit {'none' if limit is None else limit}")


@group_cmd.command("pool-limit")
@click.argument("pool")
@click.argument("limit", type=LIMIT, metavar="N|none")
@pass_cli
def pool_limit_cmd(cli: CliContext, pool: str, limit: int | None) -> None:
    """The limit on items in flight in the whole of POOL, fleet-wide (none removes it)."""

    async def run() -> None:
        async with cli.hive(create=False) as hive:
            await hive.pool(pool).set_limit(limit)

    cli.run(run)
    echo(f"{pool}: pool limit {'none' if limit is None else limit}")


@group_cmd.command("budget")
@click.argument("pool")
@click.argument("group")
@click.option("--tpd", type=TPD, required=True, metavar="N|none", help="Tokens per day (> 0); none removes the budget.")
@pass_cli
def budget_cmd(cli: CliContext, pool: str, group: str, tpd: float | None) -> None:
    """Give GROUP of POOL a budget of tokens per day, charged by handlers' ctx.report_usage.

    Once spent, the group's items wait (they are not failed) until it refills;
    it refills continuously over 24 hours.
    """
    check_group(group)
    check_tpd(tpd)

    async def run() -> None:
        async with cli.hive(create=False) as hive:
            await hive.pool(pool).set_group_budget(group, tpd=tpd)

    cli.run(run)
    echo(f"group {group} of {pool}: {'no budget' if tpd is None else f'budget {tpd:,.0f} tokens/day'}")


@group_cmd.command("list")
@click.argument("pool")
@json_option
@pass_cli
def list_cmd(cli: CliContext, pool: str, as_json: bool) -> None:
    """The groups of POOL: weight, limit, in flight, ready, delayed, pause and budget of each."""

    async def run() -> dict[str, Any] | None:
        async with cli.hive(create=False) as hive:
            doc = await gather_groups(hive, pool)
            if doc is None:
                await hive.pool(pool).groups()  # raises the storage's ConfigError, saying which engines have groups
            return doc

    doc = cli.run(run)
    assert doc is not None
    if as_json:
        emit_json(doc)
        return
    echo(f"{pool}: pool limit {_none(doc['pool_limit'])}, default group limit {_none(doc['default_limit'])}")
    if not doc["groups"]:
        echo("no groups yet (push with --group-field, or set one: workhive group set POOL GROUP --weight W)")
        return
    rows: list[tuple[Any, ...]] = [("GROUP", "WEIGHT", "LIMIT", "IN FLIGHT", "READY", "DELAYED", "PAUSED", "BUDGET")]
    for g in doc["groups"]:
        rows.append(
            (
                "(ungrouped)" if g["group"] is None else g["group"],
                f"{g['weight']:g}",
                _none(g["effective_limit"]) + (" (default)" if g["limit"] is None and g["effective_limit"] else ""),
                g["in_flight"],
                g["ready"],
                g["waiting"],
                format_age(g["paused_for"]),
                "-" if g["tpd"] is None else f"{g['spent']:,.0f}/{g['tpd']:,.0f}",
            )
        )
    table(rows)


def _none(value: object) -> str:
    return "none" if value is None else str(value)


def group_lines(doc: dict[str, Any]) -> list[str]:
    """One line per group: in flight / limit, ready (and delayed), paused, budget spent / tpd.

    >>> row = {"group": "t-1", "weight": 1.0, "limit": None, "effective_limit": 2, "in_flight": 1, "ready": 4}
    >>> group_lines({"groups": [row | {"waiting": 0, "paused_for": 7300.0, "tpd": None}]})
    ['group t-1: 1/2 in flight, 4 ready, paused 2h01m more']
    """
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
            parts.append(f"paused {format_age(g['paused_for'])} more")
        if g["tpd"] is not None:
            parts.append(f"budget {g['spent']:,.0f}/{g['tpd']:,.0f} tokens/day spent")
        lines.append(f"group {name}: " + ", ".join(parts))
    return lines
