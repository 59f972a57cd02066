"""``workhive dead POOL``: poisoned items and the error that poisoned each."""

from __future__ import annotations

from typing import Any

import click

from workhive.cli.context import CliContext, echo, emit_json, json_option, pass_cli, require_pool, table
from workhive.terminal import human


def _one_line(text: str | None, width: int) -> str:
    if not text:
        return "-"
    line = text.strip().splitlines()[-1] if text.strip() else text  # a traceback's last line says what happened
    line = human(line, one_line=True)  # escaped before it is cut, so the width is what is shown
    return line if len(line) <= width else line[: width - 1] + "…"


@click.command("dead")
@click.argument("pool")
@click.option("--limit", type=click.IntRange(min=1, max=100_000), default=100, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0)
@json_option
@pass_cli
def dead_cmd(cli: CliContext, pool: str, limit: int, offset: int, as_json: bool) -> None:
    """List POOL's poisoned (dead-lettered) items, oldest first; `workhive requeue` retries them."""

    async def listing() -> tuple[list[dict[str, Any]], int]:
        async with cli.hive(create=False) as hive:
            await require_pool(hive, pool)
            target = hive.pool(pool)
            items = await target.dead(limit=limit, offset=offset)
            total = (await target.stats()).poisoned
            return [
                {
                    "id": i.id,
                    "attempts": i.attempts,
                    "max_attempts": i.max_attempts,
                    "error": i.error,
                    "data": i.data,
                    "finished_at": i.finished_at,
                }
                for i in items
            ], total

    items, total = cli.run(listing)
    if as_json:
        emit_json(items)
        return
    if not items:
        echo(f"no poisoned items in {pool}")
        return
    rows: list[tuple[Any, ...]] = [("ID", "ATTEMPTS", "ERROR")]
    rows.extend((i["id"], f"{i['attempts']}/{i['max_attempts']}", _one_line(i["error"], 100)) for i in items)
    table(rows)
    if total > offset + len(items):
        echo(f"… {total - offset - len(items)} more (use --offset/--limit)")
