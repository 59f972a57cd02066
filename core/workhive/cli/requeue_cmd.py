"""``workhive requeue POOL [ID…|--all]``: give poisoned items fresh attempts."""

from __future__ import annotations

import click

from workhive.cli.context import CliContext, echo, emit_json, json_option, pass_cli, require_pool
from workhive.errors import InvalidArgument
from workhive.models import ItemState


@click.command("requeue")
@click.argument("pool")
@click.argument("item_ids", metavar="[ID]...", nargs=-1)
@click.option("--all", "requeue_all", is_flag=True, help="Requeue every poisoned item of POOL.")
@click.option("--fresh", is_flag=True, help="Forget the items' durable steps (ctx.step) too, so every step runs again.")
@json_option
@pass_cli
def requeue_cmd(
    cli: CliContext, pool: str, item_ids: tuple[str, ...], requeue_all: bool, fresh: bool, as_json: bool
) -> None:
    """Move poisoned items of POOL (the IDs given, or --all) back to pending with fresh attempts.

    Cancelled items are requeued by ID (--all takes poisoned ones only). Every ID is
    checked first: an unknown ID, or one neither poisoned nor cancelled, and nothing is requeued.
    Their durable steps are kept, so they resume where they stopped; --fresh forgets them.
    """
    if bool(item_ids) == requeue_all:
        raise click.UsageError("give the IDs of poisoned items to requeue, or --all (not both)")

    async def requeue() -> int:
        async with cli.hive(create=False) as hive:
            await require_pool(hive, pool)
            target = hive.pool(pool)
            if requeue_all:
                return await target.requeue(fresh=fresh)
            for item_id in item_ids:
                item = await target.get(item_id)  # ItemNotFound for an unknown id
                if item.state is not ItemState.POISONED and item.state is not ItemState.CANCELLED:
                    raise InvalidArgument(
                        f"item {item_id} of pool {pool!r} is {item.state.value}, not poisoned or cancelled; "
                        "nothing was requeued",
                        item_id=item_id,
                    )
            return await target.requeue(item_ids, fresh=fresh)

    count = cli.run(requeue)
    if as_json:
        emit_json({"pool": pool, "requeued": count})
        return
    echo(f"requeued {count} item{'s' if count != 1 else ''} in {pool}")
