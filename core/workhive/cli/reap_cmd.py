"""``workhive reap``: declare silent workers lost and give their items back."""

from __future__ import annotations

from typing import Any

import attrs
import click

from workhive.cli.context import CliContext, echo, emit_json, json_option, pass_cli, table
from workhive.liveness import reap_gone


@click.command("reap")
@click.option(
    "--threshold",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds of silence before a worker is lost (default: the reap_after setting).",
)
@click.option(
    "--force", is_flag=True, help="Accept a threshold below the heartbeat interval (live workers will be reaped)."
)
@json_option
@pass_cli
def reap_cmd(cli: CliContext, threshold: float | None, force: bool, as_json: bool) -> None:
    """Mark workers whose heartbeat is older than the threshold lost, releasing their items in every pool.

    Workers on this host whose process is gone are reaped at once, whatever the threshold.
    Released items keep the attempt they spent; one that has used all of them is poisoned.
    A running `workhive work` fleet reaps on its own; this is for fleets that are gone.
    A threshold below the heartbeat interval would reap live workers between two beats:
    it is refused unless --force.
    """
    heartbeat = cli.config["heartbeat"]
    if threshold is not None and threshold <= heartbeat and not force:
        raise click.BadParameter(
            f"{threshold:g}s is not longer than the heartbeat interval "
            f"({heartbeat:g}s, {cli.config.source('heartbeat')}): "
            "live workers would be reaped between two heartbeats. Use a longer threshold, or --force if the "
            "workers you mean to reap are gone",
            param_hint="--threshold",
        )

    async def reap() -> tuple[list[dict[str, Any]], float]:
        async with cli.hive(create=False) as hive:
            limit = hive.reap_after if threshold is None else threshold
            # Workers on this host whose process is gone go at once, whatever the threshold.
            gone = await reap_gone(hive)
            return [attrs.asdict(r) for r in [*gone, *await hive.workers.reap(limit)]], limit

    reaped, limit = cli.run(reap)
    if as_json:
        emit_json({"threshold": limit, "reaped": reaped})
        return
    if not reaped:
        echo(f"no worker has been silent for {limit:g}s or more")
        return
    rows: list[tuple[Any, ...]] = [("WORKER", "RELEASED", "POISONED")]
    rows.extend((r["worker_id"], r["released"], r["poisoned"]) for r in reaped)
    table(rows)
    echo(f"reaped {len(reaped)} worker{'s' if len(reaped) != 1 else ''}")
