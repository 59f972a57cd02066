"""The workhive plugin: ``workhive import flatmachines PATH.db``.

Imported by the workhive CLI at start-up, so it imports only click here; the
importer (and workhive's storage) load when the command runs. It never
imports flatmachines: the flatmachines file is read with ``sqlite3``.
"""

from __future__ import annotations

from typing import Any

import click

from workhive import hookimpl

__all__ = ["import_group", "workhive_cli_commands"]


@click.group("import")
def import_group() -> None:
    """Move work from another system's store into this hive."""


@import_group.command("flatmachines")
@click.argument("path", type=click.Path(dir_okay=False, path_type=str))
@click.option("--dry-run", is_flag=True, help="Report what would move; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON for scripts.")
@click.pass_obj
def import_flatmachines_cmd(cli: Any, path: str, dry_run: bool, as_json: bool) -> None:
    """Move a flatmachines SQLite file's pending and claimed items and its workers into the hive.

    \b
    Items keep their pool, data, attempts and max_retries; claimed items come
    back pending (their claims were made outside workhive and cannot be fenced).
    Workers keep their status, heartbeat, host, pid, capabilities and metadata.
    Running it again moves nothing twice. The flatmachines file is only read.

    \b
      workhive --storage sqlite:///.workhive/hive.db import flatmachines data/workers.sqlite --dry-run
    """
    from workhive_flatmachines.importer import import_flatmachines, print_report

    async def run() -> Any:
        async with cli.hive() as hive:
            return await import_flatmachines(path, hive, dry_run=dry_run)

    report = cli.run(run)
    print_report(report, as_json=as_json)


@hookimpl
def workhive_cli_commands() -> list[click.Command]:
    return [import_group]
