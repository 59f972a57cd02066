"""``workhive cancel POOL ID…``: stop items, pending or running; ``--list`` shows the cancelled ones."""

from __future__ import annotations

from typing import Any

import click

from workhive.cli.context import CliContext, echo, emit_json, json_option, pass_cli, require_pool, table
from workhive.models import ItemState


@click.command("cancel")
@click.argument("pool")
@click.argument("item_ids", metavar="[ID]...", nargs=-1)
@click.option("--list", "listing", is_flag=True, help="List POOL's cancelled items instead, oldest first.")
@click.option("--limit", type=click.IntRange(min=1, max=100_000), default=100, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0)
@json_option
@pass_cli
def cancel_cmd(
    cli: CliContext, pool: str, item_ids: tuple[str, ...], listing: bool, limit: int, offset: int, as_json: bool
) -> None:
    """Cancel items of POOL: a pending one at once, a running one at its worker's next heartbeat.

    Every ID is checked first: an unknown ID, or one already done, poisoned or
    cancelled, and nothing is cancelled. Cancelled items are kept (--list shows
    them), counted by `workhive status`, purged by age, and `workhive requeue POOL ID`
    runs one again.
    """
    if bool(item_ids) == listing:
        raise click.UsageError("give the IDs of the items to cancel, or --list (not both)")

    if listing:

        async def cancelled() -> list[dict[str, Any]]:
            async with cli.hive(create=False) as hive:
                await require_pool(hive, pool)
                items = await hive.pool(pool).items(ItemState.CANCELLED, limit=limit, offset=offset)
                return [
                    {
                        "id": i.id,
                        "attempts": i.attempts,
                        "max_attempts": i.max_attempts,
                        "claimed_by": i.claimed_by,
                        "finished_at": i.finished_at,
                        "data": i.data,
                    }
                    for i in items
                ]

        found = cli.run(cancelled)
        if as_json:
            emit_json(found)
        elif not found:
            echo(f"no cancelled items in {pool}")
        else:
            rows: list[tuple[Any, ...]] = [("ID", "ATTEMPTS", "WAS HELD BY")]
            rows.extend((i["id"], f"{i['attempts']}/{i['max_attempts']}", i["claimed_by"] or "-") for i in found)
            table(rows)
        return

    async def cancel() -> dict[str, ItemState]:
        async with cli.hive(create=False) as hive:
            await require_pool(hive, pool)
            return await hive.pool(pool).cancel(item_ids)

    done = cli.run(cancel)
    running = sorted(i for i, state in done.items() if state is ItemState.CLAIMED)
    if as_json:
        emit_json({"pool": pool, "cancelled": {i: state.value for i, state in done.items()}})
        return
    echo(
        f"cancelled {len(done)} item{'s' if len(done) != 1 else ''} in {pool}"
        + (f"; {len(running)} running (their workers stop them at their next heartbeat)" if running else "")
    )
