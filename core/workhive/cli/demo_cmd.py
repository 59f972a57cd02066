"""``workhive demo``: a fleet summarising documents against a local fake LLM API, end to end."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from workhive.cli.context import CliContext, emit_json, format_age, json_option, pass_cli, table


def print_demo_report(report: Any) -> None:
    """The human report: what was done, what the rate limits and the bad key did, and the storage check."""
    click.echo("")
    click.echo(
        f"workhive demo: {report.pushed} summarisation tasks, {report.processes} processes × "
        f"{report.concurrency} workers, storage {report.storage}"
    )
    click.echo(f"  done        {report.done} of {report.pushed} in {format_age(report.elapsed)}")
    click.echo(
        f"  retries     {report.released + report.failed} "
        f"({report.released} after a 429 or a refused key, no attempt spent; {report.failed} after errors)"
    )
    rows: list[tuple[Any, ...]] = [("  KEY", "CALLS", "OK", "429s", "401s", "STATE")]
    for name, seen in sorted(report.server.items()):
        state = "disabled (401)" if name in report.disabled else "in use"
        rows.append((f"  {name}", seen["requests"], seen["ok"], seen["rate_limited"], seen["unauthorized"], state))
    table(rows)
    if report.rate_limited:
        seen = ", ".join(f"{k} {v}" for k, v in sorted(report.rate_limited.items()))
        click.echo(f"  429s seen by the fleet: {seen}")
    for name, reason in sorted(report.disabled.items()):
        click.echo(f"  disabled key: {name} ({reason if len(reason) <= 90 else reason[:89] + '…'})")
    if report.nothing_lost:
        click.echo(f"  nothing lost: {report.done} DONE items in storage = {report.pushed} pushed, none pending")
    else:
        click.echo(
            f"  LOST WORK: {report.done} done, {report.poisoned} poisoned, {report.unfinished} unfinished "
            f"of {report.pushed} pushed (fleet: {report.fleet_reason})"
        )


@click.command("demo")
@click.option("--items", type=click.IntRange(min=1, max=100_000), default=300, show_default=True)
@click.option("--processes", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Workers per process.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".workhive/demo"),
    show_default=True,
    help="Where the demo's hive lives (wiped at the start).",
)
@json_option
@pass_cli
def demo_cmd(cli: CliContext, items: int, processes: int, concurrency: int, directory: Path, as_json: bool) -> None:
    """Summarise documents with a fleet against a local fake LLM API, then prove nothing was lost.

    Starts a real HTTP server on 127.0.0.1 that rate-limits each key (429 +
    Retry-After) and refuses one key (401), puts three demo keys in the
    environment, pushes the tasks into a fresh SQLite hive, runs the fleet with
    the example handler until the pool drains, and checks storage.
    """
    from workhive.demo.run import run_demo
    from workhive.runtime.progress import renderer_for

    if not as_json:
        click.echo(f"starting the fake LLM API and {processes} worker processes for {items} tasks…", err=True)
    report = run_demo(
        items=items,
        processes=processes,
        concurrency=concurrency,
        directory=directory,
        manager=cli.manager,
        on_progress=renderer_for("none" if as_json else "auto", sys.stderr),
    )
    if as_json:
        emit_json(report.to_json())
    else:
        print_demo_report(report)
    click.get_current_context().exit(report.exit_code)
