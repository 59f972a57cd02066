"""``workhive purge POOL --older-than 7d``: delete finished (done and poisoned) items; retention is yours."""

from __future__ import annotations

import re
import sys

import click

from workhive.cli.context import CliContext, echo, emit_json, json_option, pass_cli, require_pool

__all__ = ["purge_cmd", "parse_duration"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``30m``, ``12h``, ``7d`` or ``2w``; ``ValueError`` otherwise.

    >>> parse_duration("7d"), parse_duration("90")
    (604800.0, 90.0)
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: use a number of seconds or e.g. 90s, 30m, 12h, 7d, 2w")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


class _Duration(click.ParamType):
    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.command("purge")
@click.argument("pool")
@click.option(
    "--older-than",
    type=_Duration(),
    required=True,
    help="Only items finished longer ago than this (90s, 30m, 12h, 7d; 0 for every finished item).",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_cli
def purge_cmd(cli: CliContext, pool: str, older_than: float, yes: bool, as_json: bool) -> None:
    """Delete POOL's done and poisoned items that finished more than --older-than ago.

    Pending, delayed and claimed items are never touched. Asks first unless --yes
    (without a terminal to ask on, --yes is required).

    \b
    Example:
      workhive purge emails --older-than 7d --yes
    """
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("purge deletes items: pass --yes to confirm (no terminal to ask on)")
        click.confirm(
            f"delete every done and poisoned item of {pool!r} that finished more than {older_than:g}s ago?",
            abort=True,
            err=True,
        )

    async def purge() -> int:
        async with cli.hive(create=False) as hive:
            await require_pool(hive, pool)
            return await hive.pool(pool).purge(older_than)

    deleted = cli.run(purge)
    if as_json:
        emit_json({"pool": pool, "older_than": older_than, "deleted": deleted})
    else:
        echo(f"{pool}: deleted {deleted} finished item{'s' if deleted != 1 else ''}")
