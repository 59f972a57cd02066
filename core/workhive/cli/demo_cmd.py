"""``workhive demo``: a fleet summarising documents against a local fake LLM API, end to end."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from workhive.cli.context import CliContext, echo, emit_json, format_age, json_option, pass_cli, table


def print_demo_report(report: Any) -> None:
    """The human report: what was done, what the rate limits and the bad key did, and the storage check."""
    echo("")
    echo(
        f"workhive demo: {report.pushed} summarisation tasks, {report.processes} processes × "
        f"{report.concurrency} workers, storage {report.storage}"
    )
    echo(f"  done        {report.done} of {report.pushed} in {format_age(report.elapsed)}")
    echo(
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
        echo(f"  429s seen by the fleet: {seen}")
    for name, reason in sorted(report.disabled.items()):
        echo(f"  disabled key: {name} ({reason if len(reason) <= 90 else reason[:89] + '…'})")
    budgets = {"known": "known limits (env:…?rpm=)", "learned": "learned limits (--learn-limits)", "off": "off"}
    echo(
        f"  budgets     {budgets.get(report.budgets, report.budgets)}: "
        f"{report.budget_waits} calls waited for their key's budget instead of meeting a 429"
    )
    if report.nothing_lost:
        echo(f"  nothing lost: {report.done} DONE items in storage = {report.pushed} pushed, none pending")
    else:
        echo(
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
@click.option(
    "--budgets",
    type=click.Choice(["known", "learned", "off", "compare"]),
    default="known",
    show_default=True,
    help="Rate budgets: the keys' limit given, learned from 429s, none (429s and cooldowns), or all three in turn.",
)
@json_option
@pass_cli
def demo_cmd(
    cli: CliContext, items: int, processes: int, concurrency: int, directory: Path, budgets: str, as_json: bool
) -> None:
    """Summarise documents with a fleet against a local fake LLM API, then prove nothing was lost.

    Starts a real HTTP server on 127.0.0.1 that rate-limits each key (429 +
    Retry-After) and refuses one key (401), puts three demo keys in the
    environment, pushes the tasks into a fresh SQLite hive, runs the fleet with
    the example handler until the pool drains, and checks storage. --budgets
    compare runs it with the keys' limits known, learned, and off, and shows
    the 429s and throughput of each.
    """
    from workhive.demo.run import run_demo
    from workhive.runtime.progress import renderer_for

    if not as_json:
        echo(f"starting the fake LLM API and {processes} worker processes for {items} tasks…", err=True)
    modes = ["off", "known", "learned"] if budgets == "compare" else [budgets]
    reports = []
    for mode in modes:
        report = run_demo(
            items=items,
            processes=processes,
            concurrency=concurrency,
            directory=directory,
            manager=cli.manager,
            on_progress=renderer_for("none" if as_json else "auto", sys.stderr),
            budgets=mode,
        )
        reports.append(report)
        if not as_json:
            print_demo_report(report)
    if as_json:
        emit_json(reports[0].to_json() if len(reports) == 1 else [r.to_json() for r in reports])
    elif len(reports) > 1:
        print_budget_comparison(reports)
    click.get_current_context().exit(max(r.exit_code for r in reports))


def print_budget_comparison(reports: list[Any]) -> None:
    """One line per budget mode: throughput and the 429s the API answered."""
    echo("")
    echo("budgets compared (same tasks, same keys, same fake API limits):")
    rows: list[tuple[Any, ...]] = [("  BUDGETS", "DONE", "ITEMS/S", "CALLS", "429s", "429 SHARE", "BUDGET WAITS")]
    for r in reports:
        calls = sum(seen["requests"] for seen in r.server.values())
        limited = sum(seen["rate_limited"] for seen in r.server.values())
        rows.append(
            (
                f"  {r.budgets}",
                r.done,
                f"{r.done / r.elapsed:.1f}" if r.elapsed else "-",
                calls,
                limited,
                f"{limited / calls:.1%}" if calls else "-",
                r.budget_waits,
            )
        )
    table(rows)
