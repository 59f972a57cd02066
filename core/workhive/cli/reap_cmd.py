"""``workhive reap``: declare silent workers lost and give their items back."""

from __future__ import annotations

from typing import Any

import attrs
import click

from workhive.cli.context import CliContext, emit_json, json_option, pass_cli, table


@click.command("reap")
@click.option(
    "--threshold",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds of silence before a worker is lost (default: the reap_after setting).",
)
@json_option
@pass_cli
def reap_cmd(cli: CliContext, threshold: float | None, as_json: bool) -> None:
    """Mark workers whose heartbeat is older than the threshold lost, releasing their items in every pool.

    Released items keep the attempt they spent; one that has used all of them is poisoned.
    A running `workhive work` fleet reaps on its own; this is for fleets that are gone.
    """

    async def reap() -> tuple[list[dict[str, Any]], float]:
        async with cli.hive() as hive:
            limit = hive.reap_after if threshold is None else threshold
            return [attrs.asdict(r) for r in await hive.workers.reap(limit)], limit

    reaped, limit = cli.run(reap)
    if as_json:
        emit_json({"threshold": limit, "reaped": reaped})
        return
    if not reaped:
        click.echo(f"no worker has been silent for {limit:g}s or more")
        return
    rows: list[tuple[Any, ...]] = [("WORKER", "RELEASED", "POISONED")]
    rows.extend((r["worker_id"], r["released"], r["poisoned"]) for r in reaped)
    table(rows)
    click.echo(f"reaped {len(reaped)} worker{'s' if len(reaped) != 1 else ''}")
